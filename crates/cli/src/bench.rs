//! `postbox bench`: the whole pipeline measured on this machine, in one
//! table — the figures SPEC §12 sets targets for, each next to a baseline
//! measured in the same run. Durable commits (fsync) throughout, on a fresh
//! store in a temporary directory.
//!
//! The crates' own harnesses (`cargo bench -p postbox-store`, `-p
//! postbox-queue`, `-p postbox-engine --bench emit`, `-p postbox-relay`, `-p
//! postbox-worker`) measure each component in more detail; this command
//! measures the assembled product a user runs.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use postbox_engine::{Catalog, Context, Engine, EngineOptions, VerifyOptions, Write};
use postbox_item::{AttributeValue, Item};
use postbox_queue::{Queues, QueuesOptions};
use postbox_relay::RelayConfig;
use postbox_relay::config::{DEFAULT_EVENTS_QUEUE, default_events_pipe};
use postbox_store::ItemStore;
use postbox_store::api::CreateTableInput;
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
use postbox_worker::{Handler, Worker, WorkerOptions};
use serde_json::json;

use crate::http::Failure;

/// `postbox bench`
#[derive(clap::Args)]
pub struct BenchArgs {
    /// Seconds per throughput scenario.
    #[arg(long, default_value_t = 5)]
    secs: u64,
    /// Events per end-to-end delivery run.
    #[arg(long, default_value_t = 20_000)]
    events: usize,
    /// Print the table as JSON.
    #[arg(long)]
    json: bool,
}

struct Row {
    scenario: String,
    value: String,
    target: &'static str,
    baseline: String,
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1000.0
}

const CATALOG: &str = r#"
[[event_types]]
name = "ORDER_PLACED"
producers = ["bench"]
[[producers]]
name = "bench"
emits = ["ORDER_PLACED"]
"#;

fn catalog_with(subscriptions: usize) -> Catalog {
    let mut text = CATALOG.to_owned();
    for i in 0..subscriptions {
        text.push_str(&format!(
            "[[subscriptions]]\nname = \"s{i}\"\nglob = \"ORDER_*\"\nlane = \"DURABLE\"\nhandler = \"h{i}\"\n"
        ));
    }
    Catalog::from_toml(&text, "bench").expect("the bench catalog parses")
}

async fn open(dir: &std::path::Path, name: &str) -> Result<EmbeddedStore, Failure> {
    let store =
        EmbeddedStore::open(dir.join(format!("{name}.redb")), EmbeddedOptions::default())
            .map_err(|e| Failure::from(format!("cannot open a store in {}: {e}", dir.display())))?;
    store
        .create_table(CreateTableInput::keyed_by("orders", "pk"))
        .await
        .map_err(|e| Failure::from(e.to_string()))?;
    Ok(store)
}

fn order(tenant: &str, n: u64, filler: &str) -> (serde_json::Value, Vec<Write>) {
    let payload = json!({"order_id": format!("{n}"), "note": filler});
    let mut item = Item::new();
    item.insert(
        "pk".into(),
        AttributeValue::s(format!("{tenant}#order#{n}")),
    );
    item.insert("note".into(), AttributeValue::s(filler));
    (payload, vec![Write::put("orders", item)])
}

