//! Helpers shared by the relay's integration tests: a store with queues in
//! a temporary directory, tables with streams, draining queues.
#![allow(dead_code)]

use std::time::Duration;

use postbox_item::item_from_json;
use postbox_queue::{Queues, ReceiveOptions};
use postbox_relay::{PipeStats, Relay, RelayConfig, RelayOptions};
use postbox_store::api::*;
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
use postbox_store::{ChangeStreams, ItemStore};
use serde_json::Value;

pub struct Env {
    pub dir: tempfile::TempDir,
    pub store: EmbeddedStore,
    pub queues: Queues,
}

pub async fn env() -> Env {
    env_with(EmbeddedOptions::default()).await
}

pub async fn env_with(options: EmbeddedOptions) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let (store, queues) =
        postbox_queue::testing::open_with(&dir.path().join("postbox.redb"), options).await;
    Env { dir, store, queues }
}

/// A table keyed by `pk` (S) with a NEW_AND_OLD_IMAGES stream.
pub async fn create_table(store: &EmbeddedStore, name: &str) {
    store
        .create_table(CreateTableInput {
            stream_specification: Some(StreamSpecification {
                stream_enabled: true,
                stream_view_type: Some(StreamViewType::NewAndOldImages),
            }),
            ..CreateTableInput::keyed_by(name, "pk")
        })
        .await
        .unwrap();
}

/// Puts an item given in DynamoDB JSON.
pub async fn put(store: &EmbeddedStore, table: &str, item: Value) {
    let item = item_from_json(&item).unwrap();
    store
        .put_item(PutItemInput {
            table_name: table.into(),
            item,
            ..Default::default()
        })
        .await
        .unwrap();
}

/// Receives and deletes every message of `queue`; returns the bodies in order.
pub async fn drain(queues: &Queues, queue: &str) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        let options = ReceiveOptions {
            max_messages: Some(10),
            visibility_timeout: Some(3600),
            wait_time_seconds: Some(0),
            ..Default::default()
        };
        let got = queues.receive(queue, options).await.unwrap();
        if got.is_empty() {
            return out;
        }
        for m in got {
            queues.delete(queue, &m.receipt_handle).await.unwrap();
            out.push(m.body);
        }
    }
}

/// Relay options for tests.
pub fn options(owner: &str) -> RelayOptions {
    RelayOptions {
        owner: owner.to_owned(),
        ..RelayOptions::default()
    }
}

pub async fn start(env: &Env, toml: &str, owner: &str) -> Relay {
    let config = RelayConfig::from_toml(toml).unwrap();
    Relay::start(
        env.store.clone(),
        env.queues.clone(),
        config,
        options(owner),
    )
    .await
    .unwrap()
}

/// Waits until every pipe of `relay` has relayed its whole stream, and
/// returns the stats (one view: the checkpoint they show is the last
/// commit their counters include).
pub async fn caught_up(relay: &Relay) -> Vec<PipeStats> {
    for _ in 0..1000 {
        let stats = relay.stats().await.unwrap();
        if stats.iter().all(|s| s.records_behind == 0) {
            return stats;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "the relay did not catch up: {:?}",
        relay.stats().await.unwrap()
    );
}

/// Polls the store's checkpoint of pipe `pipe` on `table` (not the
/// relay's stats) until `ready` holds, for at most 5 s; returns it then.
pub async fn store_checkpoint(
    env: &Env,
    table: &str,
    pipe: &str,
    ready: impl Fn(Option<u64>) -> bool,
) -> Option<u64> {
    let reader = format!("pipe:{pipe}");
    for _ in 0..1000 {
        let at = env.store.checkpoint(table, &reader).await.unwrap();
        if ready(at) {
            return at;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    env.store.checkpoint(table, &reader).await.unwrap()
}

pub fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap()
}
