//! A server that is absent, stopped, silent or hangs up mid-answer gives
//! the `Unavailable` error, worded so an operator knows what happened and
//! whether the request may have been applied, never a panic; and calls
//! succeed again once a server answers on the address.

mod common;

use std::time::Duration;

use common::{pair, req};
use postbox_client::{Endpoint, EndpointOptions, RemoteQueues, RemoteStore};
use postbox_queue::{NewMessage, QueueClient, QueueError};
use postbox_store::api::GetItemInput;
use postbox_store::{ItemStore, StoreError};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn get() -> GetItemInput {
    req(json!({"TableName": "t", "Key": {"pk": {"S": "a"}}}))
}

/// A loopback address nothing listens on.
async fn closed_port() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

fn quick(url: &str) -> Endpoint {
    Endpoint::with_options(
        url,
        EndpointOptions {
            timeout: Duration::from_millis(400),
            ..EndpointOptions::default()
        },
    )
    .unwrap()
}

#[tokio::test]
async fn an_absent_server_is_unavailable_and_nothing_was_sent() {
    let endpoint = quick(&closed_port().await);
    let err = RemoteStore::new(endpoint.clone())
        .get_item(get())
        .await
        .unwrap_err();
    let StoreError::Unavailable(message) = &err else {
        panic!("expected Unavailable, got {err:?}");
    };
    assert!(err.is_retryable());
    assert!(
        message.contains("cannot connect to http://127.0.0.1:"),
        "{message}"
    );
    assert!(message.contains("DynamoDB_20120810.GetItem"), "{message}");
    assert!(message.contains("nothing was sent"), "{message}");

    let err = RemoteQueues::new(endpoint)
        .send("q", NewMessage::new("x"))
        .await
        .unwrap_err();
    assert!(matches!(err, QueueError::Unavailable(_)), "{err:?}");
    assert!(err.is_retryable());
    assert!(err.to_string().contains("AmazonSQS.GetQueueUrl"), "{err}");
}

#[tokio::test]
async fn a_stopped_server_is_unavailable_and_a_new_one_is_used() {
    let mut p = pair().await;
    let queues = p.remote_queues.clone();
    p.served_queues
        .create_queue("q", Default::default())
        .await
        .unwrap();
    queues.send("q", NewMessage::new("before")).await.unwrap();
    p.remote.list_tables().await.unwrap();
    p.stop_server().await;

    let err = p.remote.list_tables().await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    let err = queues
        .send("q", NewMessage::new("during"))
        .await
        .unwrap_err();
    assert!(matches!(err, QueueError::Unavailable(_)), "{err:?}");

    // Served again on the same address: the same clients carry on.
    let listener = TcpListener::bind(p.addr).await.unwrap();
    let app = postbox_server::app(postbox_server::Services {
        store: p.served_store.clone(),
        queues: Some(p.served_queues.clone()),
        test_clock: None,
        // The access keys live in the store: the clients' key still works.
        auth: postbox_server::WireAuth::sigv4(),
    });
    tokio::spawn(postbox_server::serve(app, listener, std::future::pending()));
    queues.send("q", NewMessage::new("after")).await.unwrap();
    p.remote.list_tables().await.unwrap();
}

#[tokio::test]
async fn a_silent_server_times_out_with_the_outcome_unknown() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let err = RemoteStore::new(quick(&url))
        .get_item(get())
        .await
        .unwrap_err();
    let StoreError::Unavailable(message) = &err else {
        panic!("expected Unavailable, got {err:?}");
    };
    assert!(message.contains("no answer from"), "{message}");
    assert!(message.contains("may or may not"), "{message}");
}

#[tokio::test]
async fn a_server_that_hangs_up_mid_request_is_unavailable() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = socket.read(&mut buf).await;
            // Half an answer, then gone.
            let _ = socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"Item\"")
                .await;
            drop(socket);
        }
    });
    let err = RemoteStore::new(quick(&url))
        .get_item(get())
        .await
        .unwrap_err();
    let StoreError::Unavailable(message) = &err else {
        panic!("expected Unavailable, got {err:?}");
    };
    assert!(message.contains("may or may not"), "{message}");
}
