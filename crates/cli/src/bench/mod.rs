//! `postbox bench`: the whole pipeline measured on this machine, in one
//! table — the figures the README quotes, each next to a baseline
//! measured in the same run. Durable commits (fsync) throughout, on a fresh
//! store in a temporary directory. Every event carries `--payload-bytes` of
//! filler (1 KB by default) and one extra write of the same size.
//!
//! - emit: 64 emitters on one tenant, and 200 over 100 tenants, each beside
//!   one transaction per emit;
//! - verify: the one-tenant log from genesis;
//! - delivery: a backlog is emitted and relayed into the events queue, then
//!   the workers (as many loops as `postbox serve` runs) drain it; the
//!   result is completions/s over the drain, and the baseline column gives
//!   the same completions over the whole time, emit and relay included;
//! - latency: from the emit call to the completion's commit at a steady
//!   5,000 events/s, the workers running throughout.
//!
//! `--only` runs some of them. `--http` measures keyed emits over HTTP
//! against a `postbox serve` process instead (`bench::http`), and
//! `--backend aws` the pipeline on DynamoDB, Streams and SQS (`bench_aws`). The crates' own harnesses (`cargo bench -p
//! postbox-store`, `-p postbox-queue`, `-p postbox-engine --bench emit`, `-p
//! postbox-relay`, `-p postbox-worker`) measure each component in more
//! detail, with `{"n": n}` payloads; this command measures the assembled
//! product a user runs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use postbox_engine::{Catalog, Context, Engine, EngineOptions, VerifyOptions, Write};
use postbox_item::{AttributeValue, Item};
use postbox_store::ItemStore;
use postbox_store::api::CreateTableInput;
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
use serde_json::json;

use crate::http::Failure;
use postbox_node::{Handlers, Node, NodeOptions};

mod emit;
mod http;

use emit::{EmitLoad, order};

/// `postbox bench`
#[derive(clap::Args)]
pub struct BenchArgs {
    /// Seconds per emit scenario and of the steady latency load (at most 600).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=600))]
    secs: u64,
    /// Events per end-to-end delivery run.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    events: u64,
    /// Bytes of filler in each event's payload and in its extra write (at
    /// most 300,000: an event's row must stay under the 400 KB item limit).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(0..=300_000))]
    payload_bytes: u32,
    /// Run only these scenarios (repeatable; default: all).
    #[arg(long, value_enum)]
    only: Vec<Scenario>,
    /// Print the table as JSON.
    #[arg(long)]
    json: bool,
    /// Exit 1 when a result misses its target (each miss is named on
    /// stderr); with --http the targets are p99 under 20 ms and the last
    /// 10 s of each run within 10% of its first 10 s (runs shorter than
    /// 20 s: the last tenth against the first).
    #[arg(long)]
    check: bool,
    /// Measure keyed emits over HTTP against a `postbox serve` process
    /// instead (started by the bench unless --endpoint names one).
    #[arg(long)]
    http: bool,
    /// With --http: a running server (serving the built-in examples) to
    /// drive instead of starting one.
    #[arg(long, requires = "http")]
    endpoint: Option<String>,
    /// With --http --endpoint: its admin token (default: `<data>/admin-token`).
    #[arg(
        long,
        requires = "endpoint",
        env = "POSTBOX_TOKEN",
        hide_env_values = true
    )]
    token: Option<String>,
    /// With --http --endpoint: the server's data directory, for its admin token.
    #[arg(long, requires = "endpoint")]
    data: Option<std::path::PathBuf>,
    /// With --http: concurrent connections, each with one request in flight.
    #[arg(long, default_value_t = 64, requires = "http", value_parser = clap::value_parser!(u64).range(1..=4096))]
    connections: u64,
    /// With --http: the tenant counts to run, in order (repeatable).
    #[arg(long = "tenants", requires = "http", value_parser = clap::value_parser!(u64).range(1..=10_000))]
    tenants: Vec<u64>,
    /// With --http: how many times to run the tenant counts, alternating.
    #[arg(long, default_value_t = 1, requires = "http", value_parser = clap::value_parser!(u64).range(1..=100))]
    runs: u64,
    /// `--backend aws`: measure on DynamoDB, DynamoDB Streams and SQS
    /// through the AWS SDK (a stack `postbox init --backend aws` made),
    /// `--events` per emit scenario.
    #[command(flatten)]
    backend: crate::backend::BackendArgs,
}

