//! The durable worker on the embedded store, durable commits (fsync) on,
//! each figure beside a baseline measured in the same run: one message at
//! a time (`WorkerOptions::batch = false`: each message a batch of one, so
//! a tenant's messages are claimed one after another, not together).
//!
//!     cargo bench -p postbox-worker --bench worker
//!
//! 1. Throughput, for 1 and 4 subscriptions: the events FIFO queue is
//!    filled the way the default events pipe does (raw NewImage, group =
//!    tenant, dedup id = event id) with `POSTBOX_BENCH_EVENTS` events
//!    (default 20,000) over 50 tenants, then the worker drains it the way
//!    `postbox serve` runs it (`Worker::run`, long polls) with
//!    `POSTBOX_BENCH_TASKS` batches in flight (default 32): every (event,
//!    subscription) is claimed, its handler returns one Put, the completion
//!    commits with that Put. The clock stops at the last delete. Each line
//!    also gives the store writer's time per commit and the CPU per
//!    completion (writer thread, tokio workers), which moves much less than
//!    throughput when other work shares the machine.
//! 2. Latency, end to end: `postbox_engine::Engine` emits a steady
//!    `POSTBOX_BENCH_RATE` events/s (default 5,000) over 50 tenants for
//!    `POSTBOX_BENCH_SECONDS` (default 5); the relay runs the default events
//!    pipe; the worker tasks run in the same process. Latency is from the
//!    emit call to the completion's commit (the handler's Put included),
//!    p50/p99/max, the first second left out as warm-up.
//!
//! Each scenario runs `POSTBOX_BENCH_RUNS` times (default 3), baseline and
//! batched alternating so both see the same moments of a shared machine;
//! the figures are the medians, with every run's figure beside them.
//!
//! Targets: >= 20,000 handler completions/s; emit to completion
//! p50 < 2 ms and p99 < 20 ms at 5,000 events/s. The last line says which
//! the medians meet.

// The allocator the `postbox` binary ships with.
#[global_allocator]
static ALLOC: postbox_alloc::Allocator = postbox_alloc::Allocator;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use postbox_benchkit::{ThreadCpu, bytes_written, env_or, median, median_by};
use postbox_engine::catalog::Catalog;
use postbox_engine::{Context, Engine, Write, layout};
use postbox_item::{AttributeValue, Item, item_to_json};
use postbox_queue::{NewMessage, Queues, QueuesOptions};
use postbox_relay::{Relay, RelayConfig, RelayOptions};
use postbox_store::ItemStore;
use postbox_store::api::*;
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
use postbox_worker::{CompletionHook, Handler, Worker, WorkerOptions, handler};

const QUEUE: &str = "postbox-events.fifo";
const TENANTS: usize = 50;
/// Receive loops of the batched path (`POSTBOX_BENCH_LOOPS`, default 4).
fn loops() -> usize {
    env_or("POSTBOX_BENCH_LOOPS", 4usize).max(1)
}
/// Longest a scenario may take before it is reported as not drained.
const DEADLINE: Duration = Duration::from_secs(120);

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

/// Handlers that each write one effect row, keyed by the idempotency key.
fn handlers(subs: usize) -> HashMap<String, Handler> {
    (0..subs)
        .map(|i| {
            let h = handler(|d| async move {
                let item = Item::from([("pk".to_owned(), AttributeValue::S(d.idempotency_key))]);
                Ok(vec![Write::put("effects", item)])
            });
            (format!("h::s{i}"), h)
        })
        .collect()
}

