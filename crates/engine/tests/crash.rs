//! State without its event is impossible: a child process emits (events with
//! a caller write each, fsync on; group commit and the direct path in turn)
//! until it is killed with SIGKILL at a random moment; after reopening, every
//! committed caller write has its event and every event its write, every
//! acknowledged emit is there, the log has no gap and its chain verifies.
//! Several rounds run on the same file, so recovery after a crash is also a
//! starting point.
//!
//! The child is this test binary re-executed with `POSTBOX_ENGINE_CRASH_CHILD`
//! set, running only `crash_child`.

mod common;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write as _};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use postbox_engine::VerifyOptions;
use postbox_store::ItemStore;
use postbox_store::api::ScanInput;
use postbox_store::embedded::{Durability, EmbeddedStore};
use serde_json::json;

const CHILD_ENV: &str = "POSTBOX_ENGINE_CRASH_CHILD";
const ROUND_ENV: &str = "POSTBOX_ENGINE_CRASH_ROUND";

/// The emitting child; does nothing unless started by the test below.
#[test]
fn crash_child() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let round = std::env::var(ROUND_ENV).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let store =
            Arc::new(EmbeddedStore::open(&path, store_options(Durability::Durable)).unwrap());
        create_orders(&*store).await;
        // Odd rounds commit each emit alone (the direct path), even rounds
        // group-commit.
        let group_commit = round.parse::<u32>().unwrap() % 2 == 0;
        let options = postbox_engine::EngineOptions {
            group_commit,
            max_tries: 50,
            ..Default::default()
        };
        let engine = engine_with(store, options).await;
        let out = Arc::new(std::sync::Mutex::new(std::io::stdout()));
        for task in 0..16 {
            let (engine, out, round) = (engine.clone(), out.clone(), round.clone());
            tokio::spawn(async move {
                let ctx = ctx(if task % 4 == 0 { "other" } else { "main" });
                for i in 0.. {
                    let id = format!("r{round}-{task}-{i}");
                    engine
                        .emit(
                            &ctx,
                            "ORDER_PLACED",
                            json!({"order": id}),
                            vec![put_order(&id)],
                        )
                        .await
                        .unwrap();
                    let mut out = out.lock().unwrap();
                    writeln!(out, "ACK {id}").unwrap();
                    out.flush().unwrap();
                }
            });
        }
        std::future::pending::<()>().await;
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_minus_nine_never_separates_state_from_its_event() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.redb");
    let exe = std::env::current_exe().unwrap();
    let mut acked: HashSet<String> = HashSet::new();
    for round in 0..5 {
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &path)
            .env(ROUND_ENV, round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (first_tx, first_rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut acks = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(id) = line.strip_prefix("ACK ") {
                    if acks.is_empty() {
                        let _ = first_tx.send(());
                    }
                    acks.push(id.to_owned());
                }
            }
            acks
        });
        first_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the child emits");
        std::thread::sleep(Duration::from_millis(fastrand::u64(0..400)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        acked.extend(reader.join().unwrap());

        let store =
            Arc::new(EmbeddedStore::open(&path, store_options(Durability::NoFsync)).unwrap());
        check_consistent(&store, &acked).await;
        drop(store);
    }
    eprintln!(
        "crash test: {} emits acknowledged over 5 kills",
        acked.len()
    );
    assert!(
        acked.len() > 20,
        "only {} emits acknowledged in 5 rounds",
        acked.len()
    );
}

async fn check_consistent(store: &Arc<EmbeddedStore>, acked: &HashSet<String>) {
    // Every order with its event, every event with its order.
    let mut orders = HashSet::new();
    let mut start = None;
    loop {
        let page = store
            .scan(ScanInput {
                table_name: ORDERS.to_owned(),
                exclusive_start_key: start.take(),
                ..Default::default()
            })
            .await
            .unwrap();
        for item in page.items.unwrap_or_default() {
            orders.insert(attr_s(&item, "pk").trim_start_matches("ORDER#").to_owned());
        }
        match page.last_evaluated_key {
            Some(k) => start = Some(k),
            None => break,
        }
    }
    let mut logged = HashSet::new();
    for tenant in ["main", "other"] {
        let rows = events(&**store, tenant).await;
        assert_contiguous(&rows);
        for row in &rows {
            let payload: serde_json::Value = serde_json::from_str(attr_s(row, "payload")).unwrap();
            assert!(
                logged.insert(payload["order"].as_str().unwrap().to_owned()),
                "one event per order"
            );
        }
    }
    let state_without_event: Vec<_> = orders.difference(&logged).collect();
    let event_without_state: Vec<_> = logged.difference(&orders).collect();
    assert!(
        state_without_event.is_empty(),
        "orders without their event: {state_without_event:?}"
    );
    assert!(
        event_without_state.is_empty(),
        "events without their order: {event_without_state:?}"
    );
    let lost: Vec<_> = acked.difference(&logged).collect();
    assert!(lost.is_empty(), "acknowledged emits lost: {lost:?}");
    let engine = engine(store.clone()).await;
    let full = VerifyOptions {
        full: true,
        update_checkpoint: false,
        ..Default::default()
    };
    for report in engine.verify_all(&full, &mut |_| {}).await.unwrap() {
        assert!(report.intact(), "{report:?}");
    }
}
