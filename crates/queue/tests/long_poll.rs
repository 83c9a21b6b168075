//! Long polling: a waiting receive is woken by a send (not by polling),
//! by a FIFO group's release, and gives up at its wait time.

mod common;

use std::time::{Duration, Instant};

use common::*;
use postbox_queue::{NewMessage, ReceiveOptions};

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
