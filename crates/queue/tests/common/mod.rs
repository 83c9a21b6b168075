//! Shared set-up of the queue integration tests: a store and its queues in a
//! temporary directory, on a clock the test moves by hand.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use postbox_queue::{NewMessage, Queues, QueuesOptions, ReceiveOptions, ReceivedMessage};
use postbox_store::ManualClock;
use postbox_store::embedded::{Durability, EmbeddedOptions, EmbeddedStore};

/// Start of the manual clock: a plausible "now" in ms.
pub const T0: u64 = 1_700_000_000_000;

pub struct Env {
    pub dir: tempfile::TempDir,
    pub clock: Arc<ManualClock>,
    pub store: EmbeddedStore,
    pub queues: Queues,
}

pub async fn open_at(path: &Path, clock: Arc<ManualClock>) -> (EmbeddedStore, Queues) {
    let options = EmbeddedOptions {
        durability: Durability::NoFsync,
        clock: clock.clone(),
        ..EmbeddedOptions::default()
    };
    let store = EmbeddedStore::open(path, options).unwrap();
    let queues = Queues::open(
        store.clone(),
        QueuesOptions {
            clock,
            ..QueuesOptions::default()
        },
    )
    .await
    .unwrap();
    (store, queues)
}

pub async fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let (store, queues) = open_at(&dir.path().join("q.redb"), clock.clone()).await;
    Env {
        dir,
        clock,
        store,
        queues,
    }
}

pub fn attrs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub async fn fifo(queues: &Queues, name: &str) {
    queues
        .create_queue(name, attrs(&[("FifoQueue", "true")]))
        .await
        .unwrap();
}

pub fn recv(max: i64, visibility: Option<i64>) -> ReceiveOptions {
    ReceiveOptions {
        max_messages: Some(max),
        visibility_timeout: visibility,
        wait_time_seconds: Some(0),
        ..Default::default()
    }
}

pub fn bodies(messages: &[ReceivedMessage]) -> Vec<String> {
    messages.iter().map(|m| m.body.clone()).collect()
}

pub fn grouped(body: &str, group: &str) -> NewMessage {
    NewMessage::new(body).group(group).dedup(body)
}
