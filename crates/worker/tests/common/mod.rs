//! Helpers shared by the worker's integration tests: a store with queues
//! and an engine in a temporary directory, the events FIFO queue, and a
//! stand-in for the default events pipe (raw NewImage, group = tenant,
//! dedup id = event id) so these tests do not depend on the relay's loop.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use postbox_engine::catalog::Catalog;
use postbox_engine::{Context, Engine, Envelope, layout};
use postbox_item::{AttributeValue, Item, item_to_json};
use postbox_queue::{NewMessage, Queues};
use postbox_store::ItemStore;
use postbox_store::api::*;
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
use postbox_store::{Clock, SystemClock};
use postbox_worker::{Handler, Worker, WorkerOptions};

#[allow(unused_imports)]
pub use postbox_queue::testing::{attrs, create_fifo};

pub const QUEUE: &str = "postbox-events.fifo";
pub const DLQ: &str = "postbox-events-dlq.fifo";
pub const EVENTS: &str = "postbox_events";
pub const EFFECTS: &str = "effects";

pub struct Env {
    pub dir: tempfile::TempDir,
    pub store: Arc<EmbeddedStore>,
    pub queues: Queues,
    pub engine: Engine<EmbeddedStore>,
    pub catalog: Catalog,
}

/// A catalog with ORDER_PLACED and PAYMENT_COMPLETED and the given
/// subscriptions (TOML `[[subscriptions]]` blocks).
pub fn catalog(subscriptions: &str) -> Catalog {
    let text = format!(
        "[[event_types]]\nname = \"ORDER_PLACED\"\nproducers = [\"orders\"]\n\n\
         [[event_types]]\nname = \"PAYMENT_COMPLETED\"\nproducers = [\"payments\"]\n\n{subscriptions}"
    );
    Catalog::from_toml(&text, "test").unwrap()
}

/// A DURABLE subscription block; handler reference = `h::<name>`.
pub fn durable(name: &str, glob: &str, max_attempts: u32) -> String {
    format!(
        "[[subscriptions]]\nname = \"{name}\"\nglob = \"{glob}\"\nlane = \"DURABLE\"\nhandler = \"h::{name}\"\n\
         retry = {{ max_attempts = {max_attempts}, backoff_ms = 0 }}\n"
    )
}

pub async fn env(catalog: Catalog) -> Env {
    let dir = tempfile::tempdir().unwrap();
    open_env(dir, catalog).await
}

/// Opens the store in `dir` (creating queues and tables if missing).
pub async fn open_env(dir: tempfile::TempDir, catalog: Catalog) -> Env {
    let (store, queues, engine) = open_parts(dir.path(), catalog.clone()).await;
    Env {
        dir,
        store,
        queues,
        engine,
        catalog,
    }
}

pub async fn open_parts(
    path: &Path,
    catalog: Catalog,
) -> (Arc<EmbeddedStore>, Queues, Engine<EmbeddedStore>) {
    open_parts_at(path, catalog, Arc::new(SystemClock)).await
}

/// Opens the store in `path` with `clock` for the store and the queues.
pub async fn open_parts_at(
    path: &Path,
    catalog: Catalog,
    clock: Arc<dyn Clock>,
) -> (Arc<EmbeddedStore>, Queues, Engine<EmbeddedStore>) {
    let options = EmbeddedOptions {
        clock,
        ..EmbeddedOptions::default()
    };
    let (store, queues) =
        postbox_queue::testing::open_with(&path.join("postbox.redb"), options).await;
    if queues.queue_exists(QUEUE).is_err() {
        create_fifo(&queues, DLQ, &[]).await;
        let policy = postbox_queue::attributes::redrive_policy_text(&queues.arn(DLQ), 10);
        create_fifo(&queues, QUEUE, &[("RedrivePolicy", &policy)]).await;
    }
    let store = Arc::new(store);
    create_effects_table(&store).await;
    let engine = Engine::builder(store.clone(), catalog)
        .build()
        .await
        .unwrap();
    (store, queues, engine)
}

/// A table keyed by `pk` where handlers record their effects.
async fn create_effects_table(store: &EmbeddedStore) {
    let input = CreateTableInput::keyed_by(EFFECTS, "pk");
    match store.create_table(input).await {
        Ok(_) | Err(postbox_store::StoreError::ResourceInUse(_)) => {}
        Err(e) => panic!("{e}"),
    }
}

pub fn options(owner: &str) -> WorkerOptions {
    WorkerOptions {
        owner: owner.into(),
        wait_seconds: 0,
        order_wait_seconds: 0,
        ..WorkerOptions::default()
    }
}

pub async fn worker(
    env: &Env,
    handlers: HashMap<String, Handler>,
    owner: &str,
) -> Worker<EmbeddedStore> {
    Worker::new(
        env.store.clone(),
        env.queues.clone(),
        &env.catalog,
        handlers,
        options(owner),
    )
    .await
    .unwrap()
}

/// Emits `event_type` for `tenant`; returns the envelope.
pub async fn emit(env: &Env, tenant: &str, event_type: &str, n: u64) -> Envelope {
    let ctx = Context::new(tenant, "tester").unwrap();
    env.engine
        .emit(&ctx, event_type, serde_json::json!({ "n": n }), Vec::new())
        .await
        .unwrap()
        .envelope
}

/// What the default events pipe does with one event row: its raw image in
/// DynamoDB JSON, group = tenant, dedup id = event id.
pub async fn pipe(env: &Env, e: &Envelope) {
    pipe_to(&env.store, &env.queues, e).await
}

pub async fn pipe_to(store: &EmbeddedStore, queues: &Queues, e: &Envelope) {
    let row = store
        .get_item(GetItemInput {
            table_name: EVENTS.into(),
            key: layout::key(layout::event_pk(&e.tenant), &layout::seq_sk(e.seq)),
            ..Default::default()
        })
        .await
        .unwrap()
        .item
        .unwrap();
    let body = item_to_json(&row).to_string();
    queues
        .send(QUEUE, NewMessage::new(body).group(&e.tenant).dedup(&e.id))
        .await
        .unwrap();
}

/// A handler write recording one effect: a Put of `pk = <key>` that must
/// not exist yet, so a duplicate effect fails loudly instead of hiding.
pub fn effect(key: &str) -> postbox_engine::Write {
    postbox_engine::Write::put(
        EFFECTS,
        Item::from([("pk".to_owned(), AttributeValue::s(key))]),
    )
    .condition("attribute_not_exists(pk)")
}

/// Whether effect `key` was written.
pub async fn has_effect(store: &EmbeddedStore, key: &str) -> bool {
    store
        .get_item(GetItemInput {
            table_name: EFFECTS.into(),
            key: Item::from([("pk".to_owned(), AttributeValue::s(key))]),
            ..Default::default()
        })
        .await
        .unwrap()
        .item
        .is_some()
}

/// Runs batches until the queue is empty (nothing visible or in flight) or
/// `rounds` batches ran.
pub async fn drain(w: &Worker<EmbeddedStore>, queues: &Queues, rounds: usize) {
    for _ in 0..rounds {
        let stats = queues.stats(QUEUE).unwrap();
        if stats.visible == 0 && stats.in_flight == 0 && stats.delayed == 0 {
            return;
        }
        w.run_once().await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
