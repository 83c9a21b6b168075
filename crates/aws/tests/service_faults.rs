//! What DynamoDB Local never does, injected at the HTTP boundary: a fake
//! DynamoDB endpoint answers TransactWriteItems from a script (conflicts,
//! throttling) and then succeeds. `DynamoStore` retries a transaction
//! cancelled only by TransactionConflict, counts the retries, and gives up
//! after its bound with the cancellation; throttling is retried by the SDK;
//! and a transaction whose answer was lost (the connection dropped) is sent
//! again with the same ClientRequestToken (the SDK fills one in and keeps
//! it across retries; Postbox relies on that, so this test guards it).
//! Runs with plain `cargo test`: no service needed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use postbox_aws::DynamoStore;
use postbox_item::{AttributeValue, Item};
use postbox_store::api::{TransactPut, TransactWriteItem, TransactWriteItemsInput};
use postbox_store::{ItemStore, StoreError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CONFLICT: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException","Message":"Transaction cancelled, please refer cancellation reasons for specific reasons [TransactionConflict]","CancellationReasons":[{"Code":"TransactionConflict","Message":"Transaction is ongoing for the item"}]}"#;
/// Close the connection without answering, as a lost answer.
const DROP: &str = "drop";
const THROTTLED: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Rate of requests exceeds the allowed throughput."}"#;

/// Request bodies a fake endpoint received.
type Bodies = Arc<Mutex<Vec<String>>>;

/// A DynamoDB endpoint answering each TransactWriteItems with the next
/// scripted error body (HTTP 400; [`DROP`]: no answer at all), then `{}`;
/// its URL and the number of requests it got.
async fn fake(script: Vec<&'static str>) -> (String, Arc<AtomicUsize>) {
    let (url, calls, _) = fake_recording(script).await;
    (url, calls)
}

/// [`fake`], also keeping each request's body.
async fn fake_recording(script: Vec<&'static str>) -> (String, Arc<AtomicUsize>, Bodies) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let script = Arc::new(Mutex::new(std::collections::VecDeque::from(script)));
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let bodies: Bodies = Arc::default();
    let kept = bodies.clone();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let (script, calls, kept) = (script.clone(), counted.clone(), kept.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    // One request: the header, then Content-Length bytes.
                    let header_end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        let mut chunk = [0u8; 4096];
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..header_end]).to_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    while buf.len() < header_end + length {
                        let mut chunk = [0u8; 4096];
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    kept.lock().unwrap().push(
                        String::from_utf8_lossy(&buf[header_end..header_end + length]).into_owned(),
                    );
                    buf.drain(..header_end + length);
                    calls.fetch_add(1, Ordering::SeqCst);
                    let next = script.lock().unwrap().pop_front();
                    let (status, body) = match next {
                        Some(DROP) => return,
                        Some(error) => ("400 Bad Request", error),
                        None => ("200 OK", "{}"),
                    };
                    let answer = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if socket.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, calls, bodies)
}

fn one_put() -> TransactWriteItemsInput {
    TransactWriteItemsInput {
        transact_items: vec![TransactWriteItem {
            put: Some(TransactPut {
                table_name: "t".into(),
                item: Item::from([("pk".to_owned(), AttributeValue::S("a".into()))]),
                ..Default::default()
            }),
            ..Default::default()
        }],
        client_request_token: None,
    }
}

#[tokio::test]
async fn a_transaction_cancelled_by_conflicts_is_retried_and_counted() {
    let (url, calls) = fake(vec![CONFLICT, CONFLICT]).await;
    let store = DynamoStore::new(&postbox_aws::local_config(&url).await, "");
    store.transact_write_items(one_put()).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    let stats = store.stats();
    assert_eq!((stats.conflict_retries, stats.conflicts_given_up), (2, 0));
}

#[tokio::test]
async fn conflicts_past_the_bound_give_up_with_the_cancellation() {
    let (url, calls) = fake(vec![CONFLICT; 20]).await;
    let store = DynamoStore::new(&postbox_aws::local_config(&url).await, "");
    match store.transact_write_items(one_put()).await {
        Err(StoreError::TransactionCanceled { reasons }) => {
            assert_eq!(reasons[0].code, "TransactionConflict");
        }
        other => panic!("expected the cancellation, got {other:?}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), 8, "bounded attempts");
    assert_eq!(store.stats().conflicts_given_up, 1);
}

#[tokio::test]
async fn throttling_is_retried_with_backoff_by_the_sdk() {
    let (url, calls) = fake(vec![THROTTLED, THROTTLED]).await;
    let store = DynamoStore::new(&postbox_aws::local_config(&url).await, "");
    store.transact_write_items(one_put()).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    // Counted, for the node's metrics: two throttled attempts, two retries.
    let sdk = store.stats().sdk;
    assert_eq!((sdk.throttled, sdk.retries), (2, 2), "{sdk:?}");
}

#[tokio::test]
async fn a_transaction_whose_answer_was_lost_is_sent_again_with_the_same_token() {
    let (url, calls, bodies) = fake_recording(vec![DROP]).await;
    let store = DynamoStore::new(&postbox_aws::local_config(&url).await, "");
    store.transact_write_items(one_put()).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2, "the SDK sent it again");
    // A lost answer is a retry, not throttling.
    let sdk = store.stats().sdk;
    assert_eq!((sdk.throttled, sdk.retries), (0, 1), "{sdk:?}");
    let tokens: Vec<serde_json::Value> = bodies
        .lock()
        .unwrap()
        .iter()
        .map(|b| {
            serde_json::from_str::<serde_json::Value>(b).unwrap()["ClientRequestToken"].clone()
        })
        .collect();
    assert!(tokens[0].is_string(), "no ClientRequestToken: {tokens:?}");
    assert_eq!(tokens[0], tokens[1], "a repeat must carry the first token");
}
