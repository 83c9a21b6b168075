//! Durable handler completions per second on the embedded store, durable
//! commits (fsync) on.
//!
//!     cargo bench -p postbox-worker --bench worker
//!
//! Each scenario fills the events FIFO queue the way the default events
//! pipe does (raw NewImage, group = tenant, dedup id = event id) with
//! `POSTBOX_BENCH_EVENTS` events (default 20,000) over 50 tenants, then
//! times workers draining it: every (event, subscription) is claimed, its
//! handler returns one Put, and the completion commits with that Put. The
//! baseline, measured in the same run, is one worker task.
//!
//! Target (SPEC §12): >= 20,000 handler completions/s. Emit-to-completion
//! latency at a steady rate is not measured here yet.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use postbox_engine::catalog::Catalog;
use postbox_engine::{Context, Engine, Write, layout};
use postbox_item::{AttributeValue, Item, item_to_json};
use postbox_queue::{NewMessage, Queues, QueuesOptions};
use postbox_store::ItemStore;
use postbox_store::api::*;
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
use postbox_worker::{Handler, Worker, WorkerOptions, handler};

const QUEUE: &str = "postbox-events.fifo";
const TENANTS: usize = 50;
/// Longest a scenario may take before it is reported as not drained.
const DEADLINE: Duration = Duration::from_secs(60);

fn catalog(subs: usize) -> Catalog {
    let mut text =
        "[[event_types]]\nname = \"ORDER_PLACED\"\nproducers = [\"orders\"]\n".to_owned();
    for i in 0..subs {
        text.push_str(&format!(
            "[[subscriptions]]\nname = \"s{i}\"\nglob = \"ORDER_*\"\nlane = \"DURABLE\"\nhandler = \"h::s{i}\"\n"
        ));
    }
    Catalog::from_toml(&text, "bench").unwrap()
}

async fn effects_table(store: &EmbeddedStore) {
    store
        .create_table(CreateTableInput {
            table_name: "effects".into(),
            key_schema: vec![KeySchemaElement {
                attribute_name: "pk".into(),
                key_type: KeyType::Hash,
            }],
            attribute_definitions: vec![AttributeDefinition {
                attribute_name: "pk".into(),
                attribute_type: ScalarType::S,
            }],
            billing_mode: Some("PAY_PER_REQUEST".into()),
            provisioned_throughput: None,
            stream_specification: None,
        })
        .await
        .unwrap();
}

