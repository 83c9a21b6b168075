//! The queues on SQS through the official SDK, against an SQS-compatible
//! server (ministack): what the worker and the tools ask of a queue, in
//! order, with SQS's errors.
//!
//! `scripts/test` starts the server and runs these with
//! `POSTBOX_TEST_SQS_ENDPOINT` set; a plain `cargo test` ignores them.

use postbox_aws::SqsQueues;
use postbox_queue::{NewMessage, QueueClient, QueueError, ReceiveOptions};

async fn queues(test: &str) -> SqsQueues {
    let endpoint = std::env::var("POSTBOX_TEST_SQS_ENDPOINT").expect(
        "POSTBOX_TEST_SQS_ENDPOINT: the URL of an SQS-compatible server (scripts/test starts one)",
    );
    let config = postbox_aws::local_config(&endpoint).await;
    SqsQueues::new(&config, &format!("t{}-{test}-", fastrand::u32(..)))
}

async fn create_fifo(q: &SqsQueues, name: &str) {
    q.client()
        .create_queue()
        .queue_name(q.name(name))
        .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap();
}

fn message(group: &str, id: &str) -> NewMessage {
    NewMessage {
        group_id: Some(group.into()),
        deduplication_id: Some(id.into()),
        ..NewMessage::new(format!("{{\"id\": \"{id}\"}}"))
    }
}

fn receive(n: i64, visibility: i64) -> ReceiveOptions {
    ReceiveOptions {
        max_messages: Some(n),
        visibility_timeout: Some(visibility),
        ..Default::default()
    }
}

#[tokio::test]
#[ignore = "needs an SQS server: scripts/test runs it"]
async fn a_fifo_queue_sends_receives_hides_and_deletes_in_group_order() {
    let q = queues("fifo").await;
    create_fifo(&q, "events.fifo").await;
    let sent = q
        .send_batch(
            "events.fifo",
            vec![
                message("acme", "1"),
                message("acme", "2"),
                message("globex", "3"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(sent.len(), 3);
    assert!(
        sent.iter()
            .all(|r| r.as_ref().is_ok_and(|s| s.sequence_number.is_some()))
    );

    let got = q.receive("events.fifo", receive(10, 30)).await.unwrap();
    let bodies: Vec<&str> = got.iter().map(|m| m.body.as_str()).collect();
    assert_eq!(bodies.len(), 3, "{bodies:?}");
    let acme: Vec<&str> = got
        .iter()
        .filter(|m| m.system.get("MessageGroupId").map(String::as_str) == Some("acme"))
        .map(|m| m.body.as_str())
        .collect();
    assert_eq!(acme, [r#"{"id": "1"}"#, r#"{"id": "2"}"#]);
    assert_eq!(
        got[0]
            .system
            .get("ApproximateReceiveCount")
            .map(String::as_str),
        Some("1")
    );

    // Hidden while in flight; visible again after a visibility change to 0.
    assert!(
        q.receive("events.fifo", receive(10, 30))
            .await
            .unwrap()
            .is_empty()
    );
    let first = got[0].receipt_handle.clone();
    q.change_visibility("events.fifo", &first, 0).await.unwrap();
    let rest: Vec<String> = got[1..].iter().map(|m| m.receipt_handle.clone()).collect();
    let deleted = q.delete_batch("events.fifo", rest).await.unwrap();
    assert!(deleted.iter().all(Result::is_ok), "{deleted:?}");
    let again = q.receive("events.fifo", receive(10, 30)).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].body, got[0].body);
    q.delete("events.fifo", &again[0].receipt_handle)
        .await
        .unwrap();

    let attrs = q
        .queue_attributes("events.fifo", &["All".to_owned()])
        .await
        .unwrap();
    assert_eq!(attrs.get("FifoQueue").map(String::as_str), Some("true"));
    assert_eq!(
        attrs.get("ApproximateNumberOfMessages").map(String::as_str),
        Some("0")
    );
}

#[tokio::test]
#[ignore = "needs an SQS server: scripts/test runs it"]
async fn errors_keep_sqs_codes() {
    let q = queues("errors").await;
    let missing = q.receive("nope.fifo", receive(1, 1)).await;
    assert_eq!(missing.unwrap_err(), QueueError::QueueDoesNotExist);
    create_fifo(&q, "e.fifo").await;
    // A FIFO queue refuses a message without a group id, per entry.
    let out = q
        .send_batch("e.fifo", vec![NewMessage::new("x"), message("g", "1")])
        .await
        .unwrap();
    assert!(
        matches!(
            out[0],
            Err(QueueError::MissingParameter(_) | QueueError::InvalidParameterValue(_))
        ),
        "{:?}",
        out[0]
    );
    assert!(out[1].is_ok(), "{:?}", out[1]);
}
