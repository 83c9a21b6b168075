//! Reopening the file: queues, messages, in-flight state, receive counts
//! and deduplication ids survive; sequence numbers keep growing.

mod common;

use std::sync::Arc;

use common::*;
use postbox_queue::{NewMessage, Queues, QueuesOptions};
use postbox_store::ManualClock;

#[tokio::test]
async fn state_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = Arc::new(ManualClock::new(T0));
    let (std_handle, seq1) = {
        let (store, queues) = open_at(&path, clock.clone()).await;
        fifo(&queues, "f.fifo").await;
        queues
            .create_queue("q", attrs(&[("VisibilityTimeout", "60")]))
            .await
            .unwrap();
        let s1 = queues.send("f.fifo", grouped("a1", "a")).await.unwrap();
        queues.send("f.fifo", grouped("a2", "a")).await.unwrap();
        queues.send("q", NewMessage::new("std")).await.unwrap();
        let got = queues.receive("q", recv(1, None)).await.unwrap();
        drop((store, queues));
        (got[0].receipt_handle.clone(), s1.sequence_number.unwrap())
    };
    let (_store, queues) = open_at(&path, clock.clone()).await;
    assert_eq!(queues.list_queues(""), ["f.fifo", "q"]);
    assert_eq!(
        queues
            .queue_attributes("q", &["VisibilityTimeout".into()])
            .unwrap()["VisibilityTimeout"],
        "60"
    );
    // The in-flight message is still hidden, and its handle still deletes it.
    let s = queues.stats("q").unwrap();
    assert_eq!((s.visible, s.in_flight), (0, 1));
    queues.delete("q", &std_handle).await.unwrap();
    assert_eq!(queues.stats("q").unwrap().in_flight, 0);
    // FIFO order and deduplication survive.
    let dup = queues.send("f.fifo", grouped("a1", "a")).await.unwrap();
    assert_eq!(dup.sequence_number.as_deref(), Some(seq1.as_str()));
    let got = queues.receive("f.fifo", recv(10, None)).await.unwrap();
    assert_eq!(bodies(&got), ["a1", "a2"]);
    assert_eq!(got[1].system["ApproximateReceiveCount"], "1");
    let later = queues.send("f.fifo", grouped("a3", "a")).await.unwrap();
    assert!(later.sequence_number.unwrap() > seq1);
}

#[tokio::test]
async fn deleted_and_purged_queues_stay_gone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = Arc::new(ManualClock::new(T0));
    {
        let (_store, queues) = open_at(&path, clock.clone()).await;
        for q in ["gone", "purged"] {
            queues.create_queue(q, attrs(&[])).await.unwrap();
            queues.send(q, NewMessage::new("m")).await.unwrap();
        }
        queues.delete_queue("gone").await.unwrap();
        queues.purge_queue("purged").await.unwrap();
    }
    let (_store, queues) = open_at(&path, clock).await;
    assert_eq!(queues.list_queues(""), ["purged"]);
    assert_eq!(queues.stats("purged").unwrap().visible, 0);
}

/// Files of earlier versions keep deduplication ids keyed by id; opening
/// one moves them to the table keyed by expiry, so they still deduplicate
/// and still expire.
#[tokio::test]
async fn deduplication_ids_of_the_earlier_layout_are_moved_at_open() {
    use redb::{ReadableTable, TableDefinition};
    // The queues' two layouts of deduplication ids (`storage`).
    const QUEUE_DEDUP: TableDefinition<(u64, u128), (u64, u64, u128)> =
        TableDefinition::new("postbox_queue_dedup");
    const QUEUE_DEDUP_BY_EXPIRY: TableDefinition<(u64, u64, u128), (u64, u128)> =
        TableDefinition::new("postbox_queue_dedup_by_expiry");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = Arc::new(ManualClock::new(T0));
    let seq1 = {
        let (store, queues) = open_at(&path, clock.clone()).await;
        fifo(&queues, "f.fifo").await;
        let s1 = queues.send("f.fifo", grouped("a1", "a")).await.unwrap();
        // A file of this version has no table of the earlier layout.
        let earlier = store
            .submit(|ctx| ctx.transaction().exists(QUEUE_DEDUP))
            .await
            .unwrap();
        assert!(!earlier);
        // Rewrite the file's deduplication rows in the earlier layout.
        let moved = store
            .submit(|ctx| {
                let txn = ctx.transaction();
                let mut new = txn.open_table(QUEUE_DEDUP_BY_EXPIRY)?;
                let mut rows = Vec::new();
                for row in new.iter().unwrap() {
                    let (k, v) = row.unwrap();
                    rows.push((k.value(), v.value()));
                }
                new.delete_range((0, 0, 0)..=(u64::MAX, u64::MAX, u128::MAX))
                    .unwrap();
                let mut old = txn.open_table(QUEUE_DEDUP)?;
                for ((id, at, key), (seq, message)) in &rows {
                    old.insert((*id, *key), (*seq, *at, *message)).unwrap();
                }
                Ok(rows.len())
            })
            .await
            .unwrap();
        assert_eq!(moved, 1);
        drop((store, queues));
        s1.sequence_number.unwrap()
    };
    let (store, queues) = open_at(&path, clock.clone()).await;
    let dup = queues.send("f.fifo", grouped("a1", "a")).await.unwrap();
    assert_eq!(dup.sequence_number.as_deref(), Some(seq1.as_str()));
    let left = store
        .submit(|ctx| {
            let txn = ctx.transaction();
            let old = txn.open_table(QUEUE_DEDUP)?.iter().unwrap().count();
            let new = txn
                .open_table(QUEUE_DEDUP_BY_EXPIRY)?
                .iter()
                .unwrap()
                .count();
            Ok((old, new))
        })
        .await
        .unwrap();
    assert_eq!(left, (0, 1));
    // Five minutes after the first send the id no longer deduplicates.
    clock.advance_ms(301_000);
    let later = queues.send("f.fifo", grouped("a1", "a")).await.unwrap();
    assert_ne!(later.sequence_number.as_deref(), Some(seq1.as_str()));
}

