//! Emit throughput and latency, durable commits (fsync) on, and verify speed.
//!
//!     cargo bench -p postbox-engine --bench emit
//!
//! Scenarios, in one run (each `POSTBOX_BENCH_SECS` seconds, default 5),
//! every emit with a 1 KB payload and one extra write (a Put of the caller's
//! row):
//! - group commit, one tenant, 64 concurrent emitters;
//! - group commit, 100 tenants, 200 concurrent emitters (2 per tenant);
//! - the naive baseline: one transaction per emit (read the head, commit,
//!   retry on contention), the same two shapes;
//! - verify of the one-tenant log, full, from genesis, as it runs on the
//!   embedded store (query_encoded) and through a store with only Query
//!   (the baseline), with the read floor of each (medians of five passes).
//!
//! The two group-commit scenarios run `POSTBOX_BENCH_RUNS` times (default
//! 3), alternating, each on a fresh store; their figures, the ratios and the
//! last line (which targets are met) use the medians.
//!
//! Targets: >= 50,000 events/s one tenant, >= 80,000 across 100
//! tenants, verify >= 1,000,000 events/s.

// The allocator the `postbox` binary ships with.
#[global_allocator]
static ALLOC: postbox_alloc::Allocator = postbox_alloc::Allocator;

use std::sync::Arc;
use std::time::{Duration, Instant};

use postbox_benchkit::{ThreadCpu, bytes_written, env_or, median, thread_cpu_precise};
use postbox_engine::catalog::Catalog;
use postbox_engine::{Context, EmitError, Engine, EngineOptions, VerifyOptions, Write};
use postbox_item::{AttributeValue, Item};
use postbox_store::ItemStore;
use postbox_store::api::*;
use postbox_store::embedded::{Durability, EmbeddedOptions, EmbeddedStore, WriterStats};
use serde_json::json;

const CATALOG: &str = r#"
[[event_types]]
name = "ORDER_PLACED"
producers = ["orders"]
[[subscriptions]]
name = "mirror"
glob = "ORDER_*"
lane = "DURABLE"
handler = "orders::mirror"
"#;

