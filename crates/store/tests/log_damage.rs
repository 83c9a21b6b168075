//! A damaged commit log after a crash: the store must refuse to open
//! rather than lose acknowledged writes without a word, name the file, and
//! change nothing; `EmbeddedOptions::recover_truncated` opens it anyway
//! with what is left. A clean close needs no log at all.
//!
//! The crash is real: a child process (this test binary re-executed on the
//! ignored test `damage_child`) writes through a durable store with a log,
//! holds a checkpoint's sync of the store file (the fault point
//! `store::checkpoint_sync`), so that the writes after it are in the log
//! only, prints each acknowledged write, and is killed with SIGKILL.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
use postbox_store::faults::{self, Action};
use postbox_store::{ItemStore, StoreError};
use serde_json::json;

const REGIONS: [&str; 2] = ["s.redb-log", "s.redb-log.1"];

/// The child: puts keys `a0..` with checkpoints running, then holds the
/// next checkpoint's sync and puts keys `b0..`, printing `ACK <key>` after
/// each acknowledged put and `DONE` at the end; then waits to be killed.
#[test]
#[ignore = "run by the tests of this file as a child process"]
fn damage_child() {
    let Some(path) = std::env::var_os("POSTBOX_DAMAGE_CHILD") else {
        return;
    };
    run_child(async move {
        let store = EmbeddedStore::open(path, EmbeddedOptions::default()).unwrap();
        create(&store, "tbl", None, None).await;
        let ack = |key: &str| {
            let mut out = std::io::stdout().lock();
            writeln!(out, "ACK {key}").unwrap();
            out.flush().unwrap();
        };
        // Long enough for several checkpoints (one every 125 ms of writes).
        for i in 0..30 {
            let key = format!("a{i}");
            put_key(&store, &key).await.unwrap();
            ack(&key);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The next checkpoint's sync never finishes: no checkpoint after it
        // comes due, and every write from here on is in the log only.
        faults::arm(faults::CHECKPOINT_SYNC, Action::Hold);
        for i in 0..40 {
            let key = format!("b{i}");
            put_key(&store, &key).await.unwrap();
            ack(&key);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        println!("DONE");
        std::io::stdout().flush().unwrap();
        std::future::pending::<()>().await;
    });
}

async fn put_key(store: &EmbeddedStore, key: &str) -> Result<(), StoreError> {
    put(
        store,
        json!({"TableName": "tbl", "Item": {"pk": {"S": key}}}),
    )
    .await
    .map(|_| ())
}

async fn has_key(store: &EmbeddedStore, key: &str) -> bool {
    let out = store
        .get_item(req_of(
            json!({"TableName": "tbl", "Key": {"pk": {"S": key}}}),
        ))
        .await
        .unwrap();
    out.item.is_some()
}

/// The files a crash left: the store file and its log, in `dir`, with the
/// keys acknowledged before it.
struct Crashed {
    dir: tempfile::TempDir,
    acknowledged: Vec<String>,
}

impl Crashed {
    fn store(&self) -> PathBuf {
        self.dir.path().join("s.redb")
    }

    fn region(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A copy of the crashed files in a fresh directory, to damage.
    fn copy(&self) -> tempfile::TempDir {
        let to = tempfile::tempdir().unwrap();
        for name in ["s.redb", REGIONS[0], REGIONS[1]] {
            std::fs::copy(self.dir.path().join(name), to.path().join(name)).unwrap();
        }
        to
    }
}

/// Runs the child to its end and kills it.
fn crash() -> Crashed {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "damage_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("POSTBOX_DAMAGE_CHILD", &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut acknowledged = Vec::new();
    let mut done = false;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(key) = line.strip_prefix("ACK ") {
            acknowledged.push(key.to_owned());
        } else if line == "DONE" {
            done = true;
            break;
        }
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(done, "the child stopped early after {acknowledged:?}");
    Crashed { dir, acknowledged }
}

/// Opens the store at `path` as `postbox serve` does (durable, with a log).
fn open(path: &Path) -> Result<EmbeddedStore, StoreError> {
    EmbeddedStore::open(path, EmbeddedOptions::default())
}

fn open_truncated(path: &Path) -> Result<EmbeddedStore, StoreError> {
    EmbeddedStore::open(
        path,
        EmbeddedOptions {
            recover_truncated: true,
            ..EmbeddedOptions::default()
        },
    )
}

/// The acknowledged keys the store at `path` lacks.
async fn missing(store: &EmbeddedStore, acknowledged: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for key in acknowledged {
        if !has_key(store, key).await {
            out.push(key.clone());
        }
    }
    out
}

fn refusal(result: Result<EmbeddedStore, StoreError>) -> String {
    match result {
        Ok(_) => panic!("a damaged commit log was opened without a word"),
        Err(e) => e.to_string(),
    }
}

/// The crashed files open with every acknowledged write, after the refused
/// opens of their damaged copies changed nothing in them.
async fn opens_whole(crashed: &Crashed) {
    let store = open(&crashed.store()).unwrap();
    assert_eq!(
        missing(&store, &crashed.acknowledged).await,
        Vec::<String>::new()
    );
}

/// Each region cut back to its header (32 bytes): the writes it held after
/// the store file's last checkpoint are gone. The open is refused, naming
/// the file; the same files with the region restored open whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_cut_short_is_refused_and_changes_nothing() {
    let crashed = crash();
    let mut refused = 0;
    for name in REGIONS {
        let copy = crashed.copy();
        let region = copy.path().join(name);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&region)
            .unwrap()
            .set_len(32)
            .unwrap();
        let log_before = REGIONS.map(|n| std::fs::read(copy.path().join(n)).unwrap());
        let e = refusal(open(&copy.path().join("s.redb")));
        assert!(
            e.contains(&region.display().to_string())
                && e.contains("was cut")
                && e.contains("32 bytes long"),
            "{e}"
        );
        assert_eq!(
            REGIONS.map(|n| std::fs::read(copy.path().join(n)).unwrap()),
            log_before,
            "a refused open leaves the log as it was"
        );
        // The region as it was: every acknowledged write is there.
        std::fs::copy(crashed.region(name), &region).unwrap();
        let store = open(&copy.path().join("s.redb")).unwrap();
        assert_eq!(
            missing(&store, &crashed.acknowledged).await,
            Vec::<String>::new()
        );
        refused += 1;
    }
    assert_eq!(refused, 2);
    opens_whole(&crashed).await;
}

/// A region missing after a crash: it may have held the only copy of
/// acknowledged writes, so the open is refused, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_missing_after_an_unclean_stop_is_refused() {
    let crashed = crash();
    for name in REGIONS {
        let copy = crashed.copy();
        let region = copy.path().join(name);
        std::fs::remove_file(&region).unwrap();
        let e = refusal(open(&copy.path().join("s.redb")));
        assert!(
            e.contains(&region.display().to_string())
                && e.contains("is missing")
                && e.contains("not closed cleanly"),
            "{e}"
        );
        assert!(!region.exists(), "a refused open creates no region");
        std::fs::copy(crashed.region(name), &region).unwrap();
        let store = open(&copy.path().join("s.redb")).unwrap();
        assert_eq!(
            missing(&store, &crashed.acknowledged).await,
            Vec::<String>::new()
        );
    }
}

