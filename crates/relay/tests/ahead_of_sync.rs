//! The relay reads stream records as soon as they are committed, before the
//! commit log has synced them, so that its delivery overlaps the sync. What
//! it writes to the store's queues is logged after those records (a crash
//! loses both or neither), but a line it appends to a log file leaves the
//! store at once: that waits for the records' sync.
//!
//! The store's log syncs are held with a fault point (`store::group_sync`),
//! which is process-wide: this file has one test and a process of its own.

mod common;

use std::time::Duration;

use common::*;
use postbox_store::faults;
use serde_json::json;

fn config(log: &std::path::Path) -> String {
    format!(
        r#"
[pipes.to-queue]
source = "jobs"
target = {{ queue = "jobs" }}

[pipes.to-bus]
source = "jobs"
target = {{ bus = "audit", detail_type = "JobChanged", source = "postbox.jobs" }}

[[buses.audit.rules]]
name = "log"
pattern = '{{"source": ["postbox.jobs"]}}'
targets = [{{ log = "{}" }}]
"#,
        log.display()
    )
}

fn job(id: &str) -> serde_json::Value {
    json!({"pk": {"S": id}})
}

fn logged(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log).map_or(0, |s| s.lines().count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queues_are_fed_before_the_sync_and_log_files_after_it() {
    let env = env().await;
    create_table(&env.store, "jobs").await;
    let log = env.dir.path().join("audit.jsonl");
    let relay = start(&env, &config(&log), "a").await;
    put(&env.store, "jobs", job("j1")).await;
    caught_up(&relay).await;
    assert_eq!(logged(&log), 1);

    let held = faults::hold(faults::GROUP_SYNC);
    let put_j2 = {
        let store = env.store.clone();
        tokio::spawn(async move { put(&store, "jobs", job("j2")).await })
    };
    // The queue pipe's delivery of j2 is committed (the queue counts it)
    // while the put's record is not synced.
    let mut delivered_unsynced = false;
    for _ in 0..1000 {
        if env.queues.stats("jobs").unwrap().sent == 2 {
            delivered_unsynced = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let lines_while_held = logged(&log);
    let put_done_while_held = put_j2.is_finished();
    drop(held);

    assert!(
        delivered_unsynced,
        "the relay did not deliver while the record's sync was held"
    );
    assert!(!put_done_while_held, "the put returned before its sync");
    assert_eq!(
        lines_while_held, 1,
        "a log line was written before its record was synced"
    );
    put_j2.await.unwrap();
    caught_up(&relay).await;
    assert_eq!(logged(&log), 2);
    let bodies = drain(&env.queues, "jobs").await;
    assert_eq!(bodies.len(), 2);

    // Nor does a delivery wait for the sync of the one before it: three
    // puts in a row, each relayed while every sync is held.
    let held = faults::hold(faults::GROUP_SYNC);
    let mut puts = Vec::new();
    let mut relayed_while_held = 0;
    for (i, id) in ["j3", "j4", "j5"].into_iter().enumerate() {
        let store = env.store.clone();
        puts.push(tokio::spawn(
            async move { put(&store, "jobs", job(id)).await },
        ));
        // Two were sent before these; this one makes 3 + i.
        let mut relayed = false;
        for _ in 0..500 {
            if env.queues.stats("jobs").unwrap().sent == 3 + i as u64 {
                relayed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if !relayed {
            break;
        }
        relayed_while_held += 1;
    }
    drop(held);
    assert_eq!(
        relayed_while_held, 3,
        "a delivery waited for the sync of the delivery before it"
    );
    for p in puts {
        p.await.unwrap();
    }
    caught_up(&relay).await;
    assert_eq!(drain(&env.queues, "jobs").await.len(), 3);
    relay.shutdown().await;
}
