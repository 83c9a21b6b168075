//! The batched path's failure cases: a received batch of a tenant's events
//! is claimed at once and settled event by event, so what goes wrong with
//! one (event, subscription) must neither lose nor complete the others out
//! of turn.
//!
//! Seen to fail without the release of unrun claims (the held-back events'
//! claims then block their redelivery for a whole lease) and without the
//! stop at the first unsettled event (later events run ahead of it).

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use postbox_worker::claim::{ClaimTarget, Lease};
use postbox_worker::{ClaimKey, ClaimOutcome, Handler, HandlerError, Status, handler};

type Log = Arc<Mutex<Vec<(String, String, u64)>>>;

/// A handler for `sub` that records (sub, tenant, seq) and writes one
/// effect; it fails (retryably) on `fail_at` = (tenant, seq) until `fixed`.
fn recording(
    log: &Log,
    sub: &'static str,
    fail_at: Option<(&'static str, u64)>,
    fixed: &Arc<AtomicBool>,
) -> Handler {
    let (log, fixed) = (log.clone(), fixed.clone());
    handler(move |d| {
        let (log, fixed) = (log.clone(), fixed.clone());
        async move {
            let here = (d.envelope.tenant.as_str(), d.envelope.seq);
            if fail_at == Some(here) && !fixed.load(Ordering::SeqCst) {
                return Err(HandlerError::retryable("downstream unavailable"));
            }
            log.lock()
                .unwrap()
                .push((sub.to_owned(), d.envelope.tenant.clone(), d.envelope.seq));
            Ok(vec![effect(&d.idempotency_key)])
        }
    })
}

fn runs(log: &Log, sub: &str, tenant: &str) -> Vec<u64> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|(s, t, _)| s == sub && t == tenant)
        .map(|(_, _, seq)| *seq)
        .collect()
}

async fn emit_all(env: &Env, events: &[(&str, u64)]) -> Vec<postbox_engine::Envelope> {
    let mut out = Vec::new();
    for &(tenant, n) in events {
        let e = emit(env, tenant, "ORDER_PLACED", n).await;
        pipe(env, &e).await;
        out.push(e);
    }
    out
}

#[tokio::test]
async fn a_failing_handler_mid_batch_holds_the_rest_and_loses_nothing() {
    let env = env(catalog(&durable("ship", "ORDER_*", 5))).await;
    let log = Log::default();
    let fixed = Arc::new(AtomicBool::new(false));
    let h = recording(&log, "ship", Some(("acme", 3)), &fixed);
    let w = worker(&env, HashMap::from([("h::ship".to_owned(), h)]), "w1").await;
    let events = emit_all(
        &env,
        &[
            ("acme", 1),
            ("acme", 2),
            ("acme", 3),
            ("acme", 4),
            ("acme", 5),
        ],
    )
    .await;

    let report = w.run_once().await.unwrap();
    assert_eq!((report.received, report.deleted), (5, 2));
    assert_eq!(
        runs(&log, "ship", "acme"),
        vec![1, 2],
        "nothing ran past the failure"
    );
    let row = |i: usize| {
        let key = ClaimKey::new(&events[i].id, "ship");
        let inbox = w.inbox().clone();
        async move { inbox.get(&key).await.unwrap().unwrap() }
    };
    assert_eq!(row(1).await.status, Status::Completed);
    assert_eq!(row(2).await.status, Status::Failed);
    // The claims taken for seq 4 and 5 were given back unrun.
    let now = postbox_engine::envelope::now_ms();
    for i in [3, 4] {
        let r = row(i).await;
        assert_eq!((r.status, r.attempts), (Status::Pending, 0));
        assert!(r.lease_expires_at <= now, "released: {r:?}");
    }

    fixed.store(true, Ordering::SeqCst);
    drain(&w, &env.queues, 10).await;
    assert_eq!(
        runs(&log, "ship", "acme"),
        vec![1, 2, 3, 4, 5],
        "in seq order, each once"
    );
    for e in &events {
        assert!(has_effect(&env.store, &format!("{}:ship", e.id)).await);
    }
    assert_eq!(env.queues.stats(QUEUE).unwrap().deleted, 5);
}

