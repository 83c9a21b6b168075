//! `send_in`: enqueueing inside a caller's write operation, committed in
//! the same transaction as the caller's other writes (a relay's "enqueue and
//! advance the checkpoint").

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
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(bodies(&e.queues.receive("events.fifo", recv(10, None)).await.unwrap()), ["e1", "e2"]);
}

#[tokio::test]
async fn a_missing_queue_is_a_typed_error_not_a_storage_failure() {
    let e = env().await;
    let queues = e.queues.clone();
    let r = e.store.submit(move |ctx| queues.send_in(ctx, "nosuch", vec![NewMessage::new("x")])).await.unwrap();
    assert_eq!(r, Err(QueueError::QueueDoesNotExist));
}
