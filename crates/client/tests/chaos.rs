//! The multi-process chaos run: real processes, killed with
//! SIGKILL at random, and then the proof that every (event, subscription)
//! effect happened exactly once and every chain is intact.
//!
//! This test binary runs itself again (`current_exe`, with
//! `POSTBOX_CHAOS_ROLE`) to make the processes:
//! - one OWNER: opens the embedded store and queues on the data directory,
//!   creates the events and effects tables, runs the relay with the default
//!   events pipe and serves the wire protocols on a fixed port (chosen at
//!   its first start and written to `port` in the data directory);
//! - several WORKERS: `postbox_worker::Worker` over `RemoteStore` and
//!   `RemoteQueues`, with four DURABLE subscriptions whose handlers record
//!   their effect as `ADD n :one` on the item `<event_id>:<subscription>` of
//!   the effects table, committed with the claim's completion; one of them
//!   fails retryably on the first attempt of every fourth event.
//!
//! The test process emits events over the wire with
//! `Engine<RemoteStore>` over N tenants, retrying an emit that got no
//! answer (it may or may not have committed; the check is over the log),
//! while a monkey SIGKILLs a worker every few hundred ms and the owner every
//! few seconds, restarting each at once on the same directory and port.
//! Then every process is left up until the queue is empty and every effect
//! is there, and the test checks: each event of each tenant's log has, for
//! each subscription, an effect count of exactly 1; every acknowledged emit
//! is in the log; `verify` finds every chain intact.
//!
//! Size: `POSTBOX_CHAOS_EVENTS` (600), `POSTBOX_CHAOS_TENANTS` (10),
//! `POSTBOX_CHAOS_WORKERS` (3), `POSTBOX_CHAOS_RATE` (50 emits/s over all
//! tenants, so the kills fall while events are emitted); the full run is
//! `POSTBOX_CHAOS_EVENTS=20000 POSTBOX_CHAOS_TENANTS=50 cargo test --release
//! -p postbox-client --test chaos -- --nocapture` (about 7 minutes on the
//! 2-core machine: 400 s of emits at 50/s, about 135 owner and 850 worker
//! kills; a debug build cannot keep up with 50 events/s there).
//! `POSTBOX_CHAOS_KEEP=1` keeps the data directory and the processes' logs.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use postbox_client::{Endpoint, EndpointOptions, RemoteQueues, RemoteStore};
use postbox_engine::catalog::Catalog;
use postbox_engine::{Context, EmitError, Engine, VerifyOptions, Write, layout};
use postbox_item::{AttributeValue, Item};
use postbox_queue::{QueueClient, Queues, QueuesOptions};
use postbox_relay::{Relay, RelayConfig, RelayOptions};
use postbox_store::api::*;
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
use postbox_store::{ItemStore, StoreError};
use postbox_worker::{Handler, HandlerError, Worker, WorkerOptions, handler};

const ROLE_ENV: &str = "POSTBOX_CHAOS_ROLE";
const DIR_ENV: &str = "POSTBOX_CHAOS_DIR";
const PARENT_ENV: &str = "POSTBOX_CHAOS_PARENT";
const EVENTS_TABLE: &str = "postbox_events";
const EFFECTS: &str = "chaos_effects";
const QUEUE: &str = "postbox-events.fifo";
const SUBSCRIPTIONS: [&str; 4] = ["order-mirror", "shipment", "notification", "tag-update"];
/// The subscription whose dependency fails now and then.
const FLAKY: &str = "notification";

/// The relay's lease is short so a restarted owner's relay takes over
/// within two seconds of the kill instead of the default ten.
const PIPES: &str =
    "[relay]\nevents_pipe = true\ncreate_missing_queues = true\nlease_seconds = 2\n";