/// With `recover_truncated`, the same damage opens: the writes the
/// damaged region held are lost (the store says which in its log), the
/// rest are there, and the store takes writes again. The next open, after
/// a clean close, needs nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_truncated_opens_a_damaged_log_with_what_is_left() {
    let crashed = crash();
    let damages: [(&str, Damage); 2] = [
        ("cut", |p| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(p)
                .unwrap()
                .set_len(32)
                .unwrap()
        }),
        ("missing", |p| std::fs::remove_file(p).unwrap()),
    ];
    for (what, damage) in damages {
        let copy = crashed.copy();
        for name in REGIONS {
            damage(&copy.path().join(name));
        }
        let path = copy.path().join("s.redb");
        assert!(open(&path).is_err(), "{what}: refused without the option");
        let store = open_truncated(&path).unwrap();
        let lost = missing(&store, &crashed.acknowledged).await;
        // The writes after the held checkpoint were in the log only.
        assert!(
            lost.iter().any(|k| k.starts_with('b')),
            "{what}: nothing was lost? {lost:?}"
        );
        // Only writes of the log's last two rounds can be lost: those of
        // the first half of the child's run are in the store file.
        assert!(
            ["a0", "a1", "a2"]
                .iter()
                .all(|k| !lost.iter().any(|l| l == k)),
            "{what}: {lost:?}"
        );
        put_key(&store, "after").await.unwrap();
        drop(store);
        let store = open(&path).unwrap();
        assert!(has_key(&store, "after").await, "{what}");
    }
}

/// Damage done to a region file.
type Damage = fn(&Path);

/// A clean close leaves every write in the store file: its log may then be
/// deleted (or cut), and the store opens with every write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_clean_close_the_log_may_be_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = open(&path).unwrap();
    create(&store, "tbl", None, None).await;
    let keys: Vec<String> = (0..50).map(|i| format!("k{i}")).collect();
    for key in &keys {
        put_key(&store, key).await.unwrap();
    }
    drop(store);
    for name in REGIONS {
        std::fs::remove_file(dir.path().join(name)).unwrap();
    }
    let store = open(&path).unwrap();
    assert_eq!(missing(&store, &keys).await, Vec::<String>::new());
    put_key(&store, "again").await.unwrap();
    drop(store);
    // And again: the open before recorded that the log is in use, its
    // close that it is not. Cut instead of deleted, the log loses nothing
    // either.
    for name in REGIONS {
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join(name))
            .unwrap()
            .set_len(32)
            .unwrap();
    }
    let store = open(&path).unwrap();
    assert!(has_key(&store, "again").await);
    put_key(&store, "third").await.unwrap();
    drop(store);
    for name in REGIONS {
        std::fs::remove_file(dir.path().join(name)).unwrap();
    }
    let store = open(&path).unwrap();
    assert!(has_key(&store, "third").await);
}
