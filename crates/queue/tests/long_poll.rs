//! Long polling: a waiting receive is woken by a send (not by polling),
//! by a FIFO group's release, and gives up at its wait time.

mod common;

use std::time::{Duration, Instant};

use common::*;
use postbox_queue::{NewMessage, QueueResult, Queues, ReceiveOptions, ReceivedMessage};
use tokio::task::JoinHandle;

fn wait(seconds: i64) -> ReceiveOptions {
    ReceiveOptions {
        max_messages: Some(10),
        wait_time_seconds: Some(seconds),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_send_wakes_a_waiting_receive() {
    let e = env().await;
    e.queues.create_queue("q", attrs(&[])).await.unwrap();
    let q = e.queues.clone();
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        (q.receive("q", wait(20)).await.unwrap(), started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    e.queues.send("q", NewMessage::new("wake")).await.unwrap();
    let (got, took) = waiter.await.unwrap();
    assert_eq!(bodies(&got), ["wake"]);
    assert!(took < Duration::from_secs(2), "woken after {took:?}");
}

#[tokio::test]
async fn a_released_fifo_group_wakes_a_waiting_receive() {
    let e = env().await;
    fifo(&e.queues, "f.fifo").await;
    for b in ["a1", "a2"] {
        e.queues.send("f.fifo", grouped(b, "a")).await.unwrap();
    }
    let first = e.queues.receive("f.fifo", recv(1, None)).await.unwrap();
    let q = e.queues.clone();
    let waiter = tokio::spawn(async move { q.receive("f.fifo", wait(20)).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(100)).await;
    e.queues
        .delete("f.fifo", &first[0].receipt_handle)
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("woken")
        .unwrap();
    assert_eq!(bodies(&got), ["a2"]);
}

#[tokio::test]
async fn an_empty_wait_ends_at_its_time() {
    let e = env().await;
    e.queues.create_queue("q", attrs(&[])).await.unwrap();
    let started = Instant::now();
    assert!(e.queues.receive("q", wait(1)).await.unwrap().is_empty());
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

#[tokio::test]
async fn deleting_the_queue_ends_a_wait() {
    let e = env().await;
    e.queues.create_queue("q", attrs(&[])).await.unwrap();
    let q = e.queues.clone();
    let waiter = tokio::spawn(async move { q.receive("q", wait(20)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    e.queues.delete_queue("q").await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("woken")
        .unwrap();
    assert!(r.is_err());
}

/// A long poll of an in-process consumer (`answer_before_sync`), which a
/// send can hand messages to inside its own commit.
fn parked(seconds: i64) -> ReceiveOptions {
    ReceiveOptions {
        answer_before_sync: true,
        ..wait(seconds)
    }
}

/// Starts a parked poll on `queue` and lets it reach its wait.
async fn park_on(queues: &Queues, queue: &str) -> JoinHandle<QueueResult<Vec<ReceivedMessage>>> {
    let (q, queue) = (queues.clone(), queue.to_owned());
    let waiter = tokio::spawn(async move { q.receive(&queue, parked(20)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    waiter
}

#[tokio::test]
async fn a_send_hands_its_messages_to_a_parked_poll_in_its_own_commit() {
    let e = env().await;
    fifo(&e.queues, "f.fifo").await;
    let waiter = park_on(&e.queues, "f.fifo").await;
    let commits = e.store.writer_stats().commits;
    let sent = e
        .queues
        .send_batch(
            "f.fifo",
            ["a1", "a2", "b1"]
                .iter()
                .map(|b| grouped(b, &b[..1]))
                .collect(),
        )
        .await
        .unwrap();
    assert!(sent.iter().all(Result::is_ok), "{sent:?}");
    let got = waiter.await.unwrap().unwrap();
    assert_eq!(bodies(&got), ["a1", "a2", "b1"]);
    assert_eq!(
        e.store.writer_stats().commits - commits,
        1,
        "the send and the receive took more than one commit"
    );
    // Handed out as a receive hands out: in flight, receipts valid.
    assert!(
        e.queues
            .receive("f.fifo", recv(10, None))
            .await
            .unwrap()
            .is_empty()
    );
    for m in &got {
        e.queues.delete("f.fifo", &m.receipt_handle).await.unwrap();
    }
    let stats = e.queues.stats("f.fifo").unwrap();
    assert_eq!((stats.visible, stats.in_flight), (0, 0), "{stats:?}");
}

#[tokio::test]
async fn a_dropped_parked_poll_is_handed_nothing() {
    let e = env().await;
    e.queues.create_queue("q", attrs(&[])).await.unwrap();
    let waiter = park_on(&e.queues, "q").await;
    waiter.abort();
    let _ = waiter.await;
    e.queues.send("q", NewMessage::new("m")).await.unwrap();
    assert_eq!(
        bodies(&e.queues.receive("q", recv(10, None)).await.unwrap()),
        ["m"],
        "the message went to a poll that no longer waits"
    );
}

#[tokio::test]
async fn parked_polls_are_handed_messages_oldest_first_ten_each() {
    let e = env().await;
    e.queues.create_queue("q", attrs(&[])).await.unwrap();
    let mut waiters = Vec::new();
    for _ in 0..2 {
        waiters.push(park_on(&e.queues, "q").await);
    }
    for batch in 0..2 {
        let messages = (0..10)
            .map(|i| NewMessage::new(format!("m{}", batch * 10 + i)))
            .collect();
        e.queues.send_batch("q", messages).await.unwrap();
    }
    let second = waiters.pop().unwrap().await.unwrap().unwrap();
    let first = waiters.pop().unwrap().await.unwrap().unwrap();
    let names = |from: usize| {
        (from..from + 10)
            .map(|i| format!("m{i}"))
            .collect::<Vec<_>>()
    };
    assert_eq!(bodies(&first), names(0));
    assert_eq!(bodies(&second), names(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_dropped_while_a_send_hands_it_messages_gives_them_back() {
    let e = env().await;
    e.queues.create_queue("q", attrs(&[])).await.unwrap();
    let waiter = park_on(&e.queues, "q").await;
    // The send takes the poll; the rest of its batch takes a while, and the
    // poll's consumer stops meanwhile (a worker told to stop).
    let (queues, store) = (e.queues.clone(), e.store.clone());
    let send = tokio::spawn(async move {
        store
            .submit(move |ctx| {
                let sent = queues.send_in(ctx, "q", vec![NewMessage::new("m")])?;
                assert!(sent.is_ok(), "{sent:?}");
                std::thread::sleep(Duration::from_millis(300));
                Ok(())
            })
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    waiter.abort();
    let _ = waiter.await;
    send.await.unwrap().unwrap();
    let got = e.queues.receive("q", wait(5)).await.unwrap();
    let stats = e.queues.stats("q").unwrap();
    assert_eq!(bodies(&got), ["m"], "left in flight with nobody: {stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_whose_hand_off_batch_fails_is_answered_by_the_store() {
    let e = env().await;
    e.queues.create_queue("q", attrs(&[])).await.unwrap();
    let waiter = park_on(&e.queues, "q").await;
    let queues = e.queues.clone();
    let failed: Result<(), _> = e
        .store
        .submit(move |ctx| {
            let _ = queues.send_in(ctx, "q", vec![NewMessage::new("m")])?;
            Err(postbox_store::StoreError::Storage(
                "simulated I/O error".into(),
            ))
        })
        .await;
    assert!(failed.is_err());
    let joined = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the poll was not answered");
    let received = joined.expect("the poll panicked");
    assert!(received.is_err(), "{received:?}");
}