struct Outcome {
    events: u64,
    failed: u64,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// What the store's writer did during a scenario: commits, operations
/// (transactions) per commit, and where its time went.
fn writer_line(before: WriterStats, after: WriterStats, elapsed: Duration) {
    let commits = (after.commits - before.commits).max(1);
    let ops = after.operations - before.operations;
    let wall = elapsed.as_micros().max(1) as f64;
    let run = (after.run_us - before.run_us) as f64;
    let commit = (after.commit_us - before.commit_us) as f64;
    println!(
        "{:<44} writer: {:.0} commits/s, {:.1} tx per commit, {:.0} us running + {:.0} us committing per commit, idle {:.0}%",
        "",
        commits as f64 / elapsed.as_secs_f64(),
        ops as f64 / commits as f64,
        run / commits as f64,
        commit / commits as f64,
        100.0 * (1.0 - (run + commit) / wall).max(0.0)
    );
}

/// CPU per event of the store's writer thread and of the tokio workers.
fn cpu_line(before: (ThreadCpu, ThreadCpu, u64), events: u64) {
    let (writer, workers, written) = (
        before.0.elapsed(),
        before.1.elapsed(),
        bytes_written() - before.2,
    );
    let per = |s: f64| s * 1e6 / events.max(1) as f64;
    println!(
        "{:<44} cpu per event: writer {:.1} us, tokio workers {:.1} us; {:.1} KB written per event",
        "",
        per(writer),
        per(workers),
        written as f64 / 1024.0 / events.max(1) as f64
    );
}

fn cpu_now() -> (ThreadCpu, ThreadCpu, u64) {
    (
        ThreadCpu::now("postbox-store-w"),
        ThreadCpu::now("tokio-rt"),
        bytes_written(),
    )
}

fn report(name: &str, mut o: Outcome) -> f64 {
    o.latencies.sort();
    let rate = o.events as f64 / o.elapsed.as_secs_f64();
    println!(
        "{name:<44} {rate:>10.0} events/s   p50 {:>7.2} ms   p99 {:>7.2} ms   ({} events, {} failed, {:.1} s)",
        pct(&o.latencies, 0.5).as_secs_f64() * 1e3,
        pct(&o.latencies, 0.99).as_secs_f64() * 1e3,
        o.events,
        o.failed,
        o.elapsed.as_secs_f64()
    );
    rate
}

async fn open(dir: &std::path::Path, name: &str) -> Arc<EmbeddedStore> {
    open_with(dir, name, true).await
}

/// The store's page cache: `POSTBOX_BENCH_CACHE_MB`, else the default.
fn cache_bytes() -> usize {
    env_or(
        "POSTBOX_BENCH_CACHE_MB",
        postbox_store::embedded::DEFAULT_CACHE_BYTES >> 20,
    ) << 20
}

/// A durable store; `commit_log: false` makes every commit a durable redb
/// commit (the store's behaviour before the commit log), for comparison.
async fn open_with(dir: &std::path::Path, name: &str, commit_log: bool) -> Arc<EmbeddedStore> {
    let options = EmbeddedOptions {
        durability: Durability::Durable,
        commit_log,
        cache_bytes: cache_bytes(),
        ttl_sweep_interval: Duration::from_secs(3600),
        ..Default::default()
    };
    let store = Arc::new(EmbeddedStore::open(dir.join(name), options).unwrap());
    store
        .create_table(CreateTableInput::keyed_by("orders", "pk"))
        .await
        .unwrap();
    store
}

async fn run(
    engine: &Engine<EmbeddedStore>,
    emitters: usize,
    tenants: usize,
    secs: f64,
) -> Outcome {
    let blob = "x".repeat(1000);
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let tasks: Vec<_> = (0..emitters)
        .map(|e| {
            let (engine, blob) = (engine.clone(), blob.clone());
            tokio::spawn(async move {
                let ctx = Context::new(format!("tenant-{}", e % tenants), "bench").unwrap();
                let (mut lat, mut failed, mut i) = (Vec::new(), 0u64, 0u64);
                while Instant::now() < deadline {
                    let id = format!("{e}-{i}");
                    i += 1;
                    let row = Item::from([
                        ("pk".to_owned(), AttributeValue::S(format!("ORDER#{id}"))),
                        ("status".to_owned(), AttributeValue::s("placed")),
                    ]);
                    let t0 = Instant::now();
                    match engine
                        .emit(
                            &ctx,
                            "ORDER_PLACED",
                            json!({"order": id, "blob": blob}),
                            vec![Write::put("orders", row)],
                        )
                        .await
                    {
                        Ok(_) => lat.push(t0.elapsed()),
                        Err(EmitError::Contention { .. }) => failed += 1,
                        Err(e) => panic!("{e}"),
                    }
                }
                (lat, failed)
            })
        })
        .collect();
    let mut o = Outcome {
        events: 0,
        failed: 0,
        elapsed: Duration::ZERO,
        latencies: Vec::new(),
    };
    for t in tasks {
        let (lat, failed) = t.await.unwrap();
        o.events += lat.len() as u64;
        o.failed += failed;
        o.latencies.extend(lat);
    }
    o.elapsed = start.elapsed();
    o
}

/// The store alone doing what the one-tenant scenario's group commits write,
/// with no engine: per transaction one head update and 32 x (the same event
/// row, in a stream-enabled table, + the same caller row), two transactions
/// in flight (64 events, as many as the emitters): the ceiling the engine
/// works under.
async fn store_floor(dir: &std::path::Path, secs: f64) -> Outcome {
    let store = open(dir, "floor.redb").await;
    let mut events = postbox_engine::layout::create_events_table("floor_events");
    events.billing_mode = Some("PAY_PER_REQUEST".into());
    store.create_table(events).await.unwrap();
    let blob = format!("{{\"blob\":\"{}\",\"order\":\"0-0\"}}", "x".repeat(1000));
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let tasks: Vec<_> = (0..2)
        .map(|t| {
            let (store, blob) = (store.clone(), blob.clone());
            tokio::spawn(async move {
                let s = |v: String| AttributeValue::S(v);
                let (mut lat, mut i) = (Vec::new(), 0u64);
                while Instant::now() < deadline {
                    let mut items = vec![TransactWriteItem {
                        update: Some(TransactUpdate {
                            table_name: "floor_events".into(),
                            key: Item::from([
                                ("pk".to_owned(), s(format!("HEAD#{t}"))),
                                ("sk".to_owned(), s("HEAD".into())),
                            ]),
                            update_expression: "SET last_seq = :s".into(),
                            expression_attribute_values: Some(Values::from([(
                                ":s".to_owned(),
                                AttributeValue::n(i as i64),
                            )])),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }];
                    for e in 0..32 {
                        let id = format!("{t}-{i}-{e}");
                        let fields = postbox_engine::chain::EnvelopeFields {
                            actor: "bench",
                            causation_id: None,
                            correlation_id: "01JDQ4Z8Y3V5X7W9T1R3P5N7M9",
                            id: "01JDQ4Z8Y3V5X7W9T1R3P5N7M9",
                            occurred_at: "2026-11-29T19:20:08.123Z",
                            payload: &blob,
                            seq: i * 32 + e + 1,
                            tenant: &format!("floor-{t}"),
                            event_type: "ORDER_PLACED",
                        };
                        let ev = postbox_engine::layout::event_item(&fields, "0".repeat(64));
                        let row = Item::from([
                            ("pk".to_owned(), s(format!("ORDER#{id}"))),
                            ("status".to_owned(), AttributeValue::s("placed")),
                        ]);
                        for (table, item) in [("floor_events", ev), ("orders", row)] {
                            items.push(TransactWriteItem {
                                put: Some(TransactPut {
                                    table_name: table.into(),
                                    item,
                                    condition_expression: Some("attribute_not_exists(pk)".into()),
                                    ..Default::default()
                                }),
                                ..Default::default()
                            });
                        }
                    }
                    i += 1;
                    let t0 = Instant::now();
                    store
                        .transact_write_items(TransactWriteItemsInput {
                            transact_items: items,
                            client_request_token: None,
                        })
                        .await
                        .unwrap();
                    let took = t0.elapsed();
                    lat.extend(std::iter::repeat_n(took, 32));
                }
                lat
            })
        })
        .collect();
    let mut o = Outcome {
        events: 0,
        failed: 0,
        elapsed: Duration::ZERO,
        latencies: Vec::new(),
    };
    for t in tasks {
        let lat = t.await.unwrap();
        o.events += lat.len() as u64;
        o.latencies.extend(lat);
    }
    o.elapsed = start.elapsed();
    o
}

/// One page of tenant-0's log after `start`, through Query or
/// query_encoded.
fn log_page(start: Option<Item>) -> QueryInput {
    QueryInput {
        table_name: "postbox_events".into(),
        key_condition_expression: Some("pk = :pk".into()),
        expression_attribute_values: Some(Values::from([(
            ":pk".to_owned(),
            AttributeValue::s("TENANT#tenant-0#EVENT"),
        )])),
        limit: Some(1000),
        exclusive_start_key: start,
        consistent_read: Some(true),
        ..Default::default()
    }
}

/// Reads tenant-0's whole log with plain pages and nothing else: events
/// read, and events/s.
async fn read_floor(store: &EmbeddedStore, encoded: bool) -> (u64, f64) {
    let started = Instant::now();
    let mut n = 0;
    let mut start = None;
    loop {
        let last = if encoded {
            let page = store.query_encoded(log_page(start.take())).await.unwrap();
            n += page.len() as u64;
            page.last_evaluated_key
        } else {
            let page = store.query(log_page(start.take())).await.unwrap();
            n += page.items.map_or(0, |i| i.len() as u64);
            page.last_evaluated_key
        };
        match last {
            Some(k) => start = Some(k),
            None => break,
        }
    }
    (n, n as f64 / started.elapsed().as_secs_f64())
}

/// Full verifies of tenant-0 over `store`: events checked, the median
/// events/s and the median CPU per event of the tokio workers, of five.
async fn verify_rate<S: ItemStore>(store: &Arc<S>) -> (u64, f64, f64) {
    let full = VerifyOptions {
        full: true,
        update_checkpoint: false,
        segments: bench_segments(),
        page_size: bench_page(),
        sample: 0,
    };
    let (mut rates, mut cpus, mut n) = (Vec::new(), Vec::new(), 0);
    for _ in 0..5 {
        let (started, cpu) = (Instant::now(), thread_cpu_precise("tokio-rt"));
        let r = postbox_engine::verify::verify_tenant(
            store,
            "postbox_events",
            "tenant-0",
            &full,
            &mut |_| {},
        )
        .await
        .unwrap();
        let (el, cpu) = (
            started.elapsed().as_secs_f64(),
            thread_cpu_precise("tokio-rt") - cpu,
        );
        assert!(r.intact(), "{r:?}");
        n = r.checked;
        rates.push(n as f64 / el);
        cpus.push(cpu * 1e6 / n as f64);
    }
    (n, median(rates), median(cpus))
}

/// The verify lines: verify as it runs on the embedded store (through
/// query_encoded), the same verify through a store that has only Query
/// (the trait's default query_encoded: Query, then an encode per item),
/// and what reading the log alone costs each way. Each figure is the
/// median of five passes over the same log.
async fn verify_lines(store: &Arc<EmbeddedStore>) -> f64 {
    let (n, rate, cpu) = verify_rate(store).await;
    let verify = rate;
    println!(
        "{:<44} {rate:>10.0} events/s   ({n} events of ~1.3 KB; {cpu:.2} us CPU per event; median of 5)",
        "verify, 1 tenant, full"
    );
    let via_query = Arc::new(postbox_store::QueryOnly(store.clone()));
    let (n, rate, cpu) = verify_rate(&via_query).await;
    println!(
        "{:<44} {rate:>10.0} events/s   ({n} events; {cpu:.2} us CPU per event; a store without query_encoded)",
        "verify through Query (baseline)"
    );
    let floor = |encoded| async move {
        let mut runs = Vec::new();
        let mut n = 0;
        for _ in 0..5 {
            let (read, rate) = read_floor(store, encoded).await;
            n = read;
            runs.push(rate);
        }
        (n, median(runs))
    };
    let (n, rate) = floor(false).await;
    println!(
        "{:<44} {rate:>10.0} events/s   ({n} events: the store's Query alone, the baseline's ceiling)",
        "read floor: Query pages only"
    );
    let (n, rate) = floor(true).await;
    println!(
        "{:<44} {rate:>10.0} events/s   ({n} events: query_encoded alone, one thread)",
        "read floor: query_encoded pages only"
    );
    verify
}

/// Where one event's time goes on one thread (best of five passes over
/// the whole log): reading it, reading the envelope out of the row,
/// writing the canonical form, hashing it.
async fn breakdown(store: &EmbeddedStore) {
    use postbox_engine::{chain, layout};
    let mut pages = Vec::new();
    let mut start = None;
    loop {
        let page = store.query_encoded(log_page(start.take())).await.unwrap();
        start = page.last_evaluated_key.clone();
        pages.push(page);
        if start.is_none() {
            break;
        }
    }
    let n: usize = pages.iter().map(|p| p.len()).sum();
    let best = |f: &mut dyn FnMut()| {
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t = Instant::now();
            f();
            best = best.min(t.elapsed().as_secs_f64() * 1e9 / n as f64);
        }
        best
    };
    let (_, read_rate) = read_floor(store, true).await;
    let rows = || pages.iter().flat_map(|p| p.items());
    let walk = best(&mut || {
        for r in rows() {
            std::hint::black_box(layout::fields_of_encoded(r).unwrap());
        }
    });
    let mut scratch = String::new();
    let canonical = best(&mut || {
        for r in rows() {
            let (f, _, _) = layout::fields_of_encoded(r).unwrap();
            scratch.clear();
            chain::canonical_envelope(&f, &mut scratch);
            std::hint::black_box(scratch.len());
        }
    });
    let mut prev = chain::GENESIS;
    let hashed = best(&mut || {
        for r in rows() {
            let (f, _, _) = layout::fields_of_encoded(r).unwrap();
            prev = chain::hash_envelope(&prev, &f, &mut scratch);
        }
    });
    println!(
        "per event, one thread: query_encoded {:.0} ns; then envelope out of the row {walk:.0} ns, + canonical form {:.0} ns, + sha256 {:.0} ns",
        1e9 / read_rate,
        canonical - walk,
        hashed - canonical
    );
}

fn main() {
    postbox_alloc::tune();
    let secs: f64 = env_or("POSTBOX_BENCH_SECS", 5.0);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let dir = tempfile::tempdir_in(std::env::var("POSTBOX_BENCH_DIR").unwrap_or_else(|_| std::env::temp_dir().display().to_string())).unwrap();
        println!("emit benchmark: durable (fsync) commits, 1 KB payloads, one extra write per emit, {secs} s per scenario, 2 tokio workers");
        let catalog = Catalog::from_toml(CATALOG, "bench").unwrap();
        let mut group = EngineOptions::default();
        group.pipeline_depth = env_or("POSTBOX_BENCH_DEPTH", group.pipeline_depth);
        group.max_batch_events = env_or("POSTBOX_BENCH_BATCH", group.max_batch_events);
        // POSTBOX_BENCH_ONLY=verify: fill a log quickly (no fsync; POSTBOX_BENCH_FILL events per
        // emitter, 64 emitters), break one event's time down, and print the verify lines
        // POSTBOX_BENCH_RUNS times (for profiling).
        if std::env::var("POSTBOX_BENCH_ONLY").as_deref() == Ok("verify") {
            let options = EmbeddedOptions { durability: Durability::NoFsync, cache_bytes: cache_bytes(), ..Default::default() };
            let store = Arc::new(EmbeddedStore::open(dir.path().join("v.redb"), options).unwrap());
            let engine = Engine::builder(store.clone(), Catalog::from_toml("[[event_types]]\nname='ORDER_PLACED'\nproducers=['o']\n", "v").unwrap()).build().await.unwrap();
            let blob = "x".repeat(1000);
            // POSTBOX_BENCH_FILL: events per emitter (64 emitters; default 1000).
            let fill: usize = env_or("POSTBOX_BENCH_FILL", 1000);
            let tasks: Vec<_> = (0..64).map(|e| { let (engine, blob) = (engine.clone(), blob.clone()); tokio::spawn(async move {
                let ctx = Context::new("tenant-0", "bench").unwrap();
                for i in 0..fill { engine.emit(&ctx, "ORDER_PLACED", json!({"order": format!("{e}-{i}"), "blob": blob}), vec![]).await.unwrap(); }
            })}).collect();
            for t in tasks { t.await.unwrap(); }
            breakdown(&store).await;
            let runs = env_or("POSTBOX_BENCH_RUNS", 1);
            for _ in 0..runs {
                verify_lines(&store).await;
            }
            return;
        }
        // POSTBOX_BENCH_ONLY=one|many runs only that group-commit scenario, once (for profiling).
        match std::env::var("POSTBOX_BENCH_ONLY").as_deref() {
            Ok("one") => {
                group_scenario(dir.path(), "one-0.redb", &catalog, &group, 64, 1, secs).await;
                return;
            }
            Ok("many") => {
                group_scenario(dir.path(), "many-0.redb", &catalog, &group, 200, 100, secs).await;
                return;
            }
            _ => {}
        }
        let naive = EngineOptions { group_commit: false, max_tries: 50, ..Default::default() };

        // The two group-commit scenarios, alternating, POSTBOX_BENCH_RUNS times (default 3);
        // their figures are the medians.
        let runs = env_or("POSTBOX_BENCH_RUNS", 3usize).max(1);
        let (mut ones, mut manys, mut store) = (Vec::new(), Vec::new(), None);
        for r in 0..runs {
            let (rate, s) = group_scenario(dir.path(), &format!("one-{r}.redb"), &catalog, &group, 64, 1, secs).await;
            ones.push(rate);
            // verify reads the last one-tenant log.
            store = Some(s);
            manys.push(group_scenario(dir.path(), &format!("many-{r}.redb"), &catalog, &group, 200, 100, secs).await.0);
        }
        let store = store.expect("at least one run");
        let list = |v: &[f64]| v.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(" / ");
        let (one, many) = (median(ones.clone()), median(manys.clone()));
        println!("group commit, median of {runs} runs: 1 tenant {one:.0} events/s (runs: {}); 100 tenants {many:.0} events/s (runs: {})", list(&ones), list(&manys));

        let mut no_log = [0.0; 2];
        for (i, (emitters, tenants)) in [(64, 1), (200, 100)].into_iter().enumerate() {
            let store = open_with(dir.path(), &format!("nolog{tenants}.redb"), false).await;
            let engine = Engine::builder(store, catalog.clone()).options(group.clone()).build().await.unwrap();
            let name = format!("no commit log, {tenants} tenant(s), {emitters} emitters");
            no_log[i] = report(&name, run(&engine, emitters, tenants, secs).await);
        }
        println!("commit log vs durable redb commits: {:.1}x (1 tenant), {:.1}x (100 tenants)", one / no_log[0].max(1.0), many / no_log[1].max(1.0));

        let store_n = open(dir.path(), "naive1.redb").await;
        let naive1 = Engine::builder(store_n, catalog.clone()).options(naive.clone()).build().await.unwrap();
        let base1 = report("baseline: 1 tx per emit, 1 tenant, 64 emitters", run(&naive1, 64, 1, secs).await);
        let store_m = open(dir.path(), "naive100.redb").await;
        let naive100 = Engine::builder(store_m, catalog.clone()).options(naive).build().await.unwrap();
        let base100 = report("baseline: 1 tx per emit, 100 tenants, 200 emitters", run(&naive100, 200, 100, secs).await);
        println!("group commit vs baseline: {:.1}x (1 tenant), {:.1}x (100 tenants)", one / base1.max(1.0), many / base100.max(1.0));

        let floor = report("store floor: same rows, 64 in flight, no engine", store_floor(dir.path(), secs).await);
        println!("{:<44} engine reaches {:.0}% of the store's own rate for these writes", "", 100.0 * one / floor.max(1.0));

        let verify = verify_lines(&store).await;
        let met = |ok: bool| if ok { "met" } else { "NOT met" };
        println!(
            "targets (medians): 1 tenant >= 50,000/s: {}; 100 tenants >= 80,000/s: {}; verify >= 1,000,000/s: {}",
            met(one >= 50_000.0),
            met(many >= 80_000.0),
            met(verify >= 1_000_000.0)
        );
    });
}

