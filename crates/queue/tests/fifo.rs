//! FIFO queues through the API: order per group, group blocking, other
//! groups proceeding, deduplication within and after the window.

mod common;

use common::*;
use postbox_queue::{NewMessage, QueueError};

#[tokio::test]
async fn order_within_a_group_and_blocking_while_in_flight() {
    let e = env().await;
    fifo(&e.queues, "f.fifo").await;
    for b in ["a1", "a2", "a3", "b1"] {
        e.queues.send("f.fifo", grouped(b, &b[..1])).await.unwrap();
    }
    let first = e.queues.receive("f.fifo", recv(1, None)).await.unwrap();
    assert_eq!(bodies(&first), ["a1"]);
    // a2 waits behind a1; group b proceeds.
    assert_eq!(
        bodies(&e.queues.receive("f.fifo", recv(10, None)).await.unwrap()),
        ["b1"]
    );
    assert!(
        e.queues
            .receive("f.fifo", recv(10, None))
            .await
            .unwrap()
            .is_empty()
    );
    e.queues
        .delete("f.fifo", &first[0].receipt_handle)
        .await
        .unwrap();
    assert_eq!(
        bodies(&e.queues.receive("f.fifo", recv(10, None)).await.unwrap()),
        ["a2", "a3"]
    );
}

#[tokio::test]
async fn sequence_numbers_grow_and_duplicates_answer_the_original() {
    let e = env().await;
    fifo(&e.queues, "f.fifo").await;
    let s1 = e.queues.send("f.fifo", grouped("x", "g")).await.unwrap();
    let s2 = e
        .queues
        .send("f.fifo", NewMessage::new("y").group("g").dedup("other"))
        .await
        .unwrap();
    assert!(s2.sequence_number > s1.sequence_number);
    let dup = e
        .queues
        .send(
            "f.fifo",
            NewMessage::new("different body").group("g").dedup("x"),
        )
        .await
        .unwrap();
    assert_eq!(dup.message_id, s1.message_id);
    assert_eq!(dup.sequence_number, s1.sequence_number);
    assert_eq!(e.queues.stats("f.fifo").unwrap().visible, 2);
}

#[tokio::test]
async fn deduplication_ends_after_five_minutes() {
    let e = env().await;
    fifo(&e.queues, "f.fifo").await;
    let s1 = e.queues.send("f.fifo", grouped("x", "g")).await.unwrap();
    e.clock.advance_ms(299_999);
    assert_eq!(
        e.queues
            .send("f.fifo", grouped("x", "g"))
            .await
            .unwrap()
            .message_id,
        s1.message_id
    );
    e.clock.advance_ms(1);
    assert_ne!(
        e.queues
            .send("f.fifo", grouped("x", "g"))
            .await
            .unwrap()
            .message_id,
        s1.message_id
    );
}

#[tokio::test]
async fn content_based_deduplication_uses_the_body() {
    let e = env().await;
    e.queues
        .create_queue(
            "c.fifo",
            attrs(&[("FifoQueue", "true"), ("ContentBasedDeduplication", "true")]),
        )
        .await
        .unwrap();
    let a = e
        .queues
        .send("c.fifo", NewMessage::new("same").group("g"))
        .await
        .unwrap();
    let b = e
        .queues
        .send("c.fifo", NewMessage::new("same").group("h"))
        .await
        .unwrap();
    assert_eq!(a.message_id, b.message_id);
}

#[tokio::test]
async fn fifo_send_rules() {
    let e = env().await;
    fifo(&e.queues, "f.fifo").await;
    let no_group = e
        .queues
        .send("f.fifo", NewMessage::new("x").dedup("d"))
        .await;
    assert!(matches!(no_group, Err(QueueError::MissingParameter(_))));
    let no_dedup = e
        .queues
        .send("f.fifo", NewMessage::new("x").group("g"))
        .await;
    assert!(matches!(
        no_dedup,
        Err(QueueError::InvalidParameterValue(_))
    ));
    let mut delayed = grouped("x", "g");
    delayed.delay_seconds = Some(5);
    assert!(matches!(
        e.queues.send("f.fifo", delayed).await,
        Err(QueueError::InvalidParameterValue(_))
    ));
}

#[tokio::test]
async fn a_thousand_groups_are_served_in_batches() {
    let e = env().await;
    fifo(&e.queues, "f.fifo").await;
    for g in 0..1000 {
        let batch = (0..2)
            .map(|i| grouped(&format!("{g}-{i}"), &g.to_string()))
            .collect();
        for r in e.queues.send_batch("f.fifo", batch).await.unwrap() {
            r.unwrap();
        }
    }
    let mut seen = std::collections::HashMap::new();
    loop {
        let got = e.queues.receive("f.fifo", recv(10, None)).await.unwrap();
        if got.is_empty() {
            break;
        }
        let handles: Vec<String> = got.iter().map(|m| m.receipt_handle.clone()).collect();
        for m in &got {
            let (g, i) = m.body.split_once('-').unwrap();
            let last = seen.insert(g.to_owned(), i.parse::<u32>().unwrap());
            assert_eq!(
                last.map_or(0, |l| l + 1),
                i.parse::<u32>().unwrap(),
                "order within group {g}"
            );
        }
        for r in e.queues.delete_batch("f.fifo", handles).await.unwrap() {
            r.unwrap();
        }
    }
    assert_eq!(seen.len(), 1000);
    assert!(seen.values().all(|&i| i == 1));
}
