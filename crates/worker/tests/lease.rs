//! Leases in the worker loop: a long handler keeps its claim and its
//! message by renewing both; a worker whose lease was taken over while its
//! handler ran has its completion refused (fencing) and commits nothing.
//!
//! Checked when written: with renewal disabled (the renewal interval set to
//! a thousand leases) `long_handler_renews_its_lease_and_its_message` fails
//! (the other claim is taken). The fencing test fails on the naive design,
//! where the takeover claim itself is refused.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use postbox_queue::ReceiveOptions;
use postbox_store::{Clock, ManualClock, SystemClock};
use postbox_worker::claim::{ClaimTarget, Decision, Lease};
use postbox_worker::{ClaimKey, ClaimOutcome, Status, Worker, handler};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_handler_renews_its_lease_and_its_message() {
    let env = env(catalog(&durable("ship", "ORDER_*", 5))).await;
    let h = handler(|d| async move {
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        Ok(vec![effect(&d.idempotency_key)])
    });
    let mut o = options("slow");
    o.lease = Duration::from_millis(900);
    let w = Worker::new(
        env.store.clone(),
        env.queues.clone(),
        &env.catalog,
        HashMap::from([("h::ship".to_owned(), h)]),
        o,
    )
    .await
    .unwrap();
    let e = emit(&env, "acme", "ORDER_PLACED", 1).await;
    pipe(&env, &e).await;
    let running = tokio::spawn({
        let w = w.clone();
        async move { w.run_once().await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(1_800)).await;
    // Twice the lease has passed: without renewal both would have run out.
    let target = ClaimTarget {
        key: ClaimKey::new(&e.id, "ship"),
        tenant: "acme".into(),
        seq: 1,
    };
    let lease = Lease {
        owner: "thief".into(),
        token: "thief".into(),
        lease_ms: 60_000,
    };
    let got = w
        .inbox()
        .claim(&target, &lease, SystemClock.now_ms(), 5)
        .await
        .unwrap();
    assert!(
        matches!(got, ClaimOutcome::Refused(Decision::Busy { .. }, _)),
        "{got:?}"
    );
    let options = ReceiveOptions {
        max_messages: Some(10),
        wait_time_seconds: Some(0),
        ..Default::default()
    };
    assert!(
        env.queues.receive(QUEUE, options).await.unwrap().is_empty(),
        "the message became visible"
    );
    let report = running.await.unwrap();
    assert_eq!(report.deleted, 1);
    assert_eq!(
        w.inbox().get(&target.key).await.unwrap().unwrap().status,
        Status::Completed
    );
}

#[tokio::test]
async fn worker_whose_lease_was_taken_over_cannot_complete() {
    let env = env(catalog(&durable("ship", "ORDER_*", 5))).await;
    let clock = Arc::new(ManualClock::new(SystemClock.now_ms()));
    let release = Arc::new(tokio::sync::Notify::new());
    let started = Arc::new(tokio::sync::Notify::new());
    let (r, s) = (release.clone(), started.clone());
    let h = handler(move |d| {
        let (r, s) = (r.clone(), s.clone());
        async move {
            s.notify_one();
            r.notified().await;
            Ok(vec![effect(&format!("stale:{}", d.idempotency_key))])
        }
    });
    let mut o = options("stale");
    o.clock = clock.clone();
    let w = Worker::new(
        env.store.clone(),
        env.queues.clone(),
        &env.catalog,
        HashMap::from([("h::ship".to_owned(), h)]),
        o,
    )
    .await
    .unwrap();
    let e = emit(&env, "acme", "ORDER_PLACED", 1).await;
    pipe(&env, &e).await;
    let running = tokio::spawn({
        let w = w.clone();
        async move { w.run_once().await.unwrap() }
    });
    started.notified().await;
    // The stale worker pauses (GC, a stalled VM) past its lease; another
    // worker takes the claim over.
    clock.advance_ms(31_000);
    let target = ClaimTarget {
        key: ClaimKey::new(&e.id, "ship"),
        tenant: "acme".into(),
        seq: 1,
    };
    let lease = Lease {
        owner: "fresh".into(),
        token: "fresh-token".into(),
        lease_ms: 30_000,
    };
    let taken = w
        .inbox()
        .claim(&target, &lease, clock.now_ms(), 5)
        .await
        .unwrap();
    assert!(matches!(taken, ClaimOutcome::Claimed(_)), "{taken:?}");
    release.notify_one();
    let report = running.await.unwrap();
    assert_eq!(
        report.deleted, 0,
        "a fenced worker must not delete the message"
    );
    assert_eq!(w.stats().fenced, 1);
    assert_eq!(w.stats().completed, 0);
    assert!(
        !has_effect(&env.store, &format!("stale:{}:ship", e.id)).await,
        "the stale handler's writes committed"
    );
    let row = w.inbox().get(&target.key).await.unwrap().unwrap();
    assert_eq!(
        (row.status, row.lease_token.as_str()),
        (Status::Pending, "fresh-token")
    );
}