/// The scenarios `postbox bench` runs, in its table's order.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// Emit throughput, one tenant and 100 tenants, each beside one
    /// transaction per emit.
    Emit,
    /// Recomputing a log's hash chain from genesis (runs the one-tenant
    /// emit first, to have a log).
    Verify,
    /// Handler completions/s for 1 and 4 subscriptions.
    Delivery,
    /// Emit -> handler latency at a steady 5,000 events/s.
    Latency,
}

struct Row {
    scenario: String,
    value: String,
    target: &'static str,
    baseline: String,
    /// The row's numbers, for `--json` (the text columns round them).
    figures: Vec<(&'static str, f64)>,
    /// The target as bounds on `figures`, for `--check`.
    bounds: Vec<(&'static str, Bound)>,
}

/// A bound a figure of a row must keep.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Bound {
    AtLeast(f64),
    Below(f64),
}

impl Bound {
    /// Why `value` misses the bound, or None.
    pub(crate) fn missed(self, figure: &str, value: f64) -> Option<String> {
        match self {
            Bound::AtLeast(min) if value < min => {
                Some(format!("{figure} {value:.2} is below {min}"))
            }
            Bound::Below(max) if value >= max => {
                Some(format!("{figure} {value:.2} is not below {max}"))
            }
            _ => None,
        }
    }
}

impl Row {
    /// The bounds this row misses, named.
    fn missed(&self) -> Vec<String> {
        self.bounds
            .iter()
            .filter_map(|(figure, bound)| {
                let value = self.figures.iter().find(|(k, _)| k == figure)?.1;
                bound.missed(figure, value)
            })
            .map(|why| format!("{}: {why}", self.scenario))
            .collect()
    }
}

/// The `p` quantile of `sorted`, in milliseconds.
pub(crate) fn pct(sorted: &[Duration], p: f64) -> f64 {
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
    create_orders_table(&store).await?;
    Ok(store)
}

/// The table each event's extra write goes to.
async fn create_orders_table(store: &EmbeddedStore) -> Result<(), Failure> {
    store
        .create_table(CreateTableInput::keyed_by("orders", "pk"))
        .await
        .map(|_| ())
        .map_err(|e| Failure::from(e.to_string()))
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

/// The load a pipeline run carries.
#[derive(Clone, Copy)]
enum Load {
    /// `events` emitted and relayed into the events queue first; then the
    /// workers start and drain it.
    Backlog(usize),
    /// `rate` events/s for `secs`, the workers running throughout.
    Steady { rate: u64, secs: u64 },
}

/// What a pipeline run measured.
struct Delivered {
    /// Completions/s while the workers drained the relayed backlog (Backlog).
    drain: f64,
    /// Completions/s from the first emit to the last completion.
    end_to_end: f64,
    /// Emit call -> completion commit latencies, sorted (Steady).
    latencies: Vec<Duration>,
}

/// Waits until `progress()` reaches `target`, looking every `every`; fails,
/// naming `what` and how far it got, after a minute without progress.
async fn until<F, Fut>(
    what: &str,
    target: usize,
    every: Duration,
    mut progress: F,
) -> Result<(), Failure>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<usize, Failure>>,
{
    const STALL: Duration = Duration::from_secs(60);
    let (mut last, mut moved) = (0, Instant::now());
    loop {
        let now = progress().await?;
        if now >= target {
            return Ok(());
        }
        if now != last {
            (last, moved) = (now, Instant::now());
        } else if moved.elapsed() > STALL {
            return Err(Failure::from(format!(
                "the bench's pipeline stalled: {what}: {now} of {target} after {} s without progress",
                STALL.as_secs()
            )));
        }
        tokio::time::sleep(every).await;
    }
}

/// The node `postbox serve` runs (`postbox_node::Node`: engine, relay with the
/// default events pipe, durable workers, API), with `subs` subscriptions.
/// A completion is counted, and timed from its emit, when it commits
/// (`WorkerOptions::on_completed`), so a redelivered event counts once.
async fn pipeline(
    dir: &std::path::Path,
    subs: usize,
    load: Load,
    filler: &str,
) -> Result<Delivered, Failure> {
    let steady = matches!(load, Load::Steady { .. });
    // When each event's emit was called, by its order number (known before
    // the emit, so a completion that commits before the emit returns still
    // finds it).
    let emitted_at: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let completed = Arc::new(AtomicUsize::new(0));
    let latencies: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let on_completed: postbox_worker::CompletionHook = {
        let (emitted_at, completed, latencies) =
            (emitted_at.clone(), completed.clone(), latencies.clone());
        Arc::new(move |e: &postbox_engine::Envelope, _: &str| {
            completed.fetch_add(1, Ordering::Relaxed);
            let order = e.payload["order_id"]
                .as_str()
                .and_then(|n| n.parse::<u64>().ok());
            let at = order.and_then(|n| emitted_at.lock().expect("emit times").get(&n).copied());
            if let Some(at) = at {
                latencies.lock().expect("latencies").push(at.elapsed());
            }
        })
    };
    let mut handlers = Handlers::none();
    handlers.durable = (0..subs)
        .map(|i| {
            let h = postbox_worker::handler(|_| async { Ok(Vec::new()) });
            (format!("h{i}"), h)
        })
        .collect();
    handlers.setup = Some(Box::new(|store: EmbeddedStore, _| {
        Box::pin(async move { create_orders_table(&store).await.map_err(|f| f.message) })
    }));
    // No worker loops yet: a backlog is relayed before they start.
    let dir = dir.join(format!("pipeline-{subs}-{steady}"));
    let mut node = Node::start(NodeOptions {
        workers: 0,
        on_completed: Some(on_completed),
        ..NodeOptions::new(dir, catalog_with(subs), handlers)
    })
    .await?;
    let engine = node.engine.clone();
    let completions = || {
        let n = completed.load(Ordering::Relaxed);
        async move { Ok(n) }
    };
    let every = Duration::from_millis(2);
    let started = Instant::now();
    let mut delivered = Delivered {
        drain: 0.0,
        end_to_end: 0.0,
        latencies: Vec::new(),
    };
    match load {
        Load::Backlog(events) => {
            let emitters: Vec<_> = (0..64)
                .map(|i| {
                    let engine = engine.clone();
                    let filler = filler.to_owned();
                    tokio::spawn(async move {
                        for n in (i..events).step_by(64) {
                            let ctx = Context::new(format!("t{}", n % 100), "bench")
                                .expect("valid context");
                            let (p, w) = order(ctx.tenant(), n as u64, &filler);
                            engine.emit(&ctx, "ORDER_PLACED", p, w).await?;
                        }
                        Ok::<_, postbox_engine::EmitError>(())
                    })
                })
                .collect();
            for e in emitters {
                e.await
                    .map_err(|e| Failure::from(e.to_string()))?
                    .map_err(|e| Failure::from(format!("an emit of the backlog failed: {e}")))?;
            }
            // The relay's own counters: cheap to read, unlike a count of the
            // queue's messages.
            let relayed = || async { Ok(node.relayed().await? as usize) };
            until(
                "relaying the backlog",
                events,
                Duration::from_millis(20),
                relayed,
            )
            .await?;
            let filled = started.elapsed();
            let total = events * subs;
            let draining = Instant::now();
            // As many loops as `postbox serve` runs by default.
            node.start_workers(postbox_node::DEFAULT_WORKERS);
            until("draining the backlog", total, every, completions).await?;
            let drained = draining.elapsed();
            delivered.drain = total as f64 / drained.as_secs_f64();
            delivered.end_to_end = total as f64 / (filled + drained).as_secs_f64();
        }
        Load::Steady { rate, secs } => {
            node.start_workers(postbox_node::DEFAULT_WORKERS);
            let n = (rate * secs) as usize;
            let interval = Duration::from_secs_f64(1.0 / rate as f64);
            let mut next = Instant::now();
            let mut pending = Vec::new();
            for i in 0..n {
                next += interval;
                tokio::time::sleep_until(next.into()).await;
                let engine = engine.clone();
                let emitted_at = emitted_at.clone();
                let ctx = Context::new(format!("t{}", i % 100), "bench").expect("valid context");
                let (p, w) = order(ctx.tenant(), i as u64, filler);
                pending.push(tokio::spawn(async move {
                    emitted_at
                        .lock()
                        .expect("emit times")
                        .insert(i as u64, Instant::now());
                    engine.emit(&ctx, "ORDER_PLACED", p, w).await.map(|_| ())
                }));
            }
            for p in pending {
                p.await
                    .map_err(|e| Failure::from(e.to_string()))?
                    .map_err(|e| {
                        Failure::from(format!("an emit at the steady rate failed: {e}"))
                    })?;
            }
            until("completing the steady load", n * subs, every, completions).await?;
            delivered.end_to_end = (n * subs) as f64 / started.elapsed().as_secs_f64();
        }
    }
    node.shutdown().await;
    let mut lat = std::mem::take(&mut *latencies.lock().expect("latencies"));
    lat.sort();
    delivered.latencies = lat;
    Ok(delivered)
}

pub async fn run(args: BenchArgs) -> Result<(), Failure> {
    if args.backend.backend == crate::backend::Backend::Aws && args.check {
        return Err(Failure::new(
            crate::http::EXIT_REFUSED,
            "--check has no targets on --backend aws (they are the embedded store's); leave it out",
        ));
    }
    if args.backend.backend == crate::backend::Backend::Aws {
        if args.http || !args.only.is_empty() {
            return Err(Failure::new(
                crate::http::EXIT_REFUSED,
                "--backend aws runs its own scenarios; --http and --only are for the embedded backend",
            ));
        }
        return crate::bench_aws::run(crate::bench_aws::AwsBench {
            prefix: args.backend.aws_prefix,
            events: args.events,
            payload_bytes: args.payload_bytes,
            emitters: 32,
            workers: postbox_node::DEFAULT_WORKERS,
            json: args.json,
        })
        .await;
    }
    if args.http {
        if !args.only.is_empty() {
            return Err(Failure::new(
                crate::http::EXIT_REFUSED,
                "--only picks the in-process scenarios; --http runs its own",
            ));
        }
        return http::run(http::HttpBench {
            endpoint: args.endpoint,
            token: args.token,
            data: args.data,
            connections: args.connections as usize,
            tenants: if args.tenants.is_empty() {
                vec![1, 100]
            } else {
                args.tenants.iter().map(|&t| t as usize).collect()
            },
            runs: args.runs as usize,
            secs: args.secs,
            payload_bytes: args.payload_bytes,
            json: args.json,
            check: args.check,
        })
        .await;
    }
    let dir =
        tempfile::tempdir().map_err(|e| Failure::from(format!("no temporary directory: {e}")))?;
    let say = |what: &str| eprintln!("bench: {what} ...");
    let runs = |s: Scenario| args.only.is_empty() || args.only.contains(&s);
    let filler = "x".repeat(args.payload_bytes as usize);
    let kb = if args.payload_bytes == 1000 {
        "1 KB".to_owned()
    } else {
        format!("{} B", args.payload_bytes)
    };
    let mut rows = Vec::new();

    let mut one_tenant_log = None;
    if runs(Scenario::Emit) || runs(Scenario::Verify) {
        say("emit, one tenant, 64 emitters (and the one-transaction-per-emit baseline)");
        let setup = EmitLoad {
            name: "emit1",
            tenants: 1,
            emitters: 64,
            secs: args.secs,
            filler: &filler,
        };
        let (store, one) = setup.run(dir.path(), true).await?;
        one_tenant_log = Some(store);
        if runs(Scenario::Emit) {
            let (_, base) = setup.run(dir.path(), false).await?;
            rows.push(setup.row(&kb, (">= 50,000 events/s", 50_000.0), &one, &base));
        }
    }

    if runs(Scenario::Emit) {
        say("emit, 100 tenants, 200 emitters");
        let setup = EmitLoad {
            name: "emit100",
            tenants: 100,
            emitters: 200,
            secs: args.secs,
            filler: &filler,
        };
        let (_, many) = setup.run(dir.path(), true).await?;
        let (_, base) = setup.run(dir.path(), false).await?;
        rows.push(setup.row(&kb, (">= 80,000 events/s", 80_000.0), &many, &base));
    }

    if let Some(store) = one_tenant_log.filter(|_| runs(Scenario::Verify)) {
        say("verify, the one-tenant log from genesis");
        let started = Instant::now();
        let reports = postbox_engine::verify::verify_all(
            &Arc::new(store.clone()),
            postbox_node::EVENTS_TABLE,
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
            figures: vec![
                ("events_per_second", verify_rate),
                ("events", checked as f64),
            ],
            bounds: vec![("events_per_second", Bound::AtLeast(1_000_000.0))],
        });
    }

    if runs(Scenario::Delivery) {
        for subs in [1, 4] {
            say(&format!(
                "delivery, {} events ({kb} + 1 write) to {subs} subscription(s)",
                args.events
            ));
            let d = pipeline(
                dir.path(),
                subs,
                Load::Backlog(args.events as usize),
                &filler,
            )
            .await?;
            rows.push(Row {
                scenario: format!(
                    "delivery of a relayed backlog, {subs} subscription(s), {} worker loops",
                    postbox_node::DEFAULT_WORKERS
                ),
                value: format!("{:.0} completions/s", d.drain),
                target: ">= 20,000 completions/s",
                baseline: format!(
                    "{:.0} completions/s counting the emit and relay of the backlog",
                    d.end_to_end
                ),
                figures: vec![
                    ("completions_per_second", d.drain),
                    ("baseline_completions_per_second", d.end_to_end),
                ],
                bounds: vec![("completions_per_second", Bound::AtLeast(20_000.0))],
            });
        }
    }
    if runs(Scenario::Latency) {
        say("latency, 5,000 events/s");
        let steady = Load::Steady {
            rate: 5000,
            secs: args.secs,
        };
        let lat = pipeline(dir.path(), 1, steady, &filler).await?.latencies;
        rows.push(Row {
            scenario: format!("emit -> completion latency at 5,000 events/s, {kb} + 1 write"),
            value: format!(
                "p50 {:.2} ms, p99 {:.2} ms ({} samples)",
                pct(&lat, 0.5),
                pct(&lat, 0.99),
                lat.len()
            ),
            target: "p50 < 2 ms, p99 < 20 ms",
            baseline: "-".into(),
            figures: vec![
                ("p50_ms", pct(&lat, 0.5)),
                ("p99_ms", pct(&lat, 0.99)),
                ("samples", lat.len() as f64),
            ],
            bounds: vec![
                ("p50_ms", Bound::Below(2.0)),
                ("p99_ms", Bound::Below(20.0)),
            ],
        });
    }

    if args.json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                json!({
                    "scenario": r.scenario,
                    "result": r.value,
                    "target": r.target,
                    "baseline": r.baseline,
                    "met": r.missed().is_empty(),
                    "figures": r.figures.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect::<serde_json::Map<_, _>>(),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        println!(
            "postbox bench: durable (fsync) commits, {} s per emit scenario and of the latency load, {} CPU(s)",
            args.secs,
            std::thread::available_parallelism().map_or(1, |n| n.get())
        );
        let width = |f: fn(&Row) -> &str, title: &str| {
            rows.iter()
                .map(|r| f(r).len())
                .max()
                .unwrap_or(0)
                .max(title.len())
        };
        let (ws, wv, wt) = (
            width(|r| &r.scenario, "scenario"),
            width(|r| &r.value, "result"),
            width(|r| r.target, "target"),
        );
        println!(
            "{:<ws$}  {:<wv$}  {:<wt$}  baseline (same run)",
            "scenario", "result", "target"
        );
        for r in &rows {
            println!(
                "{:<ws$}  {:<wv$}  {:<wt$}  {}",
                r.scenario, r.value, r.target, r.baseline
            );
        }
    }
    if args.check {
        let missed: Vec<String> = rows.iter().flat_map(Row::missed).collect();
        fail_on_misses(&missed)?;
    }
    Ok(())
}

/// `--check`: names each miss on stderr and fails with exit 1 if any.
pub(crate) fn fail_on_misses(missed: &[String]) -> Result<(), Failure> {
    for m in missed {
        eprintln!("bench: missed: {m}");
    }
    if missed.is_empty() {
        Ok(())
    } else {
        Err(Failure::new(
            1,
            format!("{} target(s) missed", missed.len()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(figures: Vec<(&'static str, f64)>, bounds: Vec<(&'static str, Bound)>) -> Row {
        Row {
            scenario: "s".into(),
            value: String::new(),
            target: "",
            baseline: String::new(),
            figures,
            bounds,
        }
    }

    #[test]
    fn a_row_misses_exactly_the_bounds_its_figures_break() {
        let bounds = vec![
            ("rate", Bound::AtLeast(100.0)),
            ("p99_ms", Bound::Below(20.0)),
        ];
        assert!(
            row(vec![("rate", 100.0), ("p99_ms", 19.9)], bounds.clone())
                .missed()
                .is_empty()
        );
        assert_eq!(
            row(vec![("rate", 99.0), ("p99_ms", 20.0)], bounds).missed(),
            [
                "s: rate 99.00 is below 100",
                "s: p99_ms 20.00 is not below 20"
            ]
        );
    }
}