/// A fresh store (fsync on) with its queues and the effects table.
async fn open(dir: &tempfile::TempDir) -> (Arc<EmbeddedStore>, Queues) {
    let store = EmbeddedStore::open(
        dir.path().join("bench.redb"),
        EmbeddedOptions::default().keeping(postbox_queue::tables()),
    )
    .unwrap();
    let queues = Queues::open(store.clone(), QueuesOptions::default())
        .await
        .unwrap();
    store
        .create_table(CreateTableInput::keyed_by("effects", "pk"))
        .await
        .unwrap();
    (Arc::new(store), queues)
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

/// What draining a filled queue took.
struct Drained {
    completions: u64,
    elapsed: Duration,
    /// Store commits (fsyncs) and the operations they carried.
    commits: u64,
    operations: u64,
    /// The writer's time running operations and committing, µs.
    run_us: u64,
    commit_us: u64,
    /// CPU seconds of the store's writer thread and of the tokio workers.
    writer_cpu: f64,
    tokio_cpu: f64,
    /// Bytes written to storage.
    written: u64,
}

impl Drained {
    fn rate(&self) -> f64 {
        self.completions as f64 / self.elapsed.as_secs_f64()
    }
}

/// Worker loops running until stopped.
struct Running {
    stop: tokio::sync::watch::Sender<bool>,
    loops: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Stops the loops and waits for the batches they hold.
    async fn stop(self) {
        let _ = self.stop.send(true);
        for l in self.loops {
            l.await.unwrap();
        }
    }
}

/// Starts the worker the way `postbox serve` runs it: long-polling
/// `Worker::run` loops. The baseline: `tasks` loops, one batch each.
/// Batched: `loops()` loops sharing the same number of batches in flight.
async fn start_worker(
    store: &Arc<EmbeddedStore>,
    queues: &Queues,
    subs: usize,
    tasks: usize,
    batch: bool,
    hook: Option<CompletionHook>,
) -> (Worker<EmbeddedStore, Queues>, Running) {
    let w = Worker::new(
        store.clone(),
        queues.clone(),
        &catalog(subs),
        handlers(subs),
        WorkerOptions {
            wait_seconds: 1,
            lease: Duration::from_secs(10),
            batch,
            on_completed: hook,
            batches_in_flight: if batch { tasks.div_ceil(loops()) } else { 1 },
            ..WorkerOptions::default()
        },
    )
    .await
    .unwrap();
    let loops = if batch { loops().min(tasks) } else { tasks };
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let loops = (0..loops)
        .map(|_| {
            let (w, rx) = (w.clone(), stop_rx.clone());
            tokio::spawn(async move { w.run(rx).await })
        })
        .collect();
    (w, Running { stop, loops })
}

/// Drains a filled queue.
async fn throughput(subs: usize, tasks: usize, events: usize, batch: bool) -> Drained {
    let dir = tempfile::tempdir().unwrap();
    let (store, queues) = open(&dir).await;
    let attrs = [("FifoQueue".to_owned(), "true".to_owned())]
        .into_iter()
        .collect();
    queues.create_queue(QUEUE, attrs).await.unwrap();
    fill(&store, &queues, catalog(subs), events).await;
    let (w, running) = start_worker(&store, &queues, subs, tasks, batch, None).await;
    let ws0 = store.writer_stats();
    let cpu0 = (
        ThreadCpu::now("postbox-store-w"),
        ThreadCpu::now("tokio-rt"),
    );
    let written0 = bytes_written();
    let total = (events / TENANTS * TENANTS) as u64;
    let start = Instant::now();
    // The clock stops at the last delete, not when the idle loops notice.
    while w.stats().deleted < total && start.elapsed() < DEADLINE {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = start.elapsed();
    let ws = store.writer_stats();
    let cpu = (cpu0.0.elapsed(), cpu0.1.elapsed());
    let written = bytes_written() - written0;
    running.stop().await;
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
    Drained {
        completions: stats.completed,
        elapsed,
        commits: ws.commits - ws0.commits,
        operations: ws.operations - ws0.operations,
        run_us: ws.run_us - ws0.run_us,
        commit_us: ws.commit_us - ws0.commit_us,
        writer_cpu: cpu.0,
        tokio_cpu: cpu.1,
        written,
    }
}

struct Latency {
    emitted: usize,
    completed: usize,
    /// Emit call to completion commit, µs, warm-up left out, sorted.
    micros: Vec<u64>,
    /// Completions per second over the emitting period and the drain.
    rate: f64,
    /// Emit call to emit returned (the event committed), µs, sorted.
    emit_micros: Vec<u64>,
    /// Events relayed and completed when the emitting ended.
    relayed: usize,
    completed_then: usize,
}

/// Emits a steady `rate` events/s for `seconds` through the engine, the
/// relay's default events pipe and `tasks` worker tasks.
async fn latency(rate: usize, seconds: usize, tasks: usize, batch: bool) -> Latency {
    let dir = tempfile::tempdir().unwrap();
    let (store, queues) = open(&dir).await;
    let engine = Engine::builder(store.clone(), catalog(1))
        .build()
        .await
        .unwrap();
    let config = RelayConfig::from_toml("[relay]\nevents_pipe = true\n").unwrap();
    let relay = Relay::start(
        (*store).clone(),
        queues.clone(),
        config,
        RelayOptions::default(),
    )
    .await
    .unwrap();

    let total = rate * seconds;
    let base = Instant::now();
    let emitted_at: Arc<Vec<AtomicU64>> = Arc::new((0..total).map(|_| AtomicU64::new(0)).collect());
    let done: Arc<Mutex<Vec<(usize, u64)>>> = Arc::new(Mutex::new(Vec::with_capacity(total)));
    let hook: CompletionHook = {
        let (emitted_at, done) = (emitted_at.clone(), done.clone());
        Arc::new(move |e, _| {
            let n = e.payload["n"].as_f64().expect("payload n") as usize;
            let now = base.elapsed().as_micros() as u64;
            let at = emitted_at[n].load(Ordering::Relaxed);
            done.lock().unwrap().push((n, now.saturating_sub(at)));
        })
    };
    let (_w, running) = start_worker(&store, &queues, 1, tasks, batch, Some(hook)).await;

    let emits: Arc<Mutex<Vec<u64>>> = Arc::default();
    // Emits on schedule: at each millisecond tick, every event due by now.
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut next = 0;
    while next < total {
        tick.tick().await;
        let due = ((start.elapsed().as_secs_f64() * rate as f64) as usize).min(total);
        while next < due {
            let n = next;
            next += 1;
            let (engine, emitted_at, emits) = (engine.clone(), emitted_at.clone(), emits.clone());
            tokio::spawn(async move {
                let tenant = format!("t{:02}", n % TENANTS);
                let ctx = Context::new(&tenant, "bench").unwrap();
                let called = base.elapsed().as_micros() as u64;
                emitted_at[n].store(called, Ordering::Relaxed);
                engine
                    .emit(
                        &ctx,
                        "ORDER_PLACED",
                        serde_json::json!({"n": n}),
                        Vec::new(),
                    )
                    .await
                    .unwrap();
                if n >= rate {
                    let took = base.elapsed().as_micros() as u64 - called;
                    emits.lock().unwrap().push(took);
                }
            });
        }
    }
    // Where the backlog sits when the emitting ends: not yet relayed, or
    // relayed and not yet completed.
    let relayed = relay.stats().await.unwrap()[0].delivered as usize;
    let completed_then = done.lock().unwrap().len();
    let deadline = Instant::now() + Duration::from_secs(30);
    while done.lock().unwrap().len() < total && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = start.elapsed();
    running.stop().await;
    relay.shutdown().await;
    let done = done.lock().unwrap();
    let warm_up = rate; // the first second's events
    let mut micros: Vec<u64> = done
        .iter()
        .filter(|(n, _)| *n >= warm_up)
        .map(|(_, us)| *us)
        .collect();
    micros.sort_unstable();
    let mut emit_micros = emits.lock().unwrap().clone();
    emit_micros.sort_unstable();
    Latency {
        emit_micros,
        relayed,
        completed_then,
        emitted: total,
        completed: done.len(),
        micros,
        rate: done.len() as f64 / elapsed.as_secs_f64(),
    }
}

/// The latency of one PutItem commit on an idle store (fsync included),
/// p50 in ms: the unit every figure here is made of.
async fn commit_latency() -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let (store, _queues) = open(&dir).await;
    let mut micros = Vec::new();
    for i in 0..200 {
        let item = Item::from([("pk".to_owned(), AttributeValue::S(format!("probe{i}")))]);
        let t = Instant::now();
        store
            .put_item(PutItemInput {
                table_name: "effects".into(),
                item,
                ..Default::default()
            })
            .await
            .unwrap();
        micros.push(t.elapsed().as_micros() as u64);
    }
    micros.sort_unstable();
    percentile(&micros, 0.5)
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

fn main() {
    postbox_alloc::tune();
    let events = env_or("POSTBOX_BENCH_EVENTS", 20_000);
    let tasks = env_or("POSTBOX_BENCH_TASKS", 32);
    let rate = env_or("POSTBOX_BENCH_RATE", 5_000);
    let seconds = env_or("POSTBOX_BENCH_SECONDS", 5);
    let runs = env_or("POSTBOX_BENCH_RUNS", 3).max(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "durable worker, embedded store, fsync on; {events} events over {TENANTS} tenants, {tasks} worker tasks"
    );
    println!(
        "one PutItem commit on an idle store: p50 {:.2} ms",
        rt.block_on(commit_latency())
    );
    // POSTBOX_BENCH_ONLY=throughput|latency runs one half (for profiling).
    let only = std::env::var("POSTBOX_BENCH_ONLY").unwrap_or_default();
    let mut verdicts = Vec::new();
    println!(
        "throughput (queue filled first, then drained; median of {runs} runs, baseline and batched alternating):"
    );
    // POSTBOX_BENCH_SUBS=1 or 4 runs one subscription count.
    let only_subs = env_or("POSTBOX_BENCH_SUBS", 0);
    assert!(
        [0, 1, 4].contains(&only_subs),
        "POSTBOX_BENCH_SUBS must be 1 or 4 (the counts the bench runs), not {only_subs}"
    );
    for subs in [1, 4]
        .into_iter()
        .filter(|s| only != "latency" && (only_subs == 0 || only_subs == *s))
    {
        let mut runs_of: [Vec<Drained>; 2] = Default::default();
        for _ in 0..runs {
            for (i, batch) in [false, true].into_iter().enumerate() {
                runs_of[i].push(rt.block_on(throughput(subs, tasks, events, batch)));
            }
        }
        let mut medians = [0.0; 2];
        for (i, label) in ["baseline, one by one", "batched"].into_iter().enumerate() {
            let all = std::mem::take(&mut runs_of[i]);
            let rates: Vec<String> = all.iter().map(|d| format!("{:.0}", d.rate())).collect();
            let d = median_by(all, Drained::rate);
            medians[i] = d.rate();
            println!(
                "  {subs} subscription(s), {label:<22} {:>8.0} completions/s   (runs: {}; median run: {} completions in {:.1} s; {} commits, {:.1} operations and {:.1} ms each: {:.0} us running, {:.0} us committing)",
                d.rate(),
                rates.join(" / "),
                d.completions,
                d.elapsed.as_secs_f64(),
                d.commits,
                d.operations as f64 / d.commits.max(1) as f64,
                d.elapsed.as_secs_f64() * 1000.0 / d.commits.max(1) as f64,
                d.run_us as f64 / d.commits.max(1) as f64,
                d.commit_us as f64 / d.commits.max(1) as f64,
            );
            let per = |s: f64| s * 1e6 / d.completions.max(1) as f64;
            println!(
                "  {:<38} cpu per completion: writer {:.1} us, tokio workers {:.1} us; {:.1} KB written per completion",
                "",
                per(d.writer_cpu),
                per(d.tokio_cpu),
                d.written as f64 / 1024.0 / d.completions.max(1) as f64
            );
        }
        println!(
            "  {:<38} batched vs baseline: {:.1}x",
            "",
            medians[1] / medians[0].max(1.0)
        );
        verdicts.push(verdict(
            &format!("{subs} subscription(s) >= 20,000/s"),
            medians[1] >= 20_000.0,
        ));
    }
    println!(
        "latency, emit call -> completion committed, {rate} events/s for {seconds} s (engine -> relay -> worker, 1 subscription; median of {runs} runs):"
    );
    if only != "throughput" {
        let mut runs_of: [Vec<Latency>; 2] = Default::default();
        for _ in 0..runs {
            for (i, batch) in [false, true].into_iter().enumerate() {
                runs_of[i].push(rt.block_on(latency(rate, seconds, tasks, batch)));
            }
        }
        for (i, label) in ["baseline, one by one", "batched"].into_iter().enumerate() {
            let all = std::mem::take(&mut runs_of[i]);
            let p50s: Vec<f64> = all.iter().map(|l| percentile(&l.micros, 0.50)).collect();
            let p99s: Vec<f64> = all.iter().map(|l| percentile(&l.micros, 0.99)).collect();
            let list = |v: &[f64]| {
                v.iter()
                    .map(|x| format!("{x:.2}"))
                    .collect::<Vec<_>>()
                    .join(" / ")
            };
            let (p50, p99) = (median(p50s.clone()), median(p99s.clone()));
            println!(
                "  {label:<22} p50 {p50:>8.2} ms   p99 {p99:>8.2} ms   (runs: p50 {} ms; p99 {} ms)",
                list(&p50s),
                list(&p99s),
            );
            let l = median_by(all, |l| percentile(&l.micros, 0.50));
            println!(
                "  {:<22} median run: max {:.2} ms, {} of {} completed, {:.0} completions/s; the emit alone: p50 {:.2} ms, p99 {:.2} ms; when the emitting ended: {} relayed, {} completed",
                "",
                percentile(&l.micros, 1.0),
                l.completed,
                l.emitted,
                l.rate,
                percentile(&l.emit_micros, 0.50),
                percentile(&l.emit_micros, 0.99),
                l.relayed,
                l.completed_then
            );
            if i == 1 {
                verdicts.push(verdict("p50 < 2 ms", p50 < 2.0));
                verdicts.push(verdict("p99 < 20 ms", p99 < 20.0));
            }
        }
    }
    println!("targets (medians): {}", verdicts.join("; "));
}

fn verdict(target: &str, met: bool) -> String {
    format!("{target}: {}", if met { "met" } else { "NOT met" })
}
