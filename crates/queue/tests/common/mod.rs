//! Shared set-up of the queue integration tests: a store and its queues in a
//! temporary directory, on a clock the test moves by hand.

#![allow(dead_code)]

use std::sync::Arc;

use postbox_queue::{NewMessage, Queues, ReceiveOptions, ReceivedMessage};
use postbox_store::ManualClock;
use postbox_store::embedded::EmbeddedStore;

#[allow(unused_imports)]
pub use postbox_queue::testing::{T0, attrs, open_at};

pub struct Env {
    pub dir: tempfile::TempDir,
    pub clock: Arc<ManualClock>,
    pub store: EmbeddedStore,
    pub queues: Queues,
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

pub async fn fifo(queues: &Queues, name: &str) {
    postbox_queue::testing::create_fifo(queues, name, &[]).await;
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
