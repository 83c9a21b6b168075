//! The commit log's failure paths, with the store's fault points: a record
//! whose write fails, and a sync of the log that fails. Either way every
//! caller of the batch gets a storage error, nobody reads what the failed
//! batch wrote, the store takes no more writes, and the file opens again
//! with every acknowledged write in it. Then the checkpoints, whose syncs
//! run beside the writer: one that fails, and a power cut while one is in
//! flight (the store file as of its last finished sync, the log as written).
//!
//! Fault points are process-wide, so the tests of this file run one at a
//! time (`SERIAL`).

mod common;

use std::sync::Arc;

use common::*;
use postbox_store::ManualClock;
use postbox_store::embedded::{Durability, EmbeddedStore};
use postbox_store::faults::{self, Action};
use postbox_store::{ChangeStreams, ItemStore, StoreError};
use serde_json::json;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn open(path: &std::path::Path) -> EmbeddedStore {
    let mut opts = options(Arc::new(ManualClock::new(NOW_MS)));
    opts.durability = Durability::Durable;
    assert!(opts.commit_log);
    EmbeddedStore::open(path, opts).unwrap()
}

async fn put_key(store: &EmbeddedStore, key: &str) -> Result<(), StoreError> {
    put(
        store,
        json!({"TableName": "tbl", "Item": {"pk": {"S": key}}}),
    )
    .await
    .map(|_| ())
}

async fn read_key(store: &EmbeddedStore, key: &str) -> Result<bool, StoreError> {
    let out = store
        .get_item(req_of(
            json!({"TableName": "tbl", "Key": {"pk": {"S": key}}}),
        ))
        .await?;
    Ok(out.item.is_some())
}

/// A durable store with a log in a temporary directory, holding the
/// table `tbl` and the acknowledged put `before`.
async fn with_one_put() -> (tempfile::TempDir, std::path::PathBuf, EmbeddedStore) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = open(&path);
    create(&store, "tbl", None, Some("NEW_IMAGE")).await;
    put_key(&store, "before").await.unwrap();
    (dir, path, store)
}

