//! The commit log's failure paths, with the store's fault points: a record
//! whose write fails, and a sync of the log that fails. Either way every
//! caller of the batch gets a storage error, nobody reads what the failed
//! batch wrote, the store takes no more writes, and the file opens again
//! with every acknowledged write in it.
//!
//! Fault points are process-wide, so the tests of this file run one at a
//! time (`SERIAL`).

mod common;

use std::sync::Arc;

use common::*;
use postbox_store::embedded::{Durability, EmbeddedStore, ManualClock};
use postbox_store::faults::{self, Action};
use postbox_store::{ItemStore, StoreError};
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