/// One group-commit scenario on a fresh store `name`: `emitters` emitters
/// over `tenants` tenants for `secs` seconds, with its figure, writer and
/// CPU lines. Returns events/s and the store.
async fn group_scenario(
    dir: &std::path::Path,
    name: &str,
    catalog: &Catalog,
    group: &EngineOptions,
    emitters: usize,
    tenants: usize,
    secs: f64,
) -> (f64, Arc<EmbeddedStore>) {
    let store = open(dir, name).await;
    let engine = Engine::builder(store.clone(), catalog.clone())
        .options(group.clone())
        .build()
        .await
        .unwrap();
    let (before, cpu) = (store.writer_stats(), cpu_now());
    let o = run(&engine, emitters, tenants, secs).await;
    let (elapsed, events) = (o.elapsed, o.events);
    let label = if tenants == 1 {
        format!("group commit, 1 tenant, {emitters} emitters")
    } else {
        format!("group commit, {tenants} tenants, {emitters} emitters")
    };
    let rate = report(&label, o);
    let stats = engine.stats();
    println!(
        "{:<44} {:>10.1} events per transaction",
        "",
        stats.emitted as f64 / stats.transactions.max(1) as f64
    );
    writer_line(before, store.writer_stats(), elapsed);
    cpu_line(cpu, events);
    (rate, store)
}

/// Verify's parallel ranges (`POSTBOX_BENCH_SEGMENTS`, default 2).
fn bench_segments() -> usize {
    env_or("POSTBOX_BENCH_SEGMENTS", 2)
}

/// Verify's page size (`POSTBOX_BENCH_PAGE`, default VerifyOptions's).
fn bench_page() -> usize {
    env_or("POSTBOX_BENCH_PAGE", VerifyOptions::default().page_size)
}