/// Files of earlier versions keep a message's state alone (`states`), and
/// its group, send time and size only in its payload; opening one moves
/// them into `metas`, so messages keep their order, visibility and receive
/// counts, and later opens read no payload.
#[tokio::test]
async fn message_states_of_the_earlier_layout_are_moved_at_open() {
    use redb::{ReadableTable, TableDefinition};
    type Meta = (u64, u32, u64, u64, u64, u32, Option<&'static str>);
    // The queues' two layouts of a message's state (`storage`).
    const QUEUE_STATES: TableDefinition<(u64, u64), (u64, u32, u64, u64)> =
        TableDefinition::new("postbox_queue_states");
    const QUEUE_METAS: TableDefinition<(u64, u64), Meta> =
        TableDefinition::new("postbox_queue_metas");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = Arc::new(ManualClock::new(T0));
    let handle = {
        let (store, queues) = open_at(&path, clock.clone()).await;
        fifo(&queues, "f.fifo").await;
        queues
            .create_queue("q", attrs(&[("VisibilityTimeout", "60")]))
            .await
            .unwrap();
        for (body, group) in [("a1", "a"), ("b1", "b"), ("a2", "a")] {
            queues.send("f.fifo", grouped(body, group)).await.unwrap();
        }
        queues.send("q", NewMessage::new("std")).await.unwrap();
        let got = queues.receive("q", recv(1, None)).await.unwrap();
        // A file of this version has no table of the earlier layout.
        let earlier = store
            .submit(|ctx| ctx.transaction().exists(QUEUE_STATES))
            .await
            .unwrap();
        assert!(!earlier);
        // Rewrite the file's message states in the earlier layout.
        let moved = store
            .submit(|ctx| {
                let txn = ctx.transaction();
                let mut new = txn.open_table(QUEUE_METAS)?;
                let mut rows = Vec::new();
                for row in new.iter().unwrap() {
                    let (k, v) = row.unwrap();
                    let (visible_at, count, first, token, ..) = v.value();
                    rows.push((k.value(), (visible_at, count, first, token)));
                }
                new.delete_range((0, 0)..=(u64::MAX, u64::MAX)).unwrap();
                let mut old = txn.open_table(QUEUE_STATES)?;
                for (key, state) in &rows {
                    old.insert(*key, *state).unwrap();
                }
                Ok(rows.len())
            })
            .await
            .unwrap();
        assert_eq!(moved, 4);
        drop((store, queues));
        got[0].receipt_handle.clone()
    };
    let (store, queues) = open_at(&path, clock.clone()).await;
    let left = store
        .submit(|ctx| {
            let txn = ctx.transaction();
            let old = txn.open_table(QUEUE_STATES)?.iter().unwrap().count();
            let new = txn.open_table(QUEUE_METAS)?.iter().unwrap().count();
            Ok((old, new))
        })
        .await
        .unwrap();
    assert_eq!(left, (0, 4));
    // The received message is still hidden and its handle still deletes it.
    let s = queues.stats("q").unwrap();
    assert_eq!((s.visible, s.in_flight), (0, 1));
    queues.delete("q", &handle).await.unwrap();
    // The FIFO groups keep their order: a group's next message waits for
    // its first to go.
    let got = queues.receive("f.fifo", recv(10, None)).await.unwrap();
    assert_eq!(bodies(&got), ["a1", "a2", "b1"]);
    assert_eq!(got[0].system["MessageGroupId"], "a");
    // Reopened again, from `metas` alone: the receive count is kept.
    drop((store, queues));
    let (_store, queues) = open_at(&path, clock.clone()).await;
    clock.advance_ms(31_000);
    let again = queues.receive("f.fifo", recv(10, None)).await.unwrap();
    assert_eq!(bodies(&again), ["a1", "a2", "b1"]);
    assert_eq!(again[0].system["ApproximateReceiveCount"], "2");
}

/// The queues' tables are theirs, kept in the store's file: the store
/// replays their changes only when opened with their set. Queues refuse a
/// store opened without it, and a file that holds queues refuses to open
/// without it, since its commit log may hold queue changes the store could
/// not replay.
#[tokio::test]
async fn a_file_with_queues_opens_only_with_the_queues_tables() {
    use postbox_store::embedded::EmbeddedStore;
    use postbox_store::testing::options;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = Arc::new(ManualClock::new(T0));
    {
        let bare = EmbeddedStore::open(&path, options(clock.clone())).unwrap();
        let Err(e) = Queues::open(bare, QueuesOptions::default()).await else {
            panic!("queues opened on a store without their tables");
        };
        let e = e.to_string();
        assert!(e.contains("opened without the queues' tables"), "{e}");
    }
    {
        let (_store, queues) = open_at(&path, clock.clone()).await;
        fifo(&queues, "f.fifo").await;
        queues.send("f.fifo", grouped("a1", "a")).await.unwrap();
    }
    let Err(e) = EmbeddedStore::open(&path, options(clock.clone())) else {
        panic!("a file with queues opened without their tables");
    };
    let e = e.to_string();
    assert!(
        e.contains("holds table postbox_queue_") && e.contains("not opened to keep"),
        "{e}"
    );
    let (_store, queues) = open_at(&path, clock).await;
    assert_eq!(queues.stats("f.fifo").unwrap().visible, 1);
}
