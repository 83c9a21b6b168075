//! `send_in` (and `prepare_send` + `send_prepared_in`): enqueueing inside a
//! caller's write operation, committed in the same transaction as the
//! caller's other writes (a relay's "enqueue and advance the checkpoint").

mod common;

use common::*;
use postbox_queue::{NewMessage, QueueError};

#[tokio::test]
async fn messages_commit_with_the_callers_write() {
    let e = env().await;
    fifo(&e.queues, "events.fifo").await;
    let queues = e.queues.clone();
    let results = e
        .store
        .submit(move |ctx| {
            let batch = vec![grouped("e1", "tenant-1"), grouped("e2", "tenant-1")];
            let sent = queues.send_in(ctx, "events.fifo", batch)?;
            // ... the relay's checkpoint would be written here, last.
            Ok(sent)
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(
        bodies(
            &e.queues
                .receive("events.fifo", recv(10, None))
                .await
                .unwrap()
        ),
        ["e1", "e2"]
    );
}

#[tokio::test]
async fn one_invalid_message_sends_none() {
    let e = env().await;
    fifo(&e.queues, "events.fifo").await;
    let queues = e.queues.clone();
    let r = e
        .store
        .submit(move |ctx| {
            queues.send_in(
                ctx,
                "events.fifo",
                vec![grouped("ok", "g"), NewMessage::new("no group")],
            )
        })
        .await
        .unwrap();
    assert!(matches!(r, Err(QueueError::MissingParameter(_))));
    assert_eq!(e.queues.stats("events.fifo").unwrap().visible, 0);
}

#[tokio::test]
async fn a_missing_queue_is_a_typed_error_not_a_storage_failure() {
    let e = env().await;
    let queues = e.queues.clone();
    let r = e
        .store
        .submit(move |ctx| queues.send_in(ctx, "nosuch", vec![NewMessage::new("x")]))
        .await
        .unwrap();
    assert_eq!(r, Err(QueueError::QueueDoesNotExist));
}

#[tokio::test]
async fn prepared_off_the_writer_then_sent_inside_it() {
    let e = env().await;
    fifo(&e.queues, "events.fifo").await;
    let prepared = e
        .queues
        .prepare_send(
            "events.fifo",
            vec![grouped("e1", "tenant-1"), grouped("e2", "tenant-2")],
        )
        .unwrap();
    assert_eq!(prepared.len(), 2);
    let queues = e.queues.clone();
    let sent = e
        .store
        .submit(move |ctx| queues.send_prepared_in(ctx, prepared))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(sent.len(), 2);
    let received = e
        .queues
        .receive("events.fifo", recv(10, None))
        .await
        .unwrap();
    let mut got = bodies(&received);
    got.sort();
    assert_eq!(got, ["e1", "e2"]);
    // The answer is the messages' ids.
    let mut ids: Vec<String> = received.iter().map(|m| m.message_id.clone()).collect();
    ids.sort();
    let mut sent = sent;
    sent.sort();
    assert_eq!(sent, ids);
    // Validation happens when preparing: one bad message, nothing prepared.
    assert!(matches!(
        e.queues.prepare_send(
            "events.fifo",
            vec![grouped("ok", "g"), NewMessage::new("no group")]
        ),
        Err(QueueError::MissingParameter(_))
    ));
}

#[tokio::test]
async fn a_queue_deleted_after_preparing_takes_nothing() {
    let e = env().await;
    fifo(&e.queues, "events.fifo").await;
    let prepared = e
        .queues
        .prepare_send("events.fifo", vec![grouped("e1", "tenant-1")])
        .unwrap();
    e.queues.delete_queue("events.fifo").await.unwrap();
    let queues = e.queues.clone();
    let r = e
        .store
        .submit(move |ctx| queues.send_prepared_in(ctx, prepared))
        .await
        .unwrap();
    assert_eq!(r, Err(QueueError::QueueDoesNotExist));
    fifo(&e.queues, "events.fifo").await;
    assert_eq!(e.queues.stats("events.fifo").unwrap().visible, 0);
}

/// The relay step end to end: read new stream records, enqueue them and
/// advance the reader's checkpoint, all in one write transaction; when the
/// enqueue fails the checkpoint stays where it was.
#[tokio::test]
async fn enqueue_and_checkpoint_commit_together() {
    use postbox_store::api::{CreateTableInput, PutItemInput};
    use postbox_store::{ChangeStreams, ItemStore, StoreError};
    use serde_json::json;

    let e = env().await;
    let table: CreateTableInput = serde_json::from_value(json!({
        "TableName": "events",
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
        "BillingMode": "PAY_PER_REQUEST",
        "StreamSpecification": {"StreamEnabled": true, "StreamViewType": "NEW_IMAGE"}
    }))
    .unwrap();
    e.store.create_table(table).await.unwrap();
    for pk in ["a", "b"] {
        let put: PutItemInput =
            serde_json::from_value(json!({"TableName": "events", "Item": {"pk": {"S": pk}}}))
                .unwrap();
        e.store.put_item(put).await.unwrap();
    }
    fifo(&e.queues, "events.fifo").await;

    let relay = |queue: &'static str| {
        let queues = e.queues.clone();
        move |ctx: &mut postbox_store::embedded::WriteContext<'_>| {
            let after = ctx.checkpoint("events", "relay")?.unwrap_or(0);
            let records = ctx.read_stream("events", after, 10)?;
            let Some(last) = records.last().map(|r| r.sequence_number) else {
                return Ok(0);
            };
            let messages = records
                .iter()
                .map(|r| {
                    grouped(&format!("record {}", r.sequence_number), "tenant")
                        .dedup(r.sequence_number.to_string())
                })
                .collect();
            // Validate-first: a queue error fails the step before anything is written.
            if let Err(e) = queues.send_in(ctx, queue, messages)? {
                return Err(StoreError::validation(format!("enqueue failed: {e}")));
            }
            ctx.set_checkpoint("events", "relay", last)?;
            Ok(records.len())
        }
    };

    assert!(e.store.submit(relay("nosuch.fifo")).await.is_err());
    assert_eq!(e.store.checkpoint("events", "relay").await.unwrap(), None);

    assert_eq!(e.store.submit(relay("events.fifo")).await.unwrap(), 2);
    let head = e.store.stream_head("events").await.unwrap();
    assert_eq!(
        e.store.checkpoint("events", "relay").await.unwrap(),
        Some(head)
    );
    let got = e
        .queues
        .receive("events.fifo", recv(10, None))
        .await
        .unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(e.store.submit(relay("events.fifo")).await.unwrap(), 0);
}
