//! The runbook: a handler fails terminally, is fixed, a
//! replay runs it once, and the subscriptions that already COMPLETED the
//! same event do not run again.
//!
//! Seen to fail on the naive design (`--features naive-claims`): the reset
//! claim is refused by a claim on `attribute_not_exists(pk)`, so the fixed
//! handler never runs (checked when written).

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use postbox_worker::replay::{self, Selection};
use postbox_worker::{ClaimKey, Handler, HandlerError, Status, handler};

type Runs = Arc<Mutex<Vec<(String, u64)>>>;

#[tokio::test]
async fn fix_then_replay_runs_the_dead_subscription_once_and_no_sibling_again() {
    let subs = format!(
        "{}{}",
        durable("ship", "ORDER_*", 5),
        durable("mail", "ORDER_*", 5)
    );
    let env = env(catalog(&subs)).await;
    let fixed = Arc::new(AtomicBool::new(false));
    let ship_runs: Runs = Arc::default();
    let mail_runs: Runs = Arc::default();
    let (f, sr) = (fixed.clone(), ship_runs.clone());
    let ship: Handler = handler(move |d| {
        let ok =
            f.load(Ordering::SeqCst) || (d.envelope.tenant.as_str(), d.envelope.seq) != ("acme", 1);
        sr.lock()
            .unwrap()
            .push((d.envelope.tenant.clone(), d.envelope.seq));
        async move {
            if !ok {
                return Err(HandlerError::terminal("no carrier for this country"));
            }
            Ok(vec![effect(&d.idempotency_key)])
        }
    });
    let mr = mail_runs.clone();
    let mail: Handler = handler(move |d| {
        mr.lock()
            .unwrap()
            .push((d.envelope.tenant.clone(), d.envelope.seq));
        async move { Ok(vec![effect(&d.idempotency_key)]) }
    });
    let handlers = HashMap::from([("h::ship".to_owned(), ship), ("h::mail".to_owned(), mail)]);
    let w = worker(&env, handlers, "w1").await;
    let mut events = Vec::new();
    for (tenant, n) in [("acme", 1), ("acme", 2), ("globex", 1)] {
        let e = emit(&env, tenant, "ORDER_PLACED", n).await;
        pipe(&env, &e).await;
        events.push(e);
    }
    drain(&w, &env.queues, 20).await;
    let e1 = &events[0];
    assert_eq!(
        w.inbox()
            .get(&ClaimKey::new(&e1.id, "ship"))
            .await
            .unwrap()
            .unwrap()
            .status,
        Status::Dead
    );
    assert_eq!(
        w.inbox()
            .get(&ClaimKey::new(&e1.id, "mail"))
            .await
            .unwrap()
            .unwrap()
            .status,
        Status::Completed
    );

    // List: by tenant, by subscription, across tenants.
    let all = replay::list(w.inbox(), &Selection::default())
        .await
        .unwrap();
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(
        (
            all[0].tenant.as_str(),
            all[0].seq,
            all[0].subscription.as_str()
        ),
        ("acme", 1, "ship")
    );
    let mail_only = Selection {
        subscription: Some("mail".into()),
        ..Default::default()
    };
    assert!(
        replay::list(w.inbox(), &mail_only)
            .await
            .unwrap()
            .is_empty()
    );

    // Dry run: reports, writes nothing.
    let acme = Selection {
        tenant: Some("acme".into()),
        ..Default::default()
    };
    let now = postbox_engine::envelope::now_ms();
    let dry = replay::replay(w.inbox(), &env.queues, QUEUE, EVENTS, &acme, true, now)
        .await
        .unwrap();
    assert_eq!((dry.selected.len(), dry.reset, dry.enqueued), (1, 0, 0));
    assert_eq!(w.inbox().dead_letters("acme").await.unwrap().len(), 1);

    // Fix, deploy, replay.
    fixed.store(true, Ordering::SeqCst);
    let report = replay::replay(w.inbox(), &env.queues, QUEUE, EVENTS, &acme, false, now)
        .await
        .unwrap();
    assert_eq!((report.reset, report.skipped, report.enqueued), (1, 0, 1));
    drain(&w, &env.queues, 20).await;

    let ship_e1 = ship_runs
        .lock()
        .unwrap()
        .iter()
        .filter(|r| **r == ("acme".to_owned(), 1))
        .count();
    assert_eq!(
        ship_e1, 2,
        "ship ran for acme/1 once more after the fix (1 failure + 1 success)"
    );
    assert!(has_effect(&env.store, &format!("{}:ship", e1.id)).await);
    assert_eq!(
        mail_runs.lock().unwrap().len(),
        3,
        "mail COMPLETED every event once and never reran"
    );
    assert_eq!(
        w.inbox()
            .get(&ClaimKey::new(&e1.id, "ship"))
            .await
            .unwrap()
            .unwrap()
            .status,
        Status::Completed
    );
    assert!(w.inbox().dead_letters("acme").await.unwrap().is_empty());
    let records = replay::replay_records(w.inbox(), "acme").await.unwrap();
    assert_eq!(records, vec![(e1.id.clone(), "ship".to_owned(), now)]);

    // A second replay finds nothing.
    let again = replay::replay(w.inbox(), &env.queues, QUEUE, EVENTS, &acme, false, now + 1)
        .await
        .unwrap();
    assert_eq!((again.selected.len(), again.enqueued), (0, 0));
}