fn catalog() -> Catalog {
    let mut text = String::from(
        "[[event_types]]\nname = \"PAYMENT_COMPLETED\"\nproducers = [\"payments\"]\n\n",
    );
    for s in SUBSCRIPTIONS {
        text.push_str(&format!(
            "[[subscriptions]]\nname = \"{s}\"\nglob = \"PAYMENT_*\"\nlane = \"DURABLE\"\n\
             handler = \"chaos::{s}\"\nretry = {{ max_attempts = 100, backoff_ms = 200 }}\n\n"
        ));
    }
    Catalog::from_toml(&text, "chaos").expect("the chaos catalog is valid")
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// --- the child processes -----------------------------------------------------

/// Entry point of the child processes; a plain `cargo test` run passes
/// through it without doing anything.
#[test]
fn chaos_child() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    let dir = PathBuf::from(std::env::var(DIR_ENV).expect("the data directory"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .with_ansi(false)
        .try_init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.spawn(exit_with_parent());
    match role.as_str() {
        "owner" => runtime.block_on(owner(&dir)),
        "worker" => runtime.block_on(worker(&dir)),
        other => panic!("unknown chaos role {other:?}"),
    }
}

/// A child whose test process is gone exits too, so no process outlives a
/// failed or interrupted run.
async fn exit_with_parent() {
    let parent: u32 = std::env::var(PARENT_ENV)
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if std::os::unix::process::parent_id() != parent {
            std::process::exit(3);
        }
    }
}

/// The owner: store, queues, relay and the wire protocols.
async fn owner(dir: &Path) {
    let file = dir.join("postbox.redb");
    let store = EmbeddedStore::open(
        &file,
        EmbeddedOptions::default().keeping(postbox_queue::tables()),
    )
    .expect("open the store");
    let queues = Queues::open(store.clone(), QueuesOptions::default())
        .await
        .expect("open the queues");
    for table in [layout::create_events_table(EVENTS_TABLE), effects_table()] {
        match store.create_table(table).await {
            Ok(_) | Err(StoreError::ResourceInUse(_)) => {}
            Err(e) => panic!("cannot create a table: {e}"),
        }
    }
    let config = RelayConfig::from_toml(PIPES).expect("the pipes config is valid");
    let _relay = Relay::start(
        store.clone(),
        queues.clone(),
        config,
        RelayOptions::default(),
    )
    .await
    .expect("start the relay");
    let port_file = dir.join("port");
    let addr = match std::fs::read_to_string(&port_file) {
        Ok(port) => format!("127.0.0.1:{}", port.trim()),
        Err(_) => "127.0.0.1:0".to_owned(),
    };
    let listener = bind_retrying(&addr).await;
    let port = listener.local_addr().unwrap().port();
    if !port_file.exists() {
        let tmp = dir.join("port.tmp");
        std::fs::write(&tmp, port.to_string()).unwrap();
        std::fs::rename(&tmp, &port_file).unwrap();
    }
    let app = postbox_server::app(postbox_server::Services {
        store,
        queues: Some(queues),
        test_clock: None,
        // The engine itself writes events through this server here, which
        // no wire key may do: the unauthenticated mode.
        auth: postbox_server::WireAuth::None,
    });
    postbox_server::serve(app, listener, std::future::pending())
        .await
        .expect("serve");
}

/// Binds `addr`; the killed owner's port can take a moment to come free.
async fn bind_retrying(addr: &str) -> tokio::net::TcpListener {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => return l,
            Err(e) if Instant::now() < deadline => {
                eprintln!("owner: cannot bind {addr} yet: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("owner: cannot bind {addr}: {e}"),
        }
    }
}

fn effects_table() -> CreateTableInput {
    CreateTableInput::keyed_by(EFFECTS, "pk")
}

/// The handler of subscription `name`: its effect is one `ADD n :one` on
/// `<event_id>:<subscription>`, committed with the completion.
fn effect_handler(name: &'static str) -> Handler {
    handler(move |d| async move {
        if name == FLAKY && d.attempt == 0 && flaky_event(&d.envelope.id) {
            return Err(HandlerError::retryable(
                "the notification service timed out",
            ));
        }
        let key = Item::from([("pk".to_owned(), AttributeValue::s(&d.idempotency_key))]);
        Ok(vec![
            Write::update(EFFECTS, key, "ADD n :one").value(":one", AttributeValue::n(1)),
        ])
    })
}

/// Every fourth event (by id) fails its first attempt at the flaky
/// subscription.
fn flaky_event(id: &str) -> bool {
    id.bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b.into()))
        % 4
        == 0
}

