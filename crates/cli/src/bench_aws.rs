//! `postbox bench --backend aws`: the pipeline on DynamoDB, DynamoDB
//! Streams and SQS, measured through the AWS SDK as a node runs it: emits
//! (each with one extra write) from concurrent emitters on one tenant and
//! on 100 tenants, with the transactions retried after a conflict; then
//! the backlog relayed from the stream into the events queue and completed
//! by the workers, in completions/s. (What an event costs in write units
//! is measured by `crates/aws/tests/cost.rs`, from the items' sizes: the
//! local service does not report it as AWS bills it.)
//!
//! It runs on a stack `postbox init --backend aws` made (give the bench a
//! prefix of its own) and creates nothing itself; its tenants are named
//! after the run, so earlier runs' events do not count.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use postbox_aws::{DynamoStore, SqsQueues, Streams, StreamsRelay, StreamsRelayOptions};
use postbox_engine::{Catalog, Context, Engine, Write};
use postbox_item::{AttributeValue, Item};
use postbox_relay::RelayConfig;
use postbox_relay::config::default_events_pipe;
use postbox_store::api::CreateTableInput;
use postbox_store::{ItemStore, StoreError};
use postbox_topology::Topology;
use postbox_worker::{Worker, WorkerOptions, handler};

use crate::http::{EXIT_REFUSED, Failure};

const CATALOG: &str = r#"
[[event_types]]
name = "ORDER_PLACED"
producers = ["bench"]
[[producers]]
name = "bench"
emits = ["ORDER_PLACED"]
[[subscriptions]]
name = "bench"
glob = "ORDER_*"
lane = "DURABLE"
handler = "bench::count"
"#;

/// The application table the emits write to (created if missing: it is
/// the bench's own, not Postbox's).
const ORDERS: &str = "bench_orders";

/// What `bench --backend aws` runs.
pub struct AwsBench {
    /// The stack's prefix.
    pub prefix: String,
    /// Events per emit scenario.
    pub events: u64,
    /// Filler bytes in each payload and extra write.
    pub payload_bytes: u32,
    /// Concurrent emitters.
    pub emitters: usize,
    /// Worker loops.
    pub workers: usize,
    /// Print JSON.
    pub json: bool,
}

struct Scenario {
    name: String,
    events: u64,
    secs: f64,
    /// Transactions retried after a TransactionConflict.
    conflicts: u64,
    /// Write capacity units DynamoDB reported for the scenario's writes
    /// (ReturnConsumedCapacity): an account's bill. DynamoDB Local's
    /// figures follow rules of their own (2 per transaction of one table).
    wru: f64,
}

impl Scenario {
    fn wru_per_event(&self) -> f64 {
        if self.events == 0 {
            0.0
        } else {
            self.wru / self.events as f64
        }
    }
}

