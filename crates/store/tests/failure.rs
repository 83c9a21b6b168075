//! Storage failures: an I/O error during a commit fails every request of
//! the batch and stops the store for writes, for good, instead of letting
//! it limp on. The faults come from a redb storage backend that fails on
//! demand (the in-memory backend underneath).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::*;
use postbox_store::embedded::{Durability, EmbeddedStore};
use postbox_store::{ChangeStreams, StoreError};
use redb::StorageBackend;
use redb::backends::InMemoryBackend;
use serde_json::json;

/// An in-memory file whose writes and syncs fail while `fail` is set.
#[derive(Debug)]
struct FaultyBackend {
    inner: InMemoryBackend,
    fail: Arc<AtomicBool>,
}

impl FaultyBackend {
    fn check(&self) -> std::io::Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("injected I/O error"));
        }
        Ok(())
    }
}

impl StorageBackend for FaultyBackend {
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.inner.read(offset, out)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.check()?;
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.check()?;
        self.inner.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.check()?;
        self.inner.write(offset, data)
    }
}

async fn faulty_store() -> (EmbeddedStore, Arc<AtomicBool>) {
    let fail = Arc::new(AtomicBool::new(false));
    let backend = FaultyBackend {
        inner: InMemoryBackend::new(),
        fail: fail.clone(),
    };
    let mut opts = options(Arc::new(postbox_store::ManualClock::new(NOW_MS)));
    opts.durability = Durability::Durable;
    let store = EmbeddedStore::open_with_backend(backend, opts).unwrap();
    create(&store, "tbl", None, Some("NEW_IMAGE")).await;
    (store, fail)
}

#[tokio::test]
async fn an_in_memory_backend_works_like_a_file() {
    let (s, _) = faulty_store().await;
    put(&s, json!({"TableName": "tbl", "Item": {"pk": {"S": "a"}}}))
        .await
        .unwrap();
    assert!(get(&s, "tbl", json!({"pk": {"S": "a"}})).await.is_some());
    assert_eq!(s.stream_head("tbl").await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_commit_fails_its_whole_batch_and_stops_writes_for_good() {
    let (s, fail) = faulty_store().await;
    put(
        &s,
        json!({"TableName": "tbl", "Item": {"pk": {"S": "before"}}}),
    )
    .await
    .unwrap();
    fail.store(true, Ordering::SeqCst);
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let store = s.clone();
            tokio::spawn(async move {
                put(
                    &store,
                    json!({"TableName": "tbl", "Item": {"pk": {"S": format!("k{i}")}}}),
                )
                .await
            })
        })
        .collect();
    for t in tasks {
        match t.await.unwrap() {
            Err(StoreError::Storage(_)) => {}
            other => panic!(
                "every write of a failed batch must fail with a storage error, got {other:?}"
            ),
        }
    }
    fail.store(false, Ordering::SeqCst);
    check_err(
        put(
            &s,
            json!({"TableName": "tbl", "Item": {"pk": {"S": "after"}}}),
        )
        .await,
        "InternalServerError",
        "stopped accepting writes",
    );
    check_err(
        s.set_checkpoint("tbl", "r", 1).await,
        "InternalServerError",
        "stopped accepting writes",
    );
    assert!(
        get(&s, "tbl", json!({"pk": {"S": "before"}}))
            .await
            .is_some(),
        "reads still serve committed data"
    );
    assert_eq!(
        get(&s, "tbl", json!({"pk": {"S": "k0"}})).await,
        None,
        "nothing of the failed batch is visible"
    );
}