/// Twenty concurrent puts while `point` is armed: each must fail with a
/// storage error.
async fn puts_fail_at(store: &EmbeddedStore, point: &str) {
    faults::arm(point, Action::Stop);
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move { put_key(&store, &format!("k{i}")).await })
        })
        .collect();
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    faults::clear();
    for r in results {
        match r {
            Err(StoreError::Storage(m)) => assert!(
                m.contains("injected") || m.contains("stopped accepting writes"),
                "{m}"
            ),
            other => panic!("a write of a failed batch answered {other:?}"),
        }
    }
    check_err(
        put_key(store, "after").await,
        "InternalServerError",
        "stopped accepting writes",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_log_write_fails_its_batch_and_leaves_no_trace() {
    let _serial = SERIAL.lock().await;
    let (_dir, path, store) = with_one_put().await;

    puts_fail_at(&store, faults::LOG_APPEND).await;
    // The batch's transaction never committed: reads go on, without it.
    assert!(read_key(&store, "before").await.unwrap());
    assert!(!read_key(&store, "k0").await.unwrap());
    assert_eq!(
        postbox_store::ChangeStreams::stream_head(&store, "tbl")
            .await
            .unwrap(),
        1,
        "only the acknowledged put has a stream record"
    );
    drop(store);

    let store = open(&path);
    assert!(read_key(&store, "before").await.unwrap());
    for i in 0..20 {
        assert!(!read_key(&store, &format!("k{i}")).await.unwrap(), "k{i}");
    }
    put_key(&store, "reopened").await.unwrap();
    assert!(read_key(&store, "reopened").await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_log_sync_hides_its_batch_and_reopens_whole() {
    let _serial = SERIAL.lock().await;
    let (_dir, path, store) = with_one_put().await;

    puts_fail_at(&store, faults::LOG_SYNC).await;
    // The batch committed in memory, but its record may not be on disk:
    // no reader may see it, so reads fail rather than show it.
    match read_key(&store, "k0").await {
        Err(StoreError::Storage(_)) => {}
        other => panic!("a read after a failed sync answered {other:?}"),
    }
    drop(store);

    // A failed sync is an unknown outcome, as for any storage error: each
    // put of the batch is there whole or not at all; what was acknowledged
    // is there.
    let store = open(&path);
    assert!(read_key(&store, "before").await.unwrap());
    let present = {
        let mut n = 0;
        for i in 0..20 {
            n += read_key(&store, &format!("k{i}")).await.unwrap() as u64;
        }
        n
    };
    assert_eq!(
        postbox_store::ChangeStreams::stream_head(&store, "tbl")
            .await
            .unwrap(),
        1 + present,
        "every item present has its stream record, and no other"
    );
    put_key(&store, "reopened").await.unwrap();
    assert!(read_key(&store, "reopened").await.unwrap());
}

/// `submit_unsynced` answers at the commit, before the record's sync: with
/// every sync failing, its caller still hears success, while the next
/// write, which waits for its sync, fails with the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsynced_submit_is_answered_before_its_sync() {
    let _serial = SERIAL.lock().await;
    let (_dir, _path, store) = with_one_put().await;

    faults::arm(faults::LOG_SYNC, Action::Stop);
    let early = store
        .submit_unsynced(|ctx| {
            let item = postbox_item::Item::from([(
                "pk".to_owned(),
                postbox_item::AttributeValue::s("early"),
            )]);
            ctx.put_item("tbl", item).map(|_| ())
        })
        .await;
    let synced = put_key(&store, "after").await;
    faults::clear();
    assert!(early.is_ok(), "the unsynced write answered {early:?}");
    match synced {
        Err(StoreError::Storage(_)) => {}
        other => panic!("a synced write after a failed sync answered {other:?}"),
    }
}

/// A checkpoint's sync of the store file runs beside the writer; when it
/// fails, the writes after it fail with the store, and the file opens again
/// with every acknowledged write (the log still holds them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_checkpoint_sync_stops_writes_and_reopens_whole() {
    let _serial = SERIAL.lock().await;
    let (_dir, path, store) = with_one_put().await;

    faults::arm(faults::CHECKPOINT_SYNC, Action::Stop);
    // Puts until one fails: a checkpoint comes due within a fraction of a
    // second, its sync fails, and the store stops taking writes.
    let mut acknowledged = Vec::new();
    let refused = loop {
        let key = format!("k{}", acknowledged.len());
        match put_key(&store, &key).await {
            Ok(()) => acknowledged.push(key),
            Err(e) => break e,
        }
        assert!(acknowledged.len() < 200, "no checkpoint sync failed");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    faults::clear();
    match refused {
        StoreError::Storage(m) => assert!(m.contains("store file sync"), "{m}"),
        other => panic!("a write after a failed checkpoint sync answered {other:?}"),
    }
    check_err(
        put_key(&store, "after").await,
        "InternalServerError",
        "stopped accepting writes",
    );
    drop(store);

    let store = open(&path);
    assert!(read_key(&store, "before").await.unwrap());
    for key in &acknowledged {
        assert!(read_key(&store, key).await.unwrap(), "{key}");
    }
    put_key(&store, "reopened").await.unwrap();
}

/// A machine that loses power keeps only what was synced. The store file's
/// image here is taken at each finished sync; then syncs are held, so a
/// checkpoint's commit and the writes after it are acknowledged (through
/// the log) while the file on "disk" is still the checkpoint before. That
/// image and the log as written must open with every acknowledged write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_loss_during_a_checkpoints_sync_loses_no_acknowledged_write() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let disk = Arc::new(PowerLoss::default());
    let mut opts = options(Arc::new(ManualClock::new(NOW_MS)));
    opts.durability = Durability::Durable;
    let store = EmbeddedStore::open_with_file_wrapper(&path, opts, |file| Synced {
        file,
        disk: disk.clone(),
    })
    .unwrap();
    create(&store, "tbl", None, Some("NEW_IMAGE")).await;

    // Puts every few milliseconds, each recorded once acknowledged.
    let acknowledged = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let putter = {
        let (store, acknowledged, stop) = (store.clone(), acknowledged.clone(), stop.clone());
        tokio::spawn(async move {
            for i in 0.. {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let key = format!("k{i}");
                put_key(&store, &key).await.unwrap();
                acknowledged.lock().unwrap().push(key);
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
    };
    let count = || acknowledged.lock().unwrap().len();
    // Several checkpoints whose syncs finish, then one that is held.
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    *disk.hold.lock().unwrap() = true;
    let caught = std::time::Instant::now();
    while !*disk.waiting.lock().unwrap() {
        assert!(caught.elapsed().as_secs() < 10, "no checkpoint came due");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let before = count();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;

    // The power goes: the store file as of its last finished sync, the log
    // as written (every record of an acknowledged write was synced).
    let acknowledged = acknowledged.lock().unwrap().clone();
    let after = tempfile::tempdir().unwrap();
    let moved = after.path().join("s.redb");
    std::fs::write(&moved, &*disk.image.lock().unwrap()).unwrap();
    for region in ["s.redb-log", "s.redb-log.1"] {
        std::fs::copy(dir.path().join(region), after.path().join(region)).unwrap();
    }
    assert!(
        acknowledged.len() > before,
        "writes go on while a checkpoint's sync is in flight"
    );
    *disk.hold.lock().unwrap() = false;
    disk.released.notify_all();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    putter.await.unwrap();
    drop(store);

    let store = open(&moved);
    for key in &acknowledged {
        assert!(read_key(&store, key).await.unwrap(), "{key} was lost");
    }
}

/// What the simulated disk holds: the store file's image at its last
/// finished sync, and whether syncs are held.
#[derive(Default)]
struct PowerLoss {
    image: std::sync::Mutex<Vec<u8>>,
    hold: std::sync::Mutex<bool>,
    released: std::sync::Condvar,
    /// A sync is waiting for the hold to end.
    waiting: std::sync::Mutex<bool>,
}

/// redb's file backend, keeping [`PowerLoss::image`] at each sync.
struct Synced {
    file: redb::backends::FileBackend,
    disk: Arc<PowerLoss>,
}

impl std::fmt::Debug for Synced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Synced")
    }
}

impl redb::StorageBackend for Synced {
    fn len(&self) -> std::io::Result<u64> {
        self.file.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.file.read(offset, out)
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.file.set_len(len)
    }

    fn sync_data(&self) -> std::io::Result<()> {
        let mut held = self.disk.hold.lock().unwrap();
        while *held {
            *self.disk.waiting.lock().unwrap() = true;
            held = self.disk.released.wait(held).unwrap();
        }
        drop(held);
        self.file.sync_data()?;
        let mut image = vec![0; self.file.len()? as usize];
        self.file.read(0, &mut image)?;
        *self.disk.image.lock().unwrap() = image;
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.file.write(offset, data)
    }

    fn close(&self) -> std::io::Result<()> {
        self.file.close()
    }

    fn try_lock_range(
        &self,
        start: std::ops::Bound<u64>,
        end: std::ops::Bound<u64>,
    ) -> Result<bool, redb::BackendError> {
        self.file.try_lock_range(start, end)
    }

    fn unlock_range(
        &self,
        start: std::ops::Bound<u64>,
        end: std::ops::Bound<u64>,
    ) -> Result<(), redb::BackendError> {
        self.file.unlock_range(start, end)
    }
}

/// A committed-stream read (the relay's) sees a commit whose log record is
/// not synced yet; the ordinary read, the durable head and `wait_synced`
/// wait for that sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_committed_stream_read_does_not_wait_for_the_sync() {
    let _serial = SERIAL.lock().await;
    let (_dir, _path, store) = with_one_put().await;
    let head = store.committed_stream_head("tbl").await.unwrap();
    assert_eq!(store.stream_head("tbl").await.unwrap(), head);

    let held = faults::hold(faults::GROUP_SYNC);
    let put = {
        let store = store.clone();
        tokio::spawn(async move { put_key(&store, "held").await })
    };
    let committed = {
        let store = store.clone();
        tokio::spawn(async move {
            let woke = store
                .wait_for_committed_records("tbl", head, std::time::Duration::from_secs(10))
                .await?;
            Ok::<_, StoreError>((woke, store.read_committed_stream("tbl", head, 10).await?))
        })
    };
    for _ in 0..1000 {
        if committed.is_finished() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let read_early = committed.is_finished();
    let blocked = [
        {
            let store = store.clone();
            tokio::spawn(async move { store.read_stream("tbl", head, 10).await.map(|r| r.len()) })
        },
        {
            let store = store.clone();
            tokio::spawn(async move { store.wait_synced().await.map(|()| 0) })
        },
    ];
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let waited = blocked.iter().all(|t| !t.is_finished()) && !put.is_finished();
    drop(held);

    assert!(read_early, "the committed read waited for the sync");
    let (woke, read) = committed.await.unwrap().unwrap();
    assert!(woke, "no commit woke the committed-records wait");
    assert_eq!(read.len(), 1, "the committed read missed the unsynced put");
    assert_eq!(read[0].sequence_number, head + 1);
    assert!(
        waited,
        "a read or the put finished before the record's sync"
    );
    put.await.unwrap().unwrap();
    let [durable, synced] = blocked;
    assert_eq!(durable.await.unwrap().unwrap(), 1);
    synced.await.unwrap().unwrap();
    assert_eq!(store.stream_head("tbl").await.unwrap(), head + 1);
}

/// A retry of a TransactWriteItems with its ClientRequestToken, sent while
/// the first send is committed but not yet synced (so not yet answered), is
/// a replay: the token is recorded in the transaction's own commit, not
/// once its caller has the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_retried_before_the_first_answer_applies_once() {
    let _serial = SERIAL.lock().await;
    let (_dir, _path, store) = with_one_put().await;
    let head = store.committed_stream_head("tbl").await.unwrap();
    let held = faults::hold(faults::GROUP_SYNC);
    let first = {
        let store = store.clone();
        tokio::spawn(async move { store.transact_write_items(add("tok-1", "1")).await })
    };
    let mut committed = false;
    for _ in 0..1000 {
        if !store
            .read_committed_stream("tbl", head, 10)
            .await
            .unwrap()
            .is_empty()
        {
            committed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let retry = {
        let store = store.clone();
        tokio::spawn(async move { store.transact_write_items(add("tok-1", "1")).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let first_waited = !first.is_finished();
    drop(held);

    assert!(committed, "the first send never committed");
    assert!(first_waited, "the first send was answered before its sync");
    first.await.unwrap().unwrap();
    retry.await.unwrap().unwrap();
    let c = get(&store, "tbl", json!({"pk": {"S": "c"}})).await.unwrap();
    assert_eq!(c["n"], postbox_item::AttributeValue::n(1), "applied twice");
}
