//! Requests that abuse the API get a specific 4xx and change nothing: a
//! body sent too slowly (408), a broken chunked body (400, not 413), an
//! X-Correlation-Id too long to store in an event forever, and a
//! Last-Event-ID at the end of the number range (which once wrapped to 0
//! and replayed the whole log).

mod common;

use std::time::Duration;

use common::{emit, env, log_of, order_emit};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends `head` then each of `parts` (with `pause` before each) on a raw
/// connection to the server; the status line's code and the body.
async fn raw(base: &str, head: &str, parts: &[&[u8]], pause: Duration) -> (u16, String) {
    let addr = base.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    for p in parts {
        tokio::time::sleep(pause).await;
        if s.write_all(p).await.is_err() {
            break;
        }
    }
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, text)
}

#[tokio::test]
async fn a_body_sent_too_slowly_is_408_and_writes_nothing() {
    let env = env().await;
    let body = order_emit("slow", "acme");
    let head = format!(
        "POST /v1/events HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        env.acme,
        body.len()
    );
    // The test env allows 500 ms for the body; this one takes 1.5 s.
    let (a, b) = body.as_bytes().split_at(10);
    let (code, text) = raw(&env.base, &head, &[a, b], Duration::from_millis(750)).await;
    assert_eq!(code, 408, "{text}");
    assert!(text.contains("body_timeout"), "{text}");
    assert!(log_of(&env, &env.acme).await.is_empty());
}

#[tokio::test]
async fn a_broken_chunked_body_is_400_not_413() {
    let env = env().await;
    let head = format!(
        "POST /v1/events HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n",
        env.acme
    );
    let (code, text) = raw(
        &env.base,
        &head,
        &[b"5\r\n{\"typ\r\nzz-not-a-size\r\n\r\n"],
        Duration::ZERO,
    )
    .await;
    assert_eq!(code, 400, "{text}");
    assert!(text.contains("invalid_body"), "{text}");
    assert!(log_of(&env, &env.acme).await.is_empty());
}

#[tokio::test]
async fn a_correlation_id_over_128_characters_is_refused() {
    let env = env().await;
    let long = "c".repeat(60_000);
    let a = emit(
        &env,
        &env.acme,
        &[("x-correlation-id", long.as_str())],
        order_emit("1", "acme"),
    )
    .await;
    let shown: String = a.text.chars().take(300).collect();
    assert_eq!(
        (a.status, a.code()),
        (400, "invalid_correlation_id".into()),
        "{shown}"
    );
    let ok = "c".repeat(128);
    let a = emit(
        &env,
        &env.acme,
        &[("x-correlation-id", ok.as_str())],
        order_emit("2", "acme"),
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.text);
    assert_eq!(a.json()["event"]["correlation_id"], ok.as_str());
    assert_eq!(log_of(&env, &env.acme).await.len(), 1);
}

#[tokio::test]
async fn a_last_event_id_at_the_end_of_the_range_does_not_replay_the_log() {
    let env = env().await;
    let a = emit(&env, &env.acme, &[], order_emit("1", "acme")).await;
    assert_eq!(a.status, 201, "{}", a.text);
    let head = format!(
        "GET /v1/events/stream HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\nlast-event-id: 18446744073709551615\r\nconnection: close\r\n\r\n",
        env.acme
    );
    let (code, text) = raw(&env.base, &head, &[], Duration::ZERO).await;
    assert_eq!(code, 400, "{text}");
    assert!(!text.contains("ORDER_PLACED"), "{text}");
}

#[tokio::test]
async fn a_token_holds_at_most_eight_log_streams() {
    let env = env().await;
    let addr = env.base.trim_start_matches("http://").to_owned();
    let open = |token: String| {
        let addr = addr.clone();
        async move {
            let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let head = format!(
                "GET /v1/events/stream HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\n\r\n"
            );
            s.write_all(head.as_bytes()).await.unwrap();
            let mut buf = vec![0u8; 4096];
            let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
                .await
                .unwrap()
                .unwrap();
            (s, String::from_utf8_lossy(&buf[..n]).into_owned())
        }
    };
    let mut held = Vec::new();
    for _ in 0..8 {
        let (s, head) = open(env.acme.clone()).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        held.push(s);
    }
    let (_, head) = open(env.acme.clone()).await;
    assert!(head.starts_with("HTTP/1.1 429"), "{head}");
    assert!(head.to_lowercase().contains("retry-after"), "{head}");
    assert!(head.contains("too_many_streams"), "{head}");
    // Another token is not affected.
    let (_, head) = open(env.globex.clone()).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
}

#[tokio::test]
async fn a_10_mb_body_and_10000_deep_nesting_are_refused_and_the_server_goes_on() {
    let env = env().await;
    let big = format!(
        r#"{{"type":"ORDER_PLACED","payload":{{"order_id":"{}"}}}}"#,
        "x".repeat(10 << 20)
    );
    let a = emit(&env, &env.acme, &[], big).await;
    assert_eq!((a.status, a.code()), (413, "body_too_large".into()));
    let deep = format!(
        r#"{{"type":"ORDER_PLACED","payload":{{"order_id":"1","n":{}1{}}}}}"#,
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let a = emit(&env, &env.acme, &[], deep).await;
    assert_eq!(
        a.status,
        400,
        "{}",
        a.text.chars().take(300).collect::<String>()
    );
    let a = emit(&env, &env.acme, &[], order_emit("after", "acme")).await;
    assert_eq!(a.status, 201, "{}", a.text);
    assert_eq!(log_of(&env, &env.acme).await.len(), 1);
}

#[tokio::test]
async fn a_tenant_over_its_emit_rate_gets_429_with_retry_after() {
    let catalog = format!(
        "{}\n[limits]\ntenant_emits_per_second = 1\ntenant_emit_burst = 2\n",
        common::CATALOG
    );
    let env = common::env_with(&catalog).await;
    for i in 0..2 {
        let a = emit(&env, &env.acme, &[], order_emit(&format!("r{i}"), "acme")).await;
        assert_eq!(a.status, 201, "{}", a.text);
    }
    let a = emit(&env, &env.acme, &[], order_emit("r2", "acme")).await;
    assert_eq!(
        (a.status, a.code()),
        (429, "rate_limited".into()),
        "{}",
        a.text
    );
    assert_eq!(
        a.headers.get("retry-after").and_then(|v| v.to_str().ok()),
        Some("1")
    );
    // Another tenant has its own budget.
    let a = emit(&env, &env.globex, &[], order_emit("g0", "globex")).await;
    assert_eq!(a.status, 201, "{}", a.text);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let a = emit(&env, &env.acme, &[], order_emit("r3", "acme")).await;
    assert_eq!(a.status, 201, "{}", a.text);
    assert_eq!(
        log_of(&env, &env.acme).await.len(),
        3,
        "the refused emit wrote nothing"
    );
}
