//! Retention: the sweeper drops messages older than the queue's retention
//! period on its own, without a receive touching the queue.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use postbox_queue::{NewMessage, Queues, QueuesOptions};
use postbox_store::ManualClock;
use postbox_store::embedded::{Durability, EmbeddedOptions, EmbeddedStore};

#[tokio::test]
async fn the_sweeper_drops_expired_messages() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let options = EmbeddedOptions {
        durability: Durability::NoFsync,
        clock: clock.clone(),
        ..EmbeddedOptions::default()
    };
    let store = EmbeddedStore::open(
        dir.path().join("q.redb"),
        options.keeping(postbox_queue::tables()),
    )
    .unwrap();
    let queues = Queues::open(
        store,
        QueuesOptions {
            clock: clock.clone(),
            sweep_interval: Duration::from_millis(20),
            ..QueuesOptions::default()
        },
    )
    .await
    .unwrap();
    queues
        .create_queue("q", attrs(&[("MessageRetentionPeriod", "60")]))
        .await
        .unwrap();
    queues.send("q", NewMessage::new("old")).await.unwrap();
    clock.advance_ms(59_000);
    queues.send("q", NewMessage::new("young")).await.unwrap();
    clock.advance_ms(1_000);
    // Generous for a loaded CI machine; it usually takes one interval.
    for _ in 0..500 {
        if queues.stats("q").unwrap().expired == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let s = queues.stats("q").unwrap();
    assert_eq!((s.expired, s.visible), (1, 1));
    assert_eq!(s.oldest_age_ms, 1_000);
}

#[tokio::test]
async fn the_default_retention_is_four_days() {
    let e = env().await;
    e.queues.create_queue("q", attrs(&[])).await.unwrap();
    e.queues.send("q", NewMessage::new("m")).await.unwrap();
    e.clock.advance_ms(345_599_999);
    assert_eq!(e.queues.stats("q").unwrap().visible, 1);
    e.clock.advance_ms(1);
    assert!(
        e.queues
            .receive("q", recv(10, None))
            .await
            .unwrap()
            .is_empty()
    );
}