/// Emits from `emitters` tasks over `tenants` for `secs`; events/s and latencies.
async fn emit_load(
    engine: Arc<Engine<EmbeddedStore>>,
    tenants: usize,
    emitters: usize,
    secs: u64,
) -> (f64, Vec<Duration>) {
    let filler = "x".repeat(1000);
    let stop = Instant::now() + Duration::from_secs(secs);
    let started = Instant::now();
    let tasks: Vec<_> = (0..emitters)
        .map(|i| {
            let engine = engine.clone();
            let filler = filler.clone();
            tokio::spawn(async move {
                let tenant = format!("t{}", i % tenants);
                let ctx = Context::new(&tenant, "bench").expect("valid context");
                let mut lat = Vec::new();
                let mut n = (i as u64) << 32;
                while Instant::now() < stop {
                    n += 1;
                    let (payload, writes) = order(&tenant, n, &filler);
                    let t = Instant::now();
                    if engine
                        .emit(&ctx, "ORDER_PLACED", payload, writes)
                        .await
                        .is_ok()
                    {
                        lat.push(t.elapsed());
                    }
                }
                lat
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap_or_default());
    }
    let rate = all.len() as f64 / started.elapsed().as_secs_f64();
    all.sort();
    (rate, all)
}

async fn engine_on(
    store: &EmbeddedStore,
    catalog: Catalog,
    group_commit: bool,
) -> Result<Arc<Engine<EmbeddedStore>>, Failure> {
    Ok(Arc::new(
        Engine::builder(Arc::new(store.clone()), catalog)
            .options(EngineOptions {
                group_commit,
                ..EngineOptions::default()
            })
            .build()
            .await
            .map_err(|e| Failure::from(e.to_string()))?,
    ))
}

/// The pipeline with `subs` durable subscriptions whose handlers stamp the
/// time they ran: completions/s for a backlog of `events`, and emit ->
/// handler latency at `rate` events/s for `secs`.
async fn pipeline(
    dir: &std::path::Path,
    subs: usize,
    events: usize,
    steady: Option<(u64, u64)>,
) -> Result<(f64, Vec<Duration>), Failure> {
    let store = open(dir, &format!("pipeline-{subs}-{}", steady.is_some())).await?;
    let queues = Queues::open(store.clone(), QueuesOptions::default())
        .await
        .map_err(|e| Failure::from(e.to_string()))?;
    crate::node::create_events_queues(&queues).await?;
    let catalog = catalog_with(subs);
    let engine = engine_on(&store, catalog.clone(), true).await?;
    let emitted_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let done: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let mut handlers: HashMap<String, Handler> = HashMap::new();
    for i in 0..subs {
        let emitted_at = emitted_at.clone();
        let done = done.clone();
        handlers.insert(
            format!("h{i}"),
            postbox_worker::handler(move |d| {
                let since = emitted_at
                    .lock()
                    .expect("emit times")
                    .get(&d.envelope.id)
                    .map(|t| t.elapsed());
                done.lock()
                    .expect("completions")
                    .push(since.unwrap_or_default());
                async move { Ok(Vec::new()) }
            }),
        );
    }
    let mut relay_config = RelayConfig::from_toml("").map_err(|e| Failure::from(e.to_string()))?;
    relay_config.pipes.push(default_events_pipe(
        crate::node::EVENTS_TABLE,
        DEFAULT_EVENTS_QUEUE,
    ));
    let relay = crate::pipe::start_relay(store.clone(), queues.clone(), relay_config).await?;
    let worker = Worker::new(
        Arc::new(store.clone()),
        queues.clone(),
        &catalog,
        handlers,
        WorkerOptions::default(),
    )
    .await
    .map_err(|e| Failure::from(e.to_string()))?;
    let (stop, rx) = tokio::sync::watch::channel(false);
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let w = worker.clone();
            let rx = rx.clone();
            tokio::spawn(async move { w.run(rx).await })
        })
        .collect();
    let filler = "x".repeat(1000);
    let total;
    let started;
    match steady {
        None => {
            // A backlog emitted first, then timed from the first completion on.
            let ctx_of = |t: usize| Context::new(format!("t{t}"), "bench").expect("valid context");
            let chunks: Vec<_> = (0..64)
                .map(|i| {
                    let engine = engine.clone();
                    let filler = filler.clone();
                    let ctx = ctx_of(i % 100);
                    tokio::spawn(async move {
                        for n in (i..events).step_by(64) {
                            let (p, w) = order(ctx.tenant(), n as u64, &filler);
                            let _ = engine.emit(&ctx, "ORDER_PLACED", p, w).await;
                        }
                    })
                })
                .collect();
            started = Instant::now();
            for c in chunks {
                let _ = c.await;
            }
            total = events * subs;
        }
        Some((rate, secs)) => {
            let n = (rate * secs) as usize;
            let interval = Duration::from_secs_f64(1.0 / rate as f64);
            started = Instant::now();
            let mut next = Instant::now();
            let mut pending = Vec::new();
            for i in 0..n {
                next += interval;
                tokio::time::sleep_until(next.into()).await;
                let engine = engine.clone();
                let emitted_at = emitted_at.clone();
                let (p, w) = order(&format!("t{}", i % 100), i as u64, &filler);
                pending.push(tokio::spawn(async move {
                    let ctx =
                        Context::new(format!("t{}", i % 100), "bench").expect("valid context");
                    let t = Instant::now();
                    // The id is known only after commit: stamp with the start time.
                    if let Ok(e) = engine.emit(&ctx, "ORDER_PLACED", p, w).await {
                        emitted_at
                            .lock()
                            .expect("emit times")
                            .insert(e.envelope.id, t);
                    }
                }));
            }
            for p in pending {
                let _ = p.await;
            }
            total = n * subs;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    while done.lock().expect("completions").len() < total && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed();
    let _ = stop.send(true);
    for t in tasks {
        let _ = t.await;
    }
    relay.shutdown().await;
    let mut lat = std::mem::take(&mut *done.lock().expect("completions"));
    let completed = lat.len();
    lat.retain(|d| !d.is_zero());
    lat.sort();
    Ok((completed as f64 / elapsed.as_secs_f64(), lat))
}

pub async fn run(args: BenchArgs) -> Result<(), Failure> {
    let dir =
        tempfile::tempdir().map_err(|e| Failure::from(format!("no temporary directory: {e}")))?;
    let say = |what: &str| eprintln!("bench: {what} ...");
    let mut rows = Vec::new();

    say("emit, one tenant, 64 emitters (and the one-transaction-per-emit baseline)");
    let store = open(dir.path(), "emit1").await?;
    let (one, lat1) = emit_load(
        engine_on(&store, Catalog::from_toml(CATALOG, "bench").unwrap(), true).await?,
        1,
        64,
        args.secs,
    )
    .await;
    let base_store = open(dir.path(), "emit1-base").await?;
    let (base1, _) = emit_load(
        engine_on(
            &base_store,
            Catalog::from_toml(CATALOG, "bench").unwrap(),
            false,
        )
        .await?,
        1,
        64,
        args.secs,
    )
    .await;
    rows.push(Row {
        scenario: "emit, 1 tenant, 64 emitters, 1 KB + 1 write".into(),
        value: format!(
            "{one:.0} events/s (p50 {:.2} ms, p99 {:.2} ms)",
            pct(&lat1, 0.5),
            pct(&lat1, 0.99)
        ),
        target: ">= 50,000 events/s",
        baseline: format!("{base1:.0} events/s, one transaction per emit"),
    });

    say("emit, 100 tenants, 200 emitters");
    let store100 = open(dir.path(), "emit100").await?;
    let (many, lat100) = emit_load(
        engine_on(
            &store100,
            Catalog::from_toml(CATALOG, "bench").unwrap(),
            true,
        )
        .await?,
        100,
        200,
        args.secs,
    )
    .await;
    let base_store100 = open(dir.path(), "emit100-base").await?;
    let (base100, _) = emit_load(
        engine_on(
            &base_store100,
            Catalog::from_toml(CATALOG, "bench").unwrap(),
            false,
        )
        .await?,
        100,
        200,
        args.secs,
    )
    .await;
    rows.push(Row {
        scenario: "emit, 100 tenants, 200 emitters, 1 KB + 1 write".into(),
        value: format!(
            "{many:.0} events/s (p50 {:.2} ms, p99 {:.2} ms)",
            pct(&lat100, 0.5),
            pct(&lat100, 0.99)
        ),
        target: ">= 80,000 events/s",
        baseline: format!("{base100:.0} events/s, one transaction per emit"),
    });

    say("verify, the one-tenant log from genesis");
    let started = Instant::now();
    let reports = postbox_engine::verify::verify_all(
        &Arc::new(store.clone()),
        crate::node::EVENTS_TABLE,
        &VerifyOptions {
            full: true,
            update_checkpoint: false,
            ..VerifyOptions::default()
        },
        &mut |_| {},
    )
    .await
    .map_err(|e| Failure::from(e.to_string()))?;
    let checked: u64 = reports.iter().map(|r| r.checked).sum();
    let verify_rate = checked as f64 / started.elapsed().as_secs_f64();
    rows.push(Row {
        scenario: format!("verify, {checked} events"),
        value: format!("{verify_rate:.0} events/s"),
        target: ">= 1,000,000 events/s",
        baseline: "-".into(),
    });

    for subs in [1, 4] {
        say(&format!(
            "delivery, {} events to {subs} subscription(s)",
            args.events
        ));
        let (rate, _) = pipeline(dir.path(), subs, args.events, None).await?;
        rows.push(Row {
            scenario: format!(
                "emit -> relay -> worker, {subs} subscription(s), 8 workers x 8 batches"
            ),
            value: format!("{rate:.0} completions/s"),
            target: ">= 20,000 completions/s",
            baseline: "-".into(),
        });
    }
    say("latency, 5,000 events/s");
    let (_, lat) = pipeline(dir.path(), 1, 0, Some((5000, args.secs))).await?;
    rows.push(Row {
        scenario: "emit -> handler latency at 5,000 events/s".into(),
        value: format!(
            "p50 {:.2} ms, p99 {:.2} ms ({} samples)",
            pct(&lat, 0.5),
            pct(&lat, 0.99),
            lat.len()
        ),
        target: "p50 < 2 ms, p99 < 20 ms",
        baseline: "-".into(),
    });

    if args.json {
        let v: Vec<BTreeMap<&str, String>> = rows
            .iter()
            .map(|r| {
                BTreeMap::from([
                    ("scenario", r.scenario.clone()),
                    ("result", r.value.clone()),
                    ("target", r.target.to_owned()),
                    ("baseline", r.baseline.clone()),
                ])
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        println!(
            "postbox bench: durable (fsync) commits, {} s per throughput scenario, {} CPU(s)",
            args.secs,
            std::thread::available_parallelism().map_or(1, |n| n.get())
        );
        println!(
            "{:<56} {:<48} {:<24} baseline (same run)",
            "scenario", "result", "target"
        );
        for r in &rows {
            println!(
                "{:<56} {:<48} {:<24} {}",
                r.scenario, r.value, r.target, r.baseline
            );
        }
    }
    Ok(())
}
