//! A tenant's next event runs only once the completion of the one before is
//! durable, not merely committed. Answering the completion at its commit
//! would let event 2's handler act outside the store while a power loss
//! could still take event 1's completion back: event 1 would then run again
//! after event 2, and a receiver would see 1, 2, 1, 2 (with the order kept,
//! the worst case is 1, 2, 2). A kill -9 cannot show this (the log's
//! unsynced records survive in the page cache), so the test holds the log's
//! syncs with a fault point instead and watches which handlers run.
//!
//! Seen to fail with the completion answered at its commit: both events ran
//! while the syncs were held.
//!
//! The fault point (`store::group_sync`) is process-wide: this file has one
//! test and a process of its own.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use postbox_store::faults;
use postbox_worker::{ClaimKey, Status, handler};

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
async fn a_tenants_next_event_waits_for_the_sync_of_the_completion_before_it() {
    let env = env(catalog(&durable("ship", "ORDER_*", 3))).await;
    let first = emit(&env, "acme", "ORDER_PLACED", 1).await;
    let second = emit(&env, "acme", "ORDER_PLACED", 2).await;
    pipe(&env, &first).await;
    pipe(&env, &second).await;

    let ran: Arc<Mutex<Vec<u64>>> = Arc::default();
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
    let w = worker(&env, HashMap::from([("h::ship".to_owned(), h)]), "w").await;

    let held = faults::hold(faults::GROUP_SYNC);
    let batch = {
        let w = w.clone();
        tokio::spawn(async move { w.run_once().await })
    };
    // The first event runs (its claim is answered at its commit); its
    // completion then waits for the sync, and the second event with it.
    let first_ran = eventually(|| !ran.lock().unwrap().is_empty()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ran_while_held = ran.lock().unwrap().clone();
    drop(held);

    assert!(first_ran, "the first event did not run");
    assert_eq!(
        ran_while_held,
        vec![1],
        "the second event ran before the first one's completion was durable"
    );
    let report = batch.await.unwrap().unwrap();
    assert_eq!(*ran.lock().unwrap(), vec![1, 2]);
    assert_eq!(report.deleted, 2, "{report:?}");
    for e in [&first, &second] {
        let key = ClaimKey::new(&e.id, "ship");
        let row = w.inbox().get(&key).await.unwrap().unwrap();
        assert_eq!(row.status, Status::Completed);
        assert!(has_effect(&env.store, &key.idempotency_key()).await);
    }
}