/// Emits `events` events over the tenants and sends them to the queue.
async fn fill(store: &Arc<EmbeddedStore>, queues: &Queues, catalog: Catalog, events: usize) {
    let engine = Engine::builder(store.clone(), catalog)
        .build()
        .await
        .unwrap();
    let per_tenant = events / TENANTS;
    let mut tasks = Vec::new();
    for t in 0..TENANTS {
        let (engine, store, queues) = (engine.clone(), store.clone(), queues.clone());
        tasks.push(tokio::spawn(async move {
            let tenant = format!("t{t:02}");
            let ctx = Context::new(&tenant, "bench").unwrap();
            for n in 0..per_tenant {
                engine
                    .emit(
                        &ctx,
                        "ORDER_PLACED",
                        serde_json::json!({"n": n}),
                        Vec::new(),
                    )
                    .await
                    .unwrap();
            }
            let mut start = None;
            loop {
                let page = store
                    .query(QueryInput {
                        table_name: "postbox_events".into(),
                        key_condition_expression: Some("pk = :pk".into()),
                        expression_attribute_values: Some(Values::from([(
                            ":pk".to_owned(),
                            AttributeValue::S(layout::event_pk(&tenant)),
                        )])),
                        exclusive_start_key: start,
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                let items = page.items.unwrap_or_default();
                for chunk in items.chunks(10) {
                    let batch = chunk
                        .iter()
                        .map(|row| {
                            let id = row["id"].as_s().unwrap().to_owned();
                            NewMessage::new(item_to_json(row).to_string())
                                .group(&tenant)
                                .dedup(id)
                        })
                        .collect();
                    for r in queues.send_batch(QUEUE, batch).await.unwrap() {
                        r.unwrap();
                    }
                }
                start = page.last_evaluated_key;
                if start.is_none() {
                    break;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// Returns (completions, elapsed).
async fn scenario(subs: usize, tasks: usize, events: usize) -> (u64, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let store =
        EmbeddedStore::open(dir.path().join("bench.redb"), EmbeddedOptions::default()).unwrap();
    let queues = Queues::open(store.clone(), QueuesOptions::default())
        .await
        .unwrap();
    let attrs = [("FifoQueue".to_owned(), "true".to_owned())]
        .into_iter()
        .collect();
    queues.create_queue(QUEUE, attrs).await.unwrap();
    let store = Arc::new(store);
    effects_table(&store).await;
    fill(&store, &queues, catalog(subs), events).await;

    let mut handlers: HashMap<String, Handler> = HashMap::new();
    for i in 0..subs {
        handlers.insert(
            format!("h::s{i}"),
            handler(|d| async move {
                let item = Item::from([("pk".to_owned(), AttributeValue::S(d.idempotency_key))]);
                Ok(vec![Write::put("effects", item)])
            }),
        );
    }
    let options = WorkerOptions {
        wait_seconds: 0,
        lease: Duration::from_secs(3),
        ..WorkerOptions::default()
    };
    let w = Worker::new(
        store.clone(),
        queues.clone(),
        &catalog(subs),
        handlers,
        options,
    )
    .await
    .unwrap();
    let total = (events / TENANTS * TENANTS) as u64;
    let start = Instant::now();
    let mut running = Vec::new();
    for _ in 0..tasks {
        let (w, queues) = (w.clone(), queues.clone());
        running.push(tokio::spawn(async move {
            loop {
                let report = w.run_once().await.unwrap();
                if report.received == 0 {
                    // A short poll that finds nothing returns without awaiting:
                    // without a yield, idle tasks hold every runtime thread and
                    // starve the tasks holding messages until their visibility
                    // expires, which then looks like a double delivery.
                    tokio::task::yield_now().await;
                    let s = queues.stats(QUEUE).unwrap();
                    if s.visible == 0 && s.in_flight == 0 {
                        return;
                    }
                    // Messages stuck in flight past their visibility were
                    // seen with 8 tasks: stop instead of hanging, and say so.
                    if start.elapsed() > DEADLINE {
                        return;
                    }
                }
            }
        }));
    }
    for r in running {
        r.await.unwrap();
    }
    let elapsed = start.elapsed();
    let stats = w.stats();
    if stats.deleted != total {
        println!(
            "  NOT DRAINED after {:.0} s: {} of {total} messages settled; queue {:?}",
            DEADLINE.as_secs_f64(),
            stats.deleted,
            queues.stats(QUEUE).unwrap()
        );
    }
    if stats.settle_failures > 0 {
        println!(
            "  note: {} deletes/visibility changes refused by the queue (messages redelivered): {stats:?}",
            stats.settle_failures
        );
    }
    (stats.completed, elapsed)
}

fn main() {
    let events: usize = std::env::var("POSTBOX_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!("durable worker, embedded store, fsync on, {events} events over {TENANTS} tenants");
    for (subs, tasks, label) in [
        (1, 1, "baseline: 1 subscription, 1 worker task"),
        (1, 8, "1 subscription, 8 worker tasks"),
        (4, 8, "4 subscriptions, 8 worker tasks"),
    ] {
        let (completions, elapsed) = rt.block_on(scenario(subs, tasks, events));
        println!(
            "{label:<44} {:>10.0} completions/s   ({completions} completions, {:.1} s)",
            completions as f64 / elapsed.as_secs_f64(),
            elapsed.as_secs_f64()
        );
    }
}
