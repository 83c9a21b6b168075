//! The listener's limits: a client that sends its header a byte at a time
//! or holds a connection without using it is closed after the header
//! timeout, and connections beyond the cap are closed at once, while a
//! client already connected keeps being answered.

use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use postbox_server::{Limits, serve_with};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn start(limits: Limits) -> (String, tokio::sync::oneshot::Sender<()>) {
    let app = Router::new().route("/ping", get(|| async { "pong" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve_with(
        app,
        listener,
        async move {
            let _ = stopped.await;
        },
        limits,
        None,
    ));
    (addr, stop)
}

/// Whether the server closes `s` within `within` (a read gives end of file
/// or an error).
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {} // an error answer before the close
        }
    }
}

/// One request on a kept-alive connection; the status line.
async fn ping(s: &mut TcpStream) -> String {
    s.write_all(b"GET /ping HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("an answer within 5 s")
        .unwrap();
    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
    text.lines().next().unwrap_or("").to_owned()
}

#[tokio::test]
async fn a_header_sent_a_byte_at_a_time_is_cut_off() {
    let (addr, _stop) = start(Limits {
        max_connections: 64,
        header_timeout: Duration::from_millis(500),
    })
    .await;
    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(b"GET /ping HTTP/1.1\r\n").await.unwrap();
    let started = Instant::now();
    let mut cut = false;
    for b in b"x-slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if s.write_all(&[*b]).await.is_err() {
            cut = true;
            break;
        }
    }
    assert!(
        cut || closed_within(&mut s, Duration::from_secs(2)).await,
        "a slow header held the connection for {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn an_idle_connection_is_closed() {
    let (addr, _stop) = start(Limits {
        max_connections: 64,
        header_timeout: Duration::from_millis(500),
    })
    .await;
    let mut used = TcpStream::connect(&addr).await.unwrap();
    assert_eq!(ping(&mut used).await, "HTTP/1.1 200 OK");
    let mut idle = TcpStream::connect(&addr).await.unwrap();
    assert!(closed_within(&mut idle, Duration::from_secs(5)).await);
    // A kept-alive connection left idle after a request is closed too.
    assert!(closed_within(&mut used, Duration::from_secs(5)).await);
}

#[tokio::test]
async fn connections_beyond_the_cap_are_closed_and_a_connected_client_is_still_answered() {
    let (addr, _stop) = start(Limits {
        max_connections: 8,
        header_timeout: Duration::from_secs(10),
    })
    .await;
    let mut client = TcpStream::connect(&addr).await.unwrap();
    assert_eq!(ping(&mut client).await, "HTTP/1.1 200 OK");
    // Seven idle connections fill the cap; a hundred more are closed at once.
    let mut held = Vec::new();
    for _ in 0..7 {
        held.push(TcpStream::connect(&addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut refused = 0;
    for _ in 0..100 {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        if closed_within(&mut s, Duration::from_secs(2)).await {
            refused += 1;
        }
    }
    assert_eq!(refused, 100, "connections beyond the cap were kept");
    for _ in 0..20 {
        assert_eq!(ping(&mut client).await, "HTTP/1.1 200 OK");
    }
    // Once a slot is free, a new client is served.
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut late = TcpStream::connect(&addr).await.unwrap();
    assert_eq!(ping(&mut late).await, "HTTP/1.1 200 OK");
}
