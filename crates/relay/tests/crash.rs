//! Crash safety: a child process relaying (while it also writes new
//! records) is killed with SIGKILL, several times, at different points.
//! After the last restart, every record of the stream has been relayed
//! exactly once: the checkpoint moved only with the enqueue, in one commit.
//!
//! The target is a standard queue, which has no deduplication, so a
//! duplicate from the relay could not hide. The child is this test binary
//! run again with `POSTBOX_RELAY_CRASH_CHILD` set to the store's path; it
//! prints `CKPT <n>` after each delivery commit.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

use common::*;
use postbox_queue::{Queues, QueuesOptions};
use postbox_relay::relay::CommitHook;
use postbox_relay::{Relay, RelayConfig, RelayOptions};
use postbox_store::ChangeStreams;
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
use serde_json::json;

const CHILD_ENV: &str = "POSTBOX_RELAY_CRASH_CHILD";
const PIPE: &str = r#"
[relay]
lease_seconds = 1

[pipes.copy]
source = "items"
input_template = '<$.dynamodb.SequenceNumber>'
target = { queue = "copies" }
"#;

fn relay_options(owner: &str, hook: Option<CommitHook>) -> RelayOptions {
    RelayOptions {
        owner: owner.to_owned(),
        max_records_per_commit: 25,
        on_commit: hook,
        ..RelayOptions::default()
    }
}

/// The child: relays, and writes a record every millisecond, until killed.
#[test]
fn crash_child() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    postbox_store::faults::arm_from_env();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let store = EmbeddedStore::open(
            &path,
            EmbeddedOptions::default().keeping(postbox_queue::tables()),
        )
        .unwrap();
        let queues = Queues::open(store.clone(), QueuesOptions::default())
            .await
            .unwrap();
        let hook: CommitHook = Arc::new(|_, at| {
            println!("CKPT {at}");
        });
        let config = RelayConfig::from_toml(PIPE).unwrap();
        let _relay = Relay::start(
            store.clone(),
            queues,
            config,
            relay_options(&format!("child-{}", std::process::id()), Some(hook)),
        )
        .await
        .unwrap();
        let id = std::process::id();
        for k in 0.. {
            put(&store, "items", json!({"pk": {"S": format!("c{id}-{k}")}})).await;
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    });
}

#[tokio::test]
async fn sigkill_loses_nothing_and_duplicates_nothing() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("postbox.redb");
    seed(&path, 600).await;
    // Kill the child at later and later points of its work.
    for (round, kill_at) in [150u64, 500, 900].into_iter().enumerate() {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut last = 0;
        for line in stdout.lines() {
            let line = line.unwrap();
            if let Some(n) = line.strip_prefix("CKPT ") {
                last = n.parse().unwrap();
                if last >= kill_at {
                    break;
                }
            }
        }
        assert!(
            last >= kill_at,
            "round {round}: the child stopped before checkpoint {kill_at}"
        );
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }
    // Restart and finish: every record exactly once.
    let (store, queues) = open(&path).await;
    let head = relay_rest_exactly_once(&store, &queues, "final").await;
    assert!(head > 900, "the children wrote records too: head {head}");
}

/// The fault point inside the delivery commit, after the enqueue and before
/// the checkpoint: the killed relay leaves neither, and the next one sends
/// every record once.
#[tokio::test]
async fn killed_between_enqueue_and_checkpoint_nothing_is_sent_twice() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("postbox.redb");
    seed(&path, 100).await;
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &path)
        .env(
            "POSTBOX_FAULTS",
            format!(
                "{}=kill",
                postbox_relay::relay::AFTER_ENQUEUE_BEFORE_CHECKPOINT
            ),
        )
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "the child died at the fault point");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("CKPT"),
        "no delivery commit completed"
    );

    let (store, queues) = open(&path).await;
    assert!(
        drain(&queues, "copies").await.is_empty(),
        "the abandoned commit enqueued nothing"
    );
    relay_rest_exactly_once(&store, &queues, "after-fault").await;
}

/// A store at `path` with `n` records in `items`.
async fn seed(path: &std::path::Path, n: usize) {
    let store = EmbeddedStore::open(
        path,
        EmbeddedOptions::default().keeping(postbox_queue::tables()),
    )
    .unwrap();
    create_table(&store, "items").await;
    for n in 0..n {
        put(&store, "items", json!({"pk": {"S": format!("p{n}")}})).await;
    }
}

/// The store and queues at `path`, after the children are gone.
async fn open(path: &std::path::Path) -> (EmbeddedStore, Queues) {
    let store = EmbeddedStore::open(
        path,
        EmbeddedOptions::default().keeping(postbox_queue::tables()),
    )
    .unwrap();
    let queues = Queues::open(store.clone(), QueuesOptions::default())
        .await
        .unwrap();
    (store, queues)
}

/// Relays what the children left and checks that every record of the
/// stream reached the queue exactly once; returns the stream's head.
async fn relay_rest_exactly_once(store: &EmbeddedStore, queues: &Queues, owner: &str) -> u64 {
    let relay = Relay::start(
        store.clone(),
        queues.clone(),
        RelayConfig::from_toml(PIPE).unwrap(),
        relay_options(owner, None),
    )
    .await
    .unwrap();
    caught_up(&relay).await;
    let head = store.stream_head("items").await.unwrap();
    let bodies = drain(queues, "copies").await;
    let unique: BTreeSet<u64> = bodies.iter().map(|b| b.parse().unwrap()).collect();
    assert_eq!(bodies.len(), unique.len(), "no record was enqueued twice");
    assert_eq!(
        unique,
        (1..=head).collect::<BTreeSet<_>>(),
        "no record was lost"
    );
    relay.shutdown().await;
    head
}
