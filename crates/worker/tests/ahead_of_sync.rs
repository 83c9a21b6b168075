//! A completion is answered at its commit, before the commit log has synced
//! it, so a tenant's next event runs one commit after the one before, not
//! one sync. Nothing outside the store hears of a completion before it is
//! durable: the completion hook waits for the sync, and the message's
//! delete, logged after the completion, waits for its own.
//!
//! Seen to fail with the completion answered at its sync: the second
//! event's handler then never runs while the syncs are held.
//!
//! The store's log syncs are held with a fault point (`store::group_sync`),
//! which is process-wide: this file has one test and a process of its own.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use postbox_store::faults;
use postbox_worker::{ClaimKey, Status, Worker, WorkerOptions, handler};

/// Polls `done` every 10 ms for up to 5 s.
async fn eventually(done: impl Fn() -> bool) -> bool {
    for _ in 0..500 {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    done()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenants_next_event_runs_before_the_sync_and_the_hook_after_it() {
    let env = env(catalog(&durable("ship", "ORDER_*", 3))).await;
    let first = emit(&env, "acme", "ORDER_PLACED", 1).await;
    let second = emit(&env, "acme", "ORDER_PLACED", 2).await;
    pipe(&env, &first).await;
    pipe(&env, &second).await;

    let ran: Arc<Mutex<Vec<u64>>> = Arc::default();
    let heard = Arc::new(AtomicU64::new(0));
    let h = {
        let ran = ran.clone();
        handler(move |d| {
            let ran = ran.clone();
            async move {
                ran.lock().unwrap().push(d.envelope.seq);
                Ok(vec![effect(&d.idempotency_key)])
            }
        })
    };
    let hook = {
        let heard = heard.clone();
        Arc::new(move |_: &postbox_engine::Envelope, _: &str| {
            heard.fetch_add(1, Ordering::SeqCst);
        })
    };
    let w = Worker::new(
        env.store.clone(),
        env.queues.clone(),
        &env.catalog,
        HashMap::from([("h::ship".to_owned(), h)]),
        WorkerOptions {
            on_completed: Some(hook),
            ..options("w")
        },
    )
    .await
    .unwrap();

    let held = faults::hold(faults::GROUP_SYNC);
    let batch = {
        let w = w.clone();
        tokio::spawn(async move { w.run_once().await })
    };
    // Both events run in order while no sync happens: the first one's
    // completion was answered at its commit.
    let both_ran = eventually(|| ran.lock().unwrap().len() == 2).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let heard_while_held = heard.load(Ordering::SeqCst);
    let batch_done_while_held = batch.is_finished();
    drop(held);

    assert!(
        both_ran,
        "the second event did not run while the first one's completion waited for its sync: {:?}",
        ran.lock().unwrap()
    );
    assert_eq!(*ran.lock().unwrap(), vec![1, 2]);
    assert_eq!(
        heard_while_held, 0,
        "the hook heard of an unsynced completion"
    );
    assert!(
        !batch_done_while_held,
        "the batch was settled (its messages deleted) before the sync"
    );

    let report = batch.await.unwrap().unwrap();
    assert!(
        eventually(|| heard.load(Ordering::SeqCst) == 2).await,
        "the hook did not hear of both completions once they were durable"
    );
    assert_eq!(report.deleted, 2, "{report:?}");
    for e in [&first, &second] {
        let key = ClaimKey::new(&e.id, "ship");
        let row = w.inbox().get(&key).await.unwrap().unwrap();
        assert_eq!(row.status, Status::Completed);
        assert!(has_effect(&env.store, &key.idempotency_key()).await);
    }
}
