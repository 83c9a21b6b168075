//! Test fixtures for this crate and the crates above it (feature
//! `test-support`): a store on a temporary file with a clock the test
//! moves, and requests written as DynamoDB JSON. Each crate's harness
//! builds on these rather than opening stores its own way.

use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::ManualClock;
use crate::embedded::{Durability, EmbeddedOptions, EmbeddedStore};

/// 2030-01-01T00:00:00Z in ms: where a test's manual clock starts.
pub const T0: u64 = 1_893_456_000_000;

/// Options for tests: no fsync (tests are about logic; the crash tests ask
/// for fsync themselves) and `clock`; everything else as a node runs.
pub fn options(clock: Arc<ManualClock>) -> EmbeddedOptions {
    EmbeddedOptions {
        durability: Durability::NoFsync,
        clock,
        ..EmbeddedOptions::default()
    }
}

/// A store on a file in a temporary directory; the directory lives as long
/// as this value.
pub struct TempStore {
    /// The store.
    pub store: EmbeddedStore,
    /// Its clock, at [`T0`] when opened.
    pub clock: Arc<ManualClock>,
    /// The directory holding the file.
    pub dir: tempfile::TempDir,
}

impl TempStore {
    /// A fresh store with [`options`] on a clock at [`T0`], adjusted by
    /// `adjust` (for example a sweeper that only runs when asked).
    pub fn open_with(adjust: impl FnOnce(EmbeddedOptions) -> EmbeddedOptions) -> TempStore {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let clock = Arc::new(ManualClock::new(T0));
        let store = open_file(
            &dir.path().join("store.redb"),
            adjust(options(clock.clone())),
        );
        TempStore { store, clock, dir }
    }

    /// A fresh store with [`options`] on a clock at [`T0`].
    pub fn open() -> TempStore {
        TempStore::open_with(|o| o)
    }
}

impl Deref for TempStore {
    type Target = EmbeddedStore;
    fn deref(&self) -> &EmbeddedStore {
        &self.store
    }
}

/// The store in the file at `path`, which a test expects to open.
pub fn open_file(path: &Path, options: EmbeddedOptions) -> EmbeddedStore {
    EmbeddedStore::open(path, options)
        .unwrap_or_else(|e| panic!("cannot open the test store {}: {e}", path.display()))
}

/// A request (or any API type) from its DynamoDB JSON.
pub fn from_json<T: DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("the JSON fits the API type")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Clock;
    use crate::api::CreateTableInput;

    #[tokio::test]
    async fn a_temp_store_opens_on_the_manual_clock_and_from_json_reads_requests() {
        let s = TempStore::open();
        assert_eq!(s.clock.now_ms(), T0);
        let input: CreateTableInput = from_json(serde_json::json!({
            "TableName": "tbl",
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
            "BillingMode": "PAY_PER_REQUEST",
        }));
        assert_eq!(input.table_name, "tbl");
        use crate::ItemStore;
        s.create_table(input).await.unwrap();
        assert!(s.dir.path().join("store.redb").exists());
    }
}
