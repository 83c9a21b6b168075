//! The closing checkpoint saves the arrival indexes for the next open; a
//! failure of that save (fault point `store::arrival_save`, after a table's
//! snapshot was written into the closing transaction) still closes the
//! commit log: the checkpoint is made again without the snapshots, and the
//! next open rebuilds the index from the rows and finds every item. In a
//! file of its own: fault points are process-wide, and the other arrival
//! tests close stores too.

mod common;

use std::path::Path;

use common::*;
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
use postbox_store::faults;
use serde_json::json;

const TABLE: &str = "arrival";

/// The store file's `clean_close` flag, and whether it holds snapshots.
fn closed_state(path: &Path) -> (Option<u64>, bool) {
    use redb::{ReadableDatabase, TableDefinition};
    let system: TableDefinition<&str, u64> = TableDefinition::new("system");
    let snapshots: TableDefinition<(u32, u32), &[u8]> = TableDefinition::new("arrival_snapshots");
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_read().unwrap();
    let clean = txn
        .open_table(system)
        .unwrap()
        .get("clean_close")
        .unwrap()
        .map(|g| g.value());
    let saved = txn.open_table(snapshots).is_ok();
    (clean, saved)
}

#[tokio::test]
async fn a_failed_save_of_the_arrival_index_still_closes_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    // Durable, with the commit log: the close is a checkpoint.
    let options = || EmbeddedOptions {
        arrival_tables: vec![TABLE.to_owned()],
        ..EmbeddedOptions::default()
    };
    let store = EmbeddedStore::open(&path, options()).unwrap();
    create(&store, TABLE, None, None).await;
    for n in 0..50 {
        put(
            &store,
            json!({"TableName": TABLE, "Item": {"pk": {"S": format!("k{n}")}}}),
        )
        .await
        .unwrap();
    }
    faults::arm(faults::ARRIVAL_SAVE, faults::Action::Stop);
    drop(store);
    faults::disarm(faults::ARRIVAL_SAVE);
    assert!(faults::reached(faults::ARRIVAL_SAVE));
    assert_eq!(
        closed_state(&path),
        (Some(1), false),
        "closed cleanly, no snapshot"
    );
    let store = EmbeddedStore::open(&path, options()).unwrap();
    assert_eq!(store.arrival_index_restored(TABLE), Some(false));
    for n in 0..50 {
        let found = get(&store, TABLE, json!({"pk": {"S": format!("k{n}")}})).await;
        assert!(found.is_some(), "k{n}");
    }
    drop(store);
    // Without the fault, the next close saves it again.
    assert_eq!(closed_state(&path), (Some(1), true));
    let store = EmbeddedStore::open(&path, options()).unwrap();
    assert_eq!(store.arrival_index_restored(TABLE), Some(true));
}