pub async fn run(bench: AwsBench) -> Result<(), Failure> {
    let sdk = crate::backend::aws_config().await?;
    let store = DynamoStore::new(&sdk, &bench.prefix);
    let queues = SqsQueues::new(&sdk, &bench.prefix);
    let topology = Topology::default();
    match store.describe_table(&topology.events_table).await {
        Ok(_) => {}
        Err(StoreError::ResourceNotFound(_)) => {
            return Err(Failure::new(
                EXIT_REFUSED,
                format!(
                    "no events table under prefix {:?}; run `postbox init --backend aws --aws-prefix {}` first",
                    bench.prefix, bench.prefix
                ),
            ));
        }
        Err(e) => return Err(Failure::new(crate::http::EXIT_UNREACHABLE, e.to_string())),
    }
    match store
        .create_table(CreateTableInput::keyed_by(ORDERS, "pk"))
        .await
    {
        Ok(_) | Err(StoreError::ResourceInUse(_)) => {}
        Err(e) => return Err(Failure::from(format!("table {ORDERS}: {e}"))),
    }
    let catalog = Catalog::from_toml(CATALOG, "bench").expect("the bench catalog parses");
    let store = Arc::new(store);
    let engine = Arc::new(
        Engine::builder(store.clone(), catalog.clone())
            .build()
            .await
            .map_err(|e| Failure::from(e.to_string()))?,
    );
    let run = format!(
        "b{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    let filler = "x".repeat(bench.payload_bytes as usize);
    let mut rows = Vec::new();
    for tenants in [1usize, 100] {
        let before = store.stats();
        let started = Instant::now();
        emit_all(
            &engine,
            &run,
            tenants,
            bench.events,
            bench.emitters,
            &filler,
        )
        .await?;
        let after = store.stats();
        rows.push(Scenario {
            name: format!("emit, {tenants} tenant(s), {} emitters", bench.emitters),
            events: bench.events,
            secs: started.elapsed().as_secs_f64(),
            conflicts: after.conflict_retries - before.conflict_retries,
            wru: after.write_capacity_units - before.write_capacity_units,
        });
    }

    // Deliver the backlog: relay from the stream, complete with a handler
    // that counts this run's events.
    let total = bench.events * 2;
    let counted = Arc::new(AtomicU64::new(0));
    let seen = counted.clone();
    let mine = format!("{run}-");
    let handlers = HashMap::from([(
        "bench::count".to_owned(),
        handler(move |d: postbox_worker::Delivery| {
            if d.envelope.tenant.starts_with(&mine) {
                seen.fetch_add(1, Ordering::Relaxed);
            }
            async move { Ok(Vec::new()) }
        }),
    )]);
    let started = Instant::now();
    let before = store.stats();
    let mut config = RelayConfig::from_toml("").expect("an empty config parses");
    config.pipes.push(default_events_pipe(
        &topology.events_table,
        &topology.events_queue,
    ));
    let relay = StreamsRelay::start(
        (*store).clone(),
        Streams::new(&sdk),
        queues.clone(),
        config,
        StreamsRelayOptions {
            poll: Duration::from_millis(50),
            ..StreamsRelayOptions::default()
        },
    )
    .await
    .map_err(|e| Failure::new(EXIT_REFUSED, e.to_string()))?;
    let worker = Worker::new(
        store.clone(),
        queues,
        &catalog,
        handlers,
        WorkerOptions::default(),
    )
    .await
    .map_err(|e| Failure::from(format!("the workers refuse to start: {e}")))?;
    let (stop, rx) = tokio::sync::watch::channel(false);
    let tasks: Vec<_> = (0..bench.workers.max(1))
        .map(|_| {
            let (w, rx) = (worker.clone(), rx.clone());
            tokio::spawn(async move { w.run(rx).await })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(600);
    while counted.load(Ordering::Relaxed) < total && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let _ = stop.send(true);
    for t in tasks {
        let _ = t.await;
    }
    relay.shutdown().await;
    let done = counted.load(Ordering::Relaxed);
    let after = store.stats();
    rows.push(Scenario {
        name: format!(
            "relay + deliver the backlog, {} worker loop(s)",
            bench.workers.max(1)
        ),
        events: done,
        secs,
        conflicts: after.conflict_retries - before.conflict_retries,
        wru: after.write_capacity_units - before.write_capacity_units,
    });
    print(&rows, bench.json);
    if done < total {
        return Err(Failure::from(format!(
            "only {done} of {total} events completed within 600 s"
        )));
    }
    Ok(())
}

/// Emits `n` events from `emitters` tasks over `tenants` of this run.
async fn emit_all(
    engine: &Arc<Engine<DynamoStore>>,
    run: &str,
    tenants: usize,
    n: u64,
    emitters: usize,
    filler: &str,
) -> Result<(), Failure> {
    let next = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..emitters.max(1))
        .map(|i| {
            let (engine, next) = (engine.clone(), next.clone());
            let tenant = format!("{run}-t{}", i % tenants);
            let filler = filler.to_owned();
            tokio::spawn(async move {
                let ctx = Context::new(&tenant, "bench").expect("valid context");
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= n {
                        return Ok::<(), String>(());
                    }
                    let mut item = Item::new();
                    item.insert(
                        "pk".into(),
                        AttributeValue::s(format!("{tenant}#order#{k}")),
                    );
                    item.insert("note".into(), AttributeValue::s(&filler));
                    let payload = serde_json::json!({"order_id": k.to_string(), "note": filler});
                    engine
                        .emit(
                            &ctx,
                            "ORDER_PLACED",
                            payload,
                            vec![Write::put(ORDERS, item)],
                        )
                        .await
                        .map_err(|e| e.to_string())?;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await
            .map_err(|e| Failure::from(e.to_string()))?
            .map_err(|e| Failure::from(format!("an emit failed: {e}")))?;
    }
    Ok(())
}

fn print(rows: &[Scenario], json: bool) {
    if json {
        let out: Vec<_> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "scenario": r.name,
                    "events": r.events,
                    "seconds": r.secs,
                    "per_second": r.events as f64 / r.secs,
                    "conflict_retries": r.conflicts,
                    "wru_per_event": r.wru_per_event(),
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(out));
        return;
    }
    println!(
        "{:<52} {:>8} {:>10} {:>10} {:>10}",
        "scenario (AWS SDK)", "events", "per s", "conflicts", "WRU/event"
    );
    for r in rows {
        println!(
            "{:<52} {:>8} {:>10.0} {:>10} {:>10.2}",
            r.name,
            r.events,
            r.events as f64 / r.secs,
            r.conflicts,
            r.wru_per_event()
        );
    }
    println!(
        "(WRU as DynamoDB reports them with ReturnConsumedCapacity; DynamoDB Local's figures are not AWS's bill, see crates/aws/tests/cost.rs)"
    );
}