#[tokio::test]
async fn reconciliation_report_asks_for_attention_while_a_dead_letter_waits() {
    use postbox_worker::report::{Verdict, reconcile};
    let env = env(catalog(&durable("ship", "ORDER_*", 5))).await;
    let h: Handler = handler(|d| async move {
        if d.envelope.tenant == "acme" {
            return Err(HandlerError::terminal("bad address"));
        }
        Ok(vec![])
    });
    let w = worker(&env, HashMap::from([("h::ship".to_owned(), h)]), "w1").await;
    for tenant in ["acme", "globex"] {
        let e = emit(&env, tenant, "ORDER_PLACED", 1).await;
        pipe(&env, &e).await;
    }
    drain(&w, &env.queues, 10).await;
    let r = reconcile(&env.store, &env.queues, w.inbox(), EVENTS, QUEUE)
        .await
        .unwrap();
    assert_eq!(r.tenants.len(), 2);
    let acme = r.tenants.iter().find(|t| t.tenant == "acme").unwrap();
    assert_eq!(
        (acme.head_seq, acme.chain_intact, acme.dead_letters),
        (1, true, 1)
    );
    assert_eq!(
        (r.queue_depth, r.queue_in_flight, r.dlq_depth, r.poison),
        (0, 0, 0, 0)
    );
    assert_eq!(
        r.verdict,
        Verdict::Attention(vec!["tenant acme: 1 dead letter(s)".to_owned()])
    );
}

#[tokio::test]
async fn redrive_from_the_queue_dlq_clears_the_dead_claims_first() {
    let env = env(catalog(&format!(
        "{}{}",
        durable("ship", "ORDER_*", 5),
        durable("mail", "ORDER_*", 5)
    )))
    .await;
    let fixed = Arc::new(AtomicBool::new(false));
    let mail_runs: Runs = Arc::default();
    let f = fixed.clone();
    let ship: Handler = handler(move |d| {
        let ok = f.load(Ordering::SeqCst);
        async move {
            if !ok {
                return Err(HandlerError::terminal("down for good"));
            }
            Ok(vec![effect(&d.idempotency_key)])
        }
    });
    let mr = mail_runs.clone();
    let mail: Handler = handler(move |d| {
        mr.lock()
            .unwrap()
            .push((d.envelope.tenant.clone(), d.envelope.seq));
        async move { Ok(vec![]) }
    });
    let w = worker(
        &env,
        HashMap::from([("h::ship".to_owned(), ship), ("h::mail".to_owned(), mail)]),
        "w1",
    )
    .await;
    let e = emit(&env, "acme", "ORDER_PLACED", 1).await;
    pipe(&env, &e).await;
    drain(&w, &env.queues, 10).await;
    assert_eq!(w.inbox().dead_letters("acme").await.unwrap().len(), 1);
    // The same event's message ended in the queue's DLQ (e.g. maxReceiveCount
    // while a dependency was down), plus a body that is no event.
    let body = {
        let row = postbox_worker::worker::read_event(env.store.as_ref(), EVENTS, "acme", 1)
            .await
            .unwrap();
        assert_eq!(row.id, e.id);
        let q = env.store.clone();
        let item = postbox_store::ItemStore::get_item(
            q.as_ref(),
            postbox_store::api::GetItemInput {
                table_name: EVENTS.into(),
                key: postbox_engine::layout::key(
                    postbox_engine::layout::event_pk("acme"),
                    &postbox_engine::layout::seq_sk(1),
                ),
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .item
        .unwrap();
        postbox_item::item_to_json(&item).to_string()
    };
    let send = |b: String, d: &str| postbox_queue::NewMessage::new(b).group("acme").dedup(d);
    env.queues.send(DLQ, send(body, "x1")).await.unwrap();
    env.queues
        .send(DLQ, send("garbage".into(), "x2"))
        .await
        .unwrap();

    fixed.store(true, Ordering::SeqCst);
    let now = postbox_engine::envelope::now_ms();
    let report = replay::redrive(w.inbox(), &env.queues, QUEUE, DLQ, now)
        .await
        .unwrap();
    assert_eq!((report.moved, report.reset, report.poison), (1, 1, 1));
    drain(&w, &env.queues, 10).await;
    assert!(has_effect(&env.store, &format!("{}:ship", e.id)).await);
    assert_eq!(
        mail_runs.lock().unwrap().len(),
        1,
        "mail COMPLETED before and did not run again"
    );
    let dlq = env.queues.stats(DLQ).unwrap();
    assert_eq!(dlq.visible + dlq.in_flight, 0);
}

/// The report reads depths through GetQueueAttributes (so it works against
/// a queue over the wire too): messages waiting in the events queue and in
/// its dead-letter queue, found through the RedrivePolicy, are counted and
/// the DLQ asks for attention.
#[tokio::test]
async fn reconcile_counts_queue_and_dead_letter_queue_depths() {
    let env = env(catalog(&durable("ship", "ORDER_*", 5))).await;
    use postbox_worker::report::{Verdict, reconcile};
    let h: Handler = handler(|_| async { Ok(vec![]) });
    let w = worker(&env, HashMap::from([("h::ship".to_owned(), h)]), "w1").await;
    let e = emit(&env, "acme", "ORDER_PLACED", 1).await;
    pipe(&env, &e).await;
    let send = |d: &str| postbox_queue::NewMessage::new("{}").group("acme").dedup(d);
    env.queues.send(DLQ, send("d1")).await.unwrap();
    env.queues.send(DLQ, send("d2")).await.unwrap();
    let r = reconcile(&env.store, &env.queues, w.inbox(), EVENTS, QUEUE)
        .await
        .unwrap();
    assert_eq!((r.queue_depth, r.queue_in_flight, r.dlq_depth), (1, 0, 2));
    assert_eq!(
        r.verdict,
        Verdict::Attention(vec![format!(
            "2 message(s) in the dead-letter queue of {QUEUE}"
        )])
    );
}
