//! Visibility timeouts through the API: redelivery with receive counts,
//! per-receive timeouts, ChangeMessageVisibility, stale receipt handles.

mod common;

use common::*;
use postbox_queue::{NewMessage, QueueError};

#[tokio::test]
async fn redelivery_after_the_timeout_counts_receives() {
    let e = env().await;
    e.queues
        .create_queue("q", attrs(&[("VisibilityTimeout", "10")]))
        .await
        .unwrap();
    e.queues.send("q", NewMessage::new("m")).await.unwrap();
    let first = e.queues.receive("q", recv(1, None)).await.unwrap();
    assert_eq!(first[0].system["ApproximateReceiveCount"], "1");
    e.clock.advance_ms(9_999);
    assert!(
        e.queues
            .receive("q", recv(1, None))
            .await
            .unwrap()
            .is_empty()
    );
    e.clock.advance_ms(1);
    let second = e.queues.receive("q", recv(1, Some(60))).await.unwrap();
    assert_eq!(second[0].system["ApproximateReceiveCount"], "2");
    assert_eq!(
        second[0].system["ApproximateFirstReceiveTimestamp"],
        first[0].system["ApproximateFirstReceiveTimestamp"]
    );
    assert_ne!(second[0].receipt_handle, first[0].receipt_handle);
    // The stale handle succeeds without deleting; the current one deletes.
    e.queues
        .delete("q", &first[0].receipt_handle)
        .await
        .unwrap();
    assert_eq!(e.queues.stats("q").unwrap().in_flight, 1);
    e.queues
        .delete("q", &second[0].receipt_handle)
        .await
        .unwrap();
    let s = e.queues.stats("q").unwrap();
    assert_eq!(
        (s.visible, s.in_flight, s.deleted, s.received),
        (0, 0, 1, 2)
    );
}

#[tokio::test]
async fn change_visibility_hides_and_releases() {
    let e = env().await;
    e.queues.create_queue("q", attrs(&[])).await.unwrap();
    e.queues.send("q", NewMessage::new("m")).await.unwrap();
    let got = e.queues.receive("q", recv(1, None)).await.unwrap();
    e.queues
        .change_visibility("q", &got[0].receipt_handle, 0)
        .await
        .unwrap();
    let again = e.queues.receive("q", recv(1, None)).await.unwrap();
    assert_eq!(bodies(&again), ["m"]);
    assert!(matches!(
        e.queues
            .change_visibility("q", &got[0].receipt_handle, 10)
            .await,
        Err(QueueError::MessageNotInflight)
    ));
    assert!(matches!(
        e.queues
            .change_visibility("q", &again[0].receipt_handle, 43_201)
            .await,
        Err(QueueError::InvalidParameterValue(_))
    ));
}

#[tokio::test]
async fn receipt_handles_belong_to_their_queue() {
    let e = env().await;
    e.queues.create_queue("a", attrs(&[])).await.unwrap();
    e.queues.create_queue("b", attrs(&[])).await.unwrap();
    e.queues.send("a", NewMessage::new("m")).await.unwrap();
    let got = e.queues.receive("a", recv(1, None)).await.unwrap();
    assert!(matches!(
        e.queues.delete("b", &got[0].receipt_handle).await,
        Err(QueueError::ReceiptHandleIsInvalid(_))
    ));
    assert!(matches!(
        e.queues.delete("a", "garbage").await,
        Err(QueueError::ReceiptHandleIsInvalid(_))
    ));
}

#[tokio::test]
async fn delays_per_queue_and_per_message() {
    let e = env().await;
    e.queues
        .create_queue("q", attrs(&[("DelaySeconds", "5")]))
        .await
        .unwrap();
    e.queues
        .send("q", NewMessage::new("queue delay"))
        .await
        .unwrap();
    let mut now = NewMessage::new("no delay");
    now.delay_seconds = Some(0);
    e.queues.send("q", now).await.unwrap();
    assert_eq!(
        bodies(&e.queues.receive("q", recv(10, None)).await.unwrap()),
        ["no delay"]
    );
    assert_eq!(e.queues.stats("q").unwrap().delayed, 1);
    e.clock.advance_ms(5_000);
    assert_eq!(
        bodies(&e.queues.receive("q", recv(10, None)).await.unwrap()),
        ["queue delay"]
    );
}

#[tokio::test]
async fn retention_drops_old_messages() {
    let e = env().await;
    e.queues
        .create_queue("q", attrs(&[("MessageRetentionPeriod", "60")]))
        .await
        .unwrap();
    e.queues.send("q", NewMessage::new("old")).await.unwrap();
    e.clock.advance_ms(30_000);
    e.queues.send("q", NewMessage::new("young")).await.unwrap();
    e.clock.advance_ms(31_000);
    assert_eq!(
        bodies(&e.queues.receive("q", recv(10, None)).await.unwrap()),
        ["young"]
    );
    assert_eq!(e.queues.stats("q").unwrap().expired, 1);
}
