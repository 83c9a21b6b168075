//! Test fixtures for this crate and the crates above it (feature
//! `test-support`): a store and its queues on one file, and queue
//! attributes written as pairs. Built on the store's own fixtures.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use postbox_store::ManualClock;
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
pub use postbox_store::testing::T0;

use crate::{Queues, QueuesOptions};

/// A store opened with `options` (and the queues' tables) at `path`, and
/// its queues on the store's clock.
pub async fn open_with(path: &Path, options: EmbeddedOptions) -> (EmbeddedStore, Queues) {
    let clock = options.clock.clone();
    let store = postbox_store::testing::open_file(path, options.keeping(crate::tables()));
    let queues = Queues::open(
        store.clone(),
        QueuesOptions {
            clock,
            ..QueuesOptions::default()
        },
    )
    .await
    .expect("the test store's queues open");
    (store, queues)
}

/// A store and its queues at `path` on `clock`, without fsync.
pub async fn open_at(path: &Path, clock: Arc<ManualClock>) -> (EmbeddedStore, Queues) {
    open_with(path, postbox_store::testing::options(clock)).await
}

/// Queue attributes from `(name, value)` pairs.
pub fn attrs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Creates the FIFO queue `name` with `extra` attributes.
pub async fn create_fifo(queues: &Queues, name: &str, extra: &[(&str, &str)]) {
    let mut attributes = attrs(extra);
    attributes.insert("FifoQueue".to_owned(), "true".to_owned());
    queues
        .create_queue(name, attributes)
        .await
        .unwrap_or_else(|e| panic!("cannot create the test queue {name}: {e}"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn queues_open_on_the_stores_clock_and_fifo_queues_are_fifo() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(T0));
        let (_store, queues) = open_at(&dir.path().join("q.redb"), clock.clone()).await;
        create_fifo(&queues, "a.fifo", &[("VisibilityTimeout", "7")]).await;
        let a = queues
            .queue_attributes("a.fifo", &["All".to_owned()])
            .unwrap();
        assert_eq!(a.get("FifoQueue").map(String::as_str), Some("true"));
        assert_eq!(a.get("VisibilityTimeout").map(String::as_str), Some("7"));
        clock.advance_ms(1_000);
        queues
            .send("a.fifo", crate::NewMessage::new("m").group("g").dedup("m"))
            .await
            .unwrap();
        let options = crate::ReceiveOptions {
            wait_time_seconds: Some(0),
            ..Default::default()
        };
        let got = queues.receive("a.fifo", options).await.unwrap();
        let sent = got[0].system.get("SentTimestamp").map(String::as_str);
        assert_eq!(sent, Some(&*(T0 + 1_000).to_string()));
    }
}