/// A worker over the wire, started again and again until the owner answers.
async fn worker(dir: &Path) {
    let (store, queues) = remote(dir).await;
    let handlers: HashMap<String, Handler> = SUBSCRIPTIONS
        .iter()
        .map(|s| (format!("chaos::{s}"), effect_handler(s)))
        .collect();
    let options = WorkerOptions {
        owner: format!("chaos-worker-{}", std::process::id()),
        queue: QUEUE.into(),
        events_table: EVENTS_TABLE.into(),
        lease: Duration::from_secs(2),
        wait_seconds: 1,
        order_wait_seconds: 1,
        ..WorkerOptions::default()
    };
    let worker = loop {
        match Worker::new(
            Arc::new(store.clone()),
            queues.clone(),
            &catalog(),
            handlers.clone(),
            options.clone(),
        )
        .await
        {
            Ok(w) => break w,
            Err(e) => {
                eprintln!("worker: not started yet: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);
    worker.run(stop).await;
}

/// The remote store and queues of the owner whose port is in `dir`.
async fn remote(dir: &Path) -> (RemoteStore, RemoteQueues) {
    let port_file = dir.join("port");
    let port = loop {
        match std::fs::read_to_string(&port_file) {
            Ok(p) => break p.trim().to_owned(),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let endpoint = Endpoint::with_options(
        &format!("http://127.0.0.1:{port}"),
        EndpointOptions {
            timeout: Duration::from_secs(5),
            ..EndpointOptions::default()
        },
    )
    .unwrap();
    (
        RemoteStore::new(endpoint.clone()),
        RemoteQueues::new(endpoint),
    )
}

// --- the test process --------------------------------------------------------

/// The processes of the run, killed and restarted by the monkey.
struct Processes {
    dir: PathBuf,
    owner: Child,
    workers: Vec<Child>,
    owner_kills: u64,
    worker_kills: u64,
    starts: u64,
}

impl Processes {
    fn start(dir: &Path, workers: usize) -> Processes {
        Processes {
            dir: dir.to_path_buf(),
            owner: spawn(dir, "owner"),
            workers: (0..workers).map(|_| spawn(dir, "worker")).collect(),
            owner_kills: 0,
            worker_kills: 0,
            starts: 1 + workers as u64,
        }
    }

    fn spawn(&mut self, role: &str) -> Child {
        self.starts += 1;
        spawn(&self.dir, role)
    }

    fn kill_owner(&mut self) {
        kill(&mut self.owner);
        self.owner_kills += 1;
        self.owner = self.spawn("owner");
    }

    fn kill_worker(&mut self, i: usize) {
        kill(&mut self.workers[i]);
        self.worker_kills += 1;
        self.workers[i] = self.spawn("worker");
    }

    /// Restarts any child that exited by itself (it should not).
    fn keep_alive(&mut self) -> Vec<String> {
        let mut exits = Vec::new();
        if let Ok(Some(status)) = self.owner.try_wait() {
            exits.push(format!("owner exited by itself: {status}"));
            self.owner = self.spawn("owner");
        }
        for i in 0..self.workers.len() {
            if let Ok(Some(status)) = self.workers[i].try_wait() {
                exits.push(format!("worker exited by itself: {status}"));
                self.workers[i] = self.spawn("worker");
            }
        }
        exits
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        kill(&mut self.owner);
        for w in &mut self.workers {
            kill(w);
        }
    }
}

/// Starts this binary again as a `role` child on `dir`, its output
/// appended to `<role>.out.log` and `<role>.err.log` there.
fn spawn(dir: &Path, role: &str) -> Child {
    let log = |kind: &str| {
        File::options()
            .create(true)
            .append(true)
            .open(dir.join(format!("{role}.{kind}.log")))
            .unwrap()
    };
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "chaos_child", "--nocapture", "--test-threads=1"])
        .env(ROLE_ENV, role)
        .env(DIR_ENV, dir)
        .env(PARENT_ENV, std::process::id().to_string())
        .stdin(Stdio::null())
        .stdout(log("out"))
        .stderr(log("err"))
        .spawn()
        .expect("spawn a chaos child")
}

/// SIGKILL (std's `kill` on Unix) and reap.
fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// What the emitters saw.
#[derive(Default)]
struct Emits {
    /// (tenant, event id, seq) of every emit that was answered Ok.
    acknowledged: Mutex<Vec<(String, String, u64)>>,
    /// Emits that failed and were tried again.
    retries: AtomicU64,
    /// Emit failures other than "no answer" and contention.
    other_errors: Mutex<Vec<String>>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_every_effect_exactly_once_and_every_chain_intact() {
    if std::env::var(ROLE_ENV).is_ok() {
        return;
    }
    let events = env_usize("POSTBOX_CHAOS_EVENTS", 600);
    let tenants = env_usize("POSTBOX_CHAOS_TENANTS", 10).max(1);
    let workers = env_usize("POSTBOX_CHAOS_WORKERS", 3).max(1);
    let rate = env_usize("POSTBOX_CHAOS_RATE", 50).max(1);
    let keep = std::env::var("POSTBOX_CHAOS_KEEP").is_ok_and(|v| v == "1");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    println!(
        "chaos: {events} events over {tenants} tenants at {rate}/s, {workers} workers, data in {}",
        dir.display()
    );
    let started = Instant::now();

    let procs = Arc::new(Mutex::new(Processes::start(&dir, workers)));

    let (store, queues) = remote(&dir).await;
    let store = Arc::new(store);
    let engine = loop {
        match Engine::builder(store.clone(), catalog()).build().await {
            Ok(e) => break e,
            Err(e) => {
                eprintln!("chaos: engine not ready: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };

    let chaos = Arc::new(AtomicBool::new(true));
    let monkey = start_monkey(procs.clone(), chaos.clone());
    let emits = emit_all(&engine, events, tenants, rate).await;
    let emitted_in = started.elapsed();
    println!(
        "chaos: {} emits acknowledged in {emitted_in:.1?} ({} retried)",
        emits.acknowledged.lock().unwrap().len(),
        emits.retries.load(Ordering::Relaxed)
    );

    // Kills go on while the workers catch up, until 90% of the effects are
    // there (or a minute has passed).
    let tenant_names: Vec<String> = (0..tenants).map(|t| format!("tenant-{t:03}")).collect();
    let chaos_until = Instant::now() + Duration::from_secs(60);
    while Instant::now() < chaos_until {
        tokio::time::sleep(Duration::from_secs(2)).await;
        if let Some((expected, done)) = counts(&store, &tenant_names).await
            && done * 10 >= expected * 9
        {
            break;
        }
    }
    chaos.store(false, Ordering::Relaxed);
    let unexpected_exits = monkey.join().unwrap();
    println!("chaos: kills stopped after {:.1?}", started.elapsed());

    let settle_start = Instant::now();
    let outcome = settle(&procs, &store, &queues, &tenant_names, events).await;
    println!("chaos: settled in {:.1?}", settle_start.elapsed());

    let acknowledged = emits.acknowledged.lock().unwrap().clone();
    let log = read_logs(&store, &tenant_names).await.unwrap();
    let in_log: HashSet<&str> = log.iter().map(|e| e.id.as_str()).collect();
    let lost_emits: Vec<&(String, String, u64)> = acknowledged
        .iter()
        .filter(|(_, id, _)| !in_log.contains(id.as_str()))
        .collect();
    let reports = engine
        .verify_all(
            &VerifyOptions {
                full: true,
                update_checkpoint: false,
                ..VerifyOptions::default()
            },
            &mut |_| {},
        )
        .await
        .expect("verify runs");
    let broken: Vec<String> = reports
        .iter()
        .filter(|r| !r.intact())
        .map(|r| format!("{}: {:?}", r.tenant, r.broken))
        .collect();
    let p = procs.lock().unwrap();
    println!(
        "chaos: {} events in the log ({} acknowledged, {} emits retried), {} subscriptions, \
         kills: {} owner + {} worker ({} process starts), duplicates: {}, losses: {}, \
         acknowledged emits missing from the log: {}, broken chains: {}, total {:.1?}",
        log.len(),
        acknowledged.len(),
        emits.retries.load(Ordering::Relaxed),
        SUBSCRIPTIONS.len(),
        p.owner_kills,
        p.worker_kills,
        p.starts,
        outcome.duplicates.len(),
        outcome.missing.len(),
        lost_emits.len(),
        broken.len(),
        started.elapsed(),
    );
    drop(p);
    if keep {
        println!("chaos: kept {}", tmp.keep().display());
    }
    assert!(unexpected_exits.is_empty(), "{unexpected_exits:?}");
    let other_errors = emits.other_errors.lock().unwrap().clone();
    assert!(
        other_errors.is_empty(),
        "emits failed other than by a lost answer: {:?}",
        first(&other_errors)
    );
    assert!(log.len() >= events, "fewer events in the log than emitted");
    assert!(
        outcome.duplicates.is_empty(),
        "effects that happened more than once: {:?}",
        first(&outcome.duplicates)
    );
    assert!(
        outcome.missing.is_empty(),
        "effects that never happened: {:?}",
        first(&outcome.missing)
    );
    assert!(
        outcome.strangers.is_empty(),
        "effects of events that are not in the log: {:?}",
        first(&outcome.strangers)
    );
    assert!(
        lost_emits.is_empty(),
        "acknowledged but not in the log: {lost_emits:?}"
    );
    assert!(broken.is_empty(), "broken chains: {broken:?}");
    assert_eq!(reports.len(), tenants, "verify saw every tenant");
}

/// The monkey: SIGKILLs a worker every 200-600 ms and the owner every
/// 1.5-4 s, restarting each at once, until `chaos` turns false. Answers
/// the children that exited by themselves (none should).
fn start_monkey(
    procs: Arc<Mutex<Processes>>,
    chaos: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<String>> {
    std::thread::spawn(move || {
        let owner_every = || Duration::from_millis(fastrand::u64(1500..4000));
        let mut next_owner_kill = Instant::now() + owner_every();
        let mut unexpected = Vec::new();
        while chaos.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(fastrand::u64(200..600)));
            let mut p = procs.lock().unwrap();
            unexpected.extend(p.keep_alive());
            if Instant::now() >= next_owner_kill {
                p.kill_owner();
                next_owner_kill = Instant::now() + owner_every();
            } else {
                let i = fastrand::usize(..p.workers.len());
                p.kill_worker(i);
            }
        }
        unexpected
    })
}

/// Emits `events` over `tenants` at `rate` per second in all: one task per
/// tenant at an even pace, each emit retried until it is answered.
async fn emit_all(
    engine: &Engine<RemoteStore>,
    events: usize,
    tenants: usize,
    rate: usize,
) -> Arc<Emits> {
    let emits = Arc::new(Emits::default());
    let pause = Duration::from_secs_f64(tenants as f64 / rate as f64);
    let mut tasks = Vec::new();
    for t in 0..tenants {
        let engine = engine.clone();
        let emits = emits.clone();
        let count = events / tenants + usize::from(t < events % tenants);
        tasks.push(tokio::spawn(async move {
            let tenant = format!("tenant-{t:03}");
            let ctx = Context::new(&tenant, "payments").unwrap();
            let mut pace = tokio::time::interval(pause);
            pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            for n in 0..count {
                pace.tick().await;
                let payload =
                    serde_json::json!({"order_id": format!("{tenant}-{n}"), "amount": n + 1});
                emit_until_answered(&engine, &ctx, payload, &emits).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    emits
}

/// One emit, tried again after every failure until it is answered. A
/// failure that is neither "no answer" nor contention is recorded: the
/// test fails on it.
async fn emit_until_answered(
    engine: &Engine<RemoteStore>,
    ctx: &Context,
    payload: serde_json::Value,
    emits: &Emits,
) {
    loop {
        match engine
            .emit(ctx, "PAYMENT_COMPLETED", payload.clone(), Vec::new())
            .await
        {
            Ok(e) => {
                let mut acknowledged = emits.acknowledged.lock().unwrap();
                acknowledged.push((ctx.tenant().to_owned(), e.envelope.id, e.envelope.seq));
                return;
            }
            Err(e) => {
                match &e {
                    EmitError::Store(s) if s.is_retryable() => {}
                    EmitError::Contention { .. } => {}
                    _ => emits.other_errors.lock().unwrap().push(e.to_string()),
                }
                emits.retries.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Waits, every process up, until the queue is empty and every effect of
/// every event in the log is there, or the time is up. The counts are
/// cheap; the full comparison runs once they add up.
async fn settle(
    procs: &Mutex<Processes>,
    store: &RemoteStore,
    queues: &RemoteQueues,
    tenant_names: &[String],
    events: usize,
) -> Outcome {
    let settle_limit = Duration::from_secs(120) + Duration::from_millis(50 * events as u64);
    let settle_start = Instant::now();
    loop {
        procs.lock().unwrap().keep_alive();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let timed_out = settle_start.elapsed() > settle_limit;
        let counted = counts(store, tenant_names).await;
        let queued = queue_depth(queues).await;
        let complete = matches!(counted, Some((expected, done)) if done >= expected);
        if !(timed_out || complete && queued == Some(0)) {
            continue;
        }
        if let Some(outcome) = progress(store, tenant_names).await
            && (outcome.missing.is_empty() || timed_out)
        {
            break outcome;
        }
    }
}

fn first<T: std::fmt::Debug>(v: &[T]) -> &[T] {
    &v[..v.len().min(10)]
}

/// One event of a log.
struct Logged {
    id: String,
}

/// Every tenant's log, over the wire.
async fn read_logs(store: &RemoteStore, tenants: &[String]) -> Result<Vec<Logged>, StoreError> {
    let mut out = Vec::new();
    for tenant in tenants {
        let mut start: Option<Item> = None;
        loop {
            let page = store
                .query(QueryInput {
                    table_name: EVENTS_TABLE.into(),
                    key_condition_expression: Some("pk = :pk".into()),
                    expression_attribute_values: Some(Values::from([(
                        ":pk".to_owned(),
                        AttributeValue::S(layout::event_pk(tenant)),
                    )])),
                    exclusive_start_key: start.take(),
                    ..QueryInput::default()
                })
                .await?;
            for item in page.items.unwrap_or_default() {
                let (envelope, _hash) = layout::envelope_of(&item)
                    .map_err(|e| StoreError::Storage(format!("malformed event row: {e:?}")))?;
                out.push(Logged { id: envelope.id });
            }
            match page.last_evaluated_key {
                Some(k) => start = Some(k),
                None => break,
            }
        }
    }
    Ok(out)
}

/// Every effect count by `<event_id>:<subscription>`, over the wire.
async fn read_effects(store: &RemoteStore) -> Result<BTreeMap<String, u64>, StoreError> {
    let mut out = BTreeMap::new();
    let mut start: Option<Item> = None;
    loop {
        let page = store
            .scan(ScanInput {
                table_name: EFFECTS.into(),
                exclusive_start_key: start.take(),
                ..ScanInput::default()
            })
            .await?;
        for item in page.items.unwrap_or_default() {
            let (Some(AttributeValue::S(pk)), Some(AttributeValue::N(n))) =
                (item.get("pk"), item.get("n"))
            else {
                continue;
            };
            out.insert(pk.clone(), n.to_string().parse().unwrap_or(u64::MAX));
        }
        match page.last_evaluated_key {
            Some(k) => start = Some(k),
            None => return Ok(out),
        }
    }
}

/// Messages visible or in flight in the events queue, if it answered.
async fn queue_depth(queues: &RemoteQueues) -> Option<u64> {
    let names = vec![
        "ApproximateNumberOfMessages".to_owned(),
        "ApproximateNumberOfMessagesNotVisible".to_owned(),
        "ApproximateNumberOfMessagesDelayed".to_owned(),
    ];
    let attrs = queues.queue_attributes(QUEUE, &names).await.ok()?;
    attrs
        .values()
        .map(|v| v.parse::<u64>().ok())
        .sum::<Option<u64>>()
}

/// (effects expected, effects recorded) from the heads' seqs and a COUNT
/// scan, if the owner answered.
async fn counts(store: &RemoteStore, tenants: &[String]) -> Option<(usize, usize)> {
    let mut events = 0;
    for tenant in tenants {
        let head = store
            .get_item(GetItemInput {
                table_name: EVENTS_TABLE.into(),
                key: layout::key(layout::head_pk(tenant), layout::HEAD_SK),
                ..GetItemInput::default()
            })
            .await
            .ok()?;
        if let Some(AttributeValue::N(n)) = head.item.as_ref().and_then(|i| i.get("last_seq")) {
            events += n.to_string().parse::<usize>().ok()?;
        }
    }
    let mut effects = 0;
    let mut start: Option<Item> = None;
    loop {
        let page = store
            .scan(ScanInput {
                table_name: EFFECTS.into(),
                select: Some(Select::Count),
                exclusive_start_key: start.take(),
                ..ScanInput::default()
            })
            .await
            .ok()?;
        effects += page.count as usize;
        match page.last_evaluated_key {
            Some(k) => start = Some(k),
            None => return Some((events * SUBSCRIPTIONS.len(), effects)),
        }
    }
}

/// The log and the effects now, if the owner answered.
async fn progress(store: &RemoteStore, tenants: &[String]) -> Option<Outcome> {
    let log = read_logs(store, tenants).await.ok()?;
    let effects = read_effects(store).await.ok()?;
    Some(Outcome::of(&log, &effects))
}

/// The effects against the log.
struct Outcome {
    /// `<event_id>:<subscription>` with a count above one.
    duplicates: Vec<(String, u64)>,
    /// `<event_id>:<subscription>` of a logged event without an effect.
    missing: Vec<String>,
    /// Effects whose event is not in the log.
    strangers: Vec<String>,
}

impl Outcome {
    fn of(log: &[Logged], effects: &BTreeMap<String, u64>) -> Outcome {
        let mut expected = HashSet::new();
        let mut missing = Vec::new();
        for e in log {
            for s in SUBSCRIPTIONS {
                let key = format!("{}:{s}", e.id);
                if !effects.contains_key(&key) {
                    missing.push(key.clone());
                }
                expected.insert(key);
            }
        }
        Outcome {
            duplicates: effects
                .iter()
                .filter(|(_, n)| **n != 1)
                .map(|(k, n)| (k.clone(), *n))
                .collect(),
            missing,
            strangers: effects
                .keys()
                .filter(|k| !expected.contains(*k))
                .cloned()
                .collect(),
        }
    }
}