#[tokio::test]
async fn a_sibling_failing_on_an_event_keeps_the_others_completion() {
    let subs = format!(
        "{}{}",
        durable("ship", "ORDER_*", 5),
        durable("mail", "ORDER_*", 5)
    );
    let env = env(catalog(&subs)).await;
    let log = Log::default();
    let fixed = Arc::new(AtomicBool::new(false));
    let handlers = HashMap::from([
        ("h::ship".to_owned(), recording(&log, "ship", None, &fixed)),
        (
            "h::mail".to_owned(),
            recording(&log, "mail", Some(("acme", 2)), &fixed),
        ),
    ]);
    let w = worker(&env, handlers, "w1").await;
    emit_all(&env, &[("acme", 1), ("acme", 2), ("acme", 3)]).await;

    let report = w.run_once().await.unwrap();
    assert_eq!((report.received, report.deleted), (3, 1));
    assert_eq!(
        runs(&log, "ship", "acme"),
        vec![1, 2],
        "ship completed seq 2 beside the failure"
    );
    assert_eq!(runs(&log, "mail", "acme"), vec![1]);

    fixed.store(true, Ordering::SeqCst);
    drain(&w, &env.queues, 10).await;
    assert_eq!(
        runs(&log, "ship", "acme"),
        vec![1, 2, 3],
        "ship's seq 2 did not run again"
    );
    assert_eq!(runs(&log, "mail", "acme"), vec![1, 2, 3]);
    assert_eq!(env.queues.stats(QUEUE).unwrap().deleted, 3);
}

#[tokio::test]
async fn a_claim_held_elsewhere_holds_its_tenant_not_the_other_group_of_the_batch() {
    let env = env(catalog(&durable("ship", "ORDER_*", 5))).await;
    let log = Log::default();
    let fixed = Arc::new(AtomicBool::new(false));
    let h = recording(&log, "ship", None, &fixed);
    let w = worker(&env, HashMap::from([("h::ship".to_owned(), h)]), "w1").await;
    let events = emit_all(
        &env,
        &[
            ("acme", 1),
            ("acme", 2),
            ("acme", 3),
            ("globex", 1),
            ("globex", 2),
        ],
    )
    .await;
    // Another worker holds acme's seq 2.
    let other = Lease {
        owner: "w2".into(),
        token: "other-token".into(),
        lease_ms: 60_000,
    };
    let target = ClaimTarget {
        key: ClaimKey::new(&events[1].id, "ship"),
        tenant: "acme".into(),
        seq: 2,
    };
    let now = postbox_engine::envelope::now_ms();
    let held = match w.inbox().claim(&target, &other, now, 5).await.unwrap() {
        ClaimOutcome::Claimed(row) => row,
        refused => panic!("{refused:?}"),
    };

    let report = w.run_once().await.unwrap();
    assert_eq!(
        (report.received, report.deleted),
        (5, 3),
        "one batch, both groups"
    );
    assert_eq!(runs(&log, "ship", "acme"), vec![1]);
    assert_eq!(runs(&log, "ship", "globex"), vec![1, 2]);
    assert_eq!(w.stats().waited, 1);

    // The other worker finishes; acme's seq 2 is settled and seq 3 runs.
    w.inbox().complete(&held, now + 1, vec![]).await.unwrap();
    drain(&w, &env.queues, 10).await;
    assert_eq!(runs(&log, "ship", "acme"), vec![1, 3]);
    assert_eq!(env.queues.stats(QUEUE).unwrap().deleted, 5);
}

/// `run` with several batches in flight: receives go on while batches run,
/// yet each tenant's events still run once each and in order, and the loop
/// stops after the batches in flight finish.
#[tokio::test]
async fn run_with_batches_in_flight_keeps_each_tenant_in_order() {
    let env = env(catalog(&durable("ship", "ORDER_*", 5))).await;
    let log = Log::default();
    let fixed = Arc::new(AtomicBool::new(false));
    let h = recording(&log, "ship", None, &fixed);
    let w = postbox_worker::Worker::new(
        env.store.clone(),
        env.queues.clone(),
        &env.catalog,
        HashMap::from([("h::ship".to_owned(), h)]),
        postbox_worker::WorkerOptions {
            batches_in_flight: 4,
            ..options("w1")
        },
    )
    .await
    .unwrap();
    let tenants = ["acme", "globex", "initech"];
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let running = {
        let w = w.clone();
        tokio::spawn(async move { w.run(stop_rx).await })
    };
    for n in 1..=12 {
        for tenant in tenants {
            let e = emit(&env, tenant, "ORDER_PLACED", n).await;
            pipe(&env, &e).await;
        }
    }
    for _ in 0..500 {
        if w.stats().deleted == 36 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    stop.send(true).unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), running)
        .await
        .expect("run stops")
        .unwrap();
    for tenant in tenants {
        assert_eq!(
            runs(&log, "ship", tenant),
            (1..=12).collect::<Vec<u64>>(),
            "{tenant}"
        );
    }
    assert_eq!((w.stats().completed, w.stats().deleted), (36, 36));
}
