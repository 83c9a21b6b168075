//! A relay's stats are one view: the checkpoint they show is the last
//! commit their counters include, also when the stats were asked for
//! before the relay took the pipe's lease and answered after its first
//! commit.
//!
//! The store's log syncs and the stats are held with fault points, which
//! are process-wide: this file has one test and a process of its own.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use postbox_relay::relay::STATS_BEFORE_STORE;
use postbox_store::faults;
use serde_json::json;

const JOBS: &str = r#"
[pipes.jobs]
source = "jobs"
target = { queue = "jobs" }
"#;

#[tokio::test]
async fn stats_asked_before_the_lease_and_answered_after_a_commit_are_one_view() {
    let env = env().await;
    create_table(&env.store, "jobs").await;
    put(&env.store, "jobs", json!({"pk": {"S": "j1"}})).await;
    let held_stats = faults::hold(STATS_BEFORE_STORE);
    // The relay's task is spawned but not yet run on this one-thread
    // runtime; with the syncs held it cannot take the lease (a durable
    // write) until they are let go.
    let relay = Arc::new(start(&env, JOBS, "a").await);
    let held_syncs = faults::hold(faults::GROUP_SYNC);
    let asking = {
        let relay = relay.clone();
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(relay.stats())
                .unwrap()
                .remove(0)
        })
    };
    // The stats read the counters (no lease: nothing counted) and wait.
    while !faults::reached(STATS_BEFORE_STORE) {
        assert!(
            !asking.is_finished(),
            "the stats did not reach their fault point"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(held_syncs);
    // The relay takes the lease and commits j1's delivery.
    assert_eq!(
        store_checkpoint(&env, "jobs", "jobs", |at| at == Some(1)).await,
        Some(1),
        "the relay did not deliver j1"
    );
    drop(held_stats);
    let s = asking.join().unwrap();
    assert_eq!(
        s.delivered + s.filtered + s.dead_lettered,
        s.checkpoint,
        "a checkpoint the counts do not include: {s:?}"
    );
    let Ok(relay) = Arc::try_unwrap(relay) else {
        panic!("the stats thread kept the relay");
    };
    relay.shutdown().await;
}
