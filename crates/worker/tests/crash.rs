//! The crash test: a real worker process is killed with SIGKILL
//! at each named fault point between claim and delete; on redelivery the
//! event's effect happens exactly once.
//!
//! A child is this test binary run again with `POSTBOX_WORKER_CRASH_CHILD`
//! set to the data directory and `POSTBOX_FAULTS=<point>=kill`; the fault
//! point SIGKILLs the child's own process (no destructors, no flush). The
//! child's handler appends a line to `runs.log` (fsync'd) before returning,
//! so the parent knows whether the handler ran before the kill.
//!
//! The parent then reopens the file with a clock two minutes ahead (the
//! child's 2 s lease and message visibility have run out) and runs a worker:
//! - killed after claim: the handler runs on redelivery, once;
//! - killed after the handler, before complete: its writes never committed,
//!   so the handler runs again and its effect commits once;
//! - killed after complete, before delete: the claim is COMPLETED, the
//!   handler does not run again and the message is deleted.
//!
//! Seen to fail on the naive design (`--features naive-claims`): the first
//! two cases fail there (the crashed claim blocks the redelivery forever, the
//! message is never deleted and the effect never happens).

mod common;

use std::collections::HashMap;
use std::io::Write as _;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::*;
use postbox_store::{Clock, ManualClock, SystemClock};
use postbox_worker::{ClaimKey, Handler, Status, Worker, faults, handler};

const CHILD_ENV: &str = "POSTBOX_WORKER_CRASH_CHILD";
const SUBS: &str = "[[subscriptions]]\nname = \"ship\"\nglob = \"ORDER_*\"\nlane = \"DURABLE\"\nhandler = \"h::ship\"\n";

/// The child: a worker with a 2 s lease that dies at the armed fault point.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    faults::arm_from_env();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let (store, queues, _engine) = open_parts(&dir, catalog(SUBS)).await;
        let runs = dir.join("runs.log");
        let h = handler(move |d| {
            let runs = runs.clone();
            async move {
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&runs)
                    .unwrap();
                writeln!(f, "{}", d.idempotency_key).unwrap();
                f.sync_all().unwrap();
                Ok(vec![effect(&d.idempotency_key)])
            }
        });
        let mut o = options("child");
        o.lease = Duration::from_secs(2);
        let w = Worker::new(
            store,
            queues,
            &catalog(SUBS),
            HashMap::from([("h::ship".to_owned(), h)]),
            o,
        )
        .await
        .unwrap();
        for _ in 0..50 {
            w.run_once().await.unwrap();
        }
    });
    // The fault point was never reached: tell the parent.
    std::process::exit(3);
}

/// Emits one event and pipes it, in a runtime that is shut down afterwards
/// so the file is closed before the child opens it.
fn prepare(dir: &Path) -> String {
    let dir = dir.to_owned();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let (store, queues, engine) = open_parts(&dir, catalog(SUBS)).await;
            let ctx = postbox_engine::Context::new("acme", "tester").unwrap();
            let e = engine
                .emit(
                    &ctx,
                    "ORDER_PLACED",
                    serde_json::json!({"n": 1}),
                    Vec::new(),
                )
                .await
                .unwrap()
                .envelope;
            pipe_to(&store, &queues, &e).await;
            e.id
        })
    })
    .join()
    .unwrap()
}

fn run_child(dir: &Path, point: &str) {
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["crash_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir)
        .env("POSTBOX_FAULTS", format!("{point}=kill"))
        .status()
        .unwrap();
    assert_eq!(
        status.signal(),
        Some(9),
        "the child was not killed at {point}: {status}"
    );
}

/// Runs the scenario for `point`; returns (handler runs in the child,
/// handler runs after the restart).
fn crash_at(point: &str) -> (usize, u32) {
    let dir = tempfile::tempdir().unwrap();
    let event_id = prepare(dir.path());
    run_child(dir.path(), point);
    let child_runs =
        std::fs::read_to_string(dir.path().join("runs.log")).map_or(0, |s| s.lines().count());

    let rt = tokio::runtime::Runtime::new().unwrap();
    let parent_runs = rt.block_on(async {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(SystemClock.now_ms() + 120_000));
        let (store, queues, _engine) =
            open_parts_at(dir.path(), catalog(SUBS), clock.clone()).await;
        let runs = Arc::new(AtomicU32::new(0));
        let r = runs.clone();
        let h: Handler = handler(move |d| {
            r.fetch_add(1, Ordering::SeqCst);
            async move { Ok(vec![effect(&d.idempotency_key)]) }
        });
        let mut o = options("parent");
        o.clock = clock;
        let w = Worker::new(
            store.clone(),
            queues.clone(),
            &catalog(SUBS),
            HashMap::from([("h::ship".to_owned(), h)]),
            o,
        )
        .await
        .unwrap();
        drain(&w, &queues, 20).await;
        let key = ClaimKey::new(&event_id, "ship");
        assert_eq!(
            w.inbox().get(&key).await.unwrap().unwrap().status,
            Status::Completed,
            "{point}"
        );
        assert!(
            has_effect(&store, &key.idempotency_key()).await,
            "{point}: the effect never happened"
        );
        let q = queues.stats(QUEUE).unwrap();
        assert_eq!(
            (q.visible, q.in_flight),
            (0, 0),
            "{point}: the message was not deleted"
        );
        runs.load(Ordering::SeqCst)
    });
    (child_runs, parent_runs)
}

#[test]
fn sigkill_after_claim_runs_the_handler_on_redelivery_once() {
    assert_eq!(crash_at(faults::AFTER_CLAIM), (0, 1));
}

#[test]
fn sigkill_after_handler_before_complete_commits_the_effect_once() {
    // The child's handler ran but its writes never committed: the handler
    // runs again and the effect (a Put that refuses to overwrite) commits once.
    assert_eq!(crash_at(faults::AFTER_HANDLER_BEFORE_COMPLETE), (1, 1));
}

#[test]
fn sigkill_after_complete_before_delete_never_reruns_the_handler() {
    assert_eq!(crash_at(faults::AFTER_COMPLETE_BEFORE_DELETE), (1, 0));
}
