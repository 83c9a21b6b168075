//! One Postbox node: everything `postbox serve` runs in one process on the
//! embedded store — the AWS wire endpoints, the engine, the relay (the
//! default events pipe, the row-change pipes of the BEST_EFFORT lane, plus
//! any configured pipes), the durable workers, the row-change consumers, and
//! the HTTP API — and its clean shutdown.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use postbox_api::{Api, ApiConfig, Sources};
use postbox_engine::catalog::{ROW_OPS, ROW_PREFIX};
use postbox_engine::glob::Glob;
use postbox_engine::{Catalog, Engine, EngineBuilder, Lane};
use postbox_queue::attributes::redrive_policy_text;
use postbox_queue::{Queues, QueuesOptions, ShiftedClock};
use postbox_relay::config::{
    DEFAULT_EVENTS_QUEUE, DEFAULT_ROW_CHANGES_QUEUE, default_row_change_pipes,
};
use postbox_relay::{PipeStats, Relay, RelayConfig};
use postbox_store::embedded::{EmbeddedOptions, EmbeddedStore};
use postbox_worker::row_change::{RowChangeConsumer, RowChangeOptions, RowHandler};
use postbox_worker::{Handler, Worker, WorkerOptions};
use tokio::sync::watch;

/// The events table the engine writes.
pub const EVENTS_TABLE: &str = postbox_topology::EVENTS_TABLE;
/// Durable worker loops `postbox serve` runs unless told otherwise.
pub const DEFAULT_WORKERS: usize = 4;
/// The dead-letter queue of the events queue.
pub const EVENTS_DLQ: &str = postbox_topology::EVENTS_DLQ;
/// Receives of one message before the events queue moves it to its DLQ.
/// Above every subscription's attempts, so the claims decide first.
pub const MAX_RECEIVE_COUNT: u32 = 20;

/// The handlers and applications a node runs, by the catalog's handler
/// references, on the store `S` and queues `Q` of its backend (the
/// embedded store's by default; `node_aws` runs them on DynamoDB and SQS).
pub struct Handlers<S = EmbeddedStore, Q = Queues> {
    /// DURABLE handlers, run by the workers.
    pub durable: HashMap<String, Handler>,
    /// BEST_EFFORT handlers, run by the row-change consumers.
    pub best_effort: HashMap<String, RowHandler>,
    /// Registers INLINE and LOCAL handlers with the engine.
    pub engine: Box<dyn FnOnce(EngineBuilder<S>) -> EngineBuilder<S> + Send>,
    /// Routes of applications served next to the API (the examples); they
    /// need a tenant token and see its tenant in `X-Tenant-Id`.
    pub routes: Option<RoutesFn<S>>,
    /// Extra relay pipes (TOML), for applications' own tables.
    pub pipes: Option<String>,
    /// Runs once the store and queues are open, before the engine and the
    /// relay start (applications create their tables and queues here; on
    /// AWS, `postbox init` makes them instead).
    pub setup: Option<Box<dyn FnOnce(S, Q) -> SetupFuture + Send>>,
    /// Applications' own background tasks (a job runner), stopped with the node.
    pub background: Option<BackgroundFn<S, Q>>,
    /// Applications' tables that only their code writes: no emit may carry
    /// a write to them (Postbox's own `postbox_*` tables are refused anyway).
    pub reserved_tables: Vec<String>,
}

/// What [`Handlers::routes`] holds: builds the applications' routes.
pub type RoutesFn<S = EmbeddedStore> = Box<dyn FnOnce(Arc<Engine<S>>) -> Router + Send>;

/// What [`Handlers::background`] holds: starts a task that ends when the
/// stop signal turns true.
pub type BackgroundFn<S = EmbeddedStore, Q = Queues> =
    Box<dyn FnOnce(S, Q, watch::Receiver<bool>) -> tokio::task::JoinHandle<()> + Send>;

/// What [`Handlers::setup`] returns.
pub type SetupFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>;

impl<S, Q> Handlers<S, Q> {
    /// No handlers: only a catalog without subscriptions that need code starts.
    pub fn none() -> Handlers<S, Q> {
        Handlers {
            durable: HashMap::new(),
            best_effort: HashMap::new(),
            engine: Box::new(|b| b),
            routes: None,
            pipes: None,
            setup: None,
            background: None,
            reserved_tables: Vec::new(),
        }
    }
}

/// How to start a node.
pub struct NodeOptions {
    /// Directory of the store's file.
    pub data: PathBuf,
    /// The catalog.
    pub catalog: Catalog,
    /// The handlers its subscriptions name.
    pub handlers: Handlers,
    /// A relay config file's text with more pipes, if any.
    pub pipes: Option<RelayConfig>,
    /// Worker tasks (0: none in this process; `postbox worker` processes
    /// or another node do the work).
    pub workers: usize,
    /// Bytes of the store file's pages kept in memory
    /// (`EmbeddedOptions::cache_bytes`).
    pub cache_bytes: usize,
    /// A clock tests may move forward.
    pub test_clock: Option<Arc<ShiftedClock>>,
    /// How the wire endpoints authenticate requests.
    pub wire_auth: postbox_server::WireAuth,
    /// How often every chain is verified from genesis in the background
    /// (None: never).
    pub verify_every: Option<Duration>,
    /// How long a worker's claim holds before another may take it over.
    pub lease: Duration,
    /// Open a store whose commit log is damaged with what survives
    /// (`EmbeddedOptions::recover_truncated`), instead of refusing.
    pub recover_truncated: bool,
    /// Called as each delivery's completion commits (`postbox bench`
    /// times its events with it).
    pub on_completed: Option<postbox_worker::CompletionHook>,
    /// More lines for the metrics page (the process's own telemetry),
    /// after the node's.
    pub metrics: Option<postbox_api::MetricsSource>,
}

impl NodeOptions {
    /// A node in `data` as `postbox serve` starts one by default:
    /// [`DEFAULT_WORKERS`] worker loops, the default page cache, signed
    /// wire requests, 30-second leases, no background verification.
    pub fn new(data: impl Into<PathBuf>, catalog: Catalog, handlers: Handlers) -> NodeOptions {
        NodeOptions {
            data: data.into(),
            catalog,
            handlers,
            pipes: None,
            workers: DEFAULT_WORKERS,
            cache_bytes: postbox_store::embedded::DEFAULT_CACHE_BYTES,
            test_clock: None,
            wire_auth: postbox_server::WireAuth::sigv4(),
            verify_every: None,
            lease: Duration::from_secs(30),
            recover_truncated: false,
            on_completed: None,
            metrics: None,
        }
    }
}

/// A running node.
pub struct Node {
    /// The store's file.
    pub file: PathBuf,
    /// The HTTP API's router (and the applications' routes).
    pub api_router: Router,
    /// `GET /metrics` without a token (`serve --metrics-listen`).
    pub metrics_router: Router,
    /// The AWS wire protocols' router.
    pub wire_router: Router,
    /// Where the admin token was written on first start, if it was.
    pub admin_token_file: PathBuf,
    /// Whether this start created the admin token.
    pub created_admin_token: bool,
    /// Where the admin access key (for the wire protocols) is.
    pub admin_access_key_file: PathBuf,
    /// Whether this start created the admin access key.
    pub created_admin_access_key: bool,
    /// The store.
    pub store: EmbeddedStore,
    /// Its queues.
    pub queues: Queues,
    /// The engine the API emits with.
    pub engine: Arc<Engine<EmbeddedStore>>,
    /// The durable workers, if the catalog has DURABLE subscriptions.
    worker: Option<Worker<EmbeddedStore>>,
    stop_rx: watch::Receiver<bool>,
    relay: Arc<Relay>,
    stats_task: tokio::task::JoinHandle<()>,
    workers: Vec<tokio::task::JoinHandle<()>>,
    stop: watch::Sender<bool>,
    /// Given the stop too, so parked pull deliveries let the workers go.
    pull: Option<postbox_worker::PullHub>,
}

/// The store file's name in a node's data directory.
pub const STORE_FILE: &str = "postbox.redb";

impl Node {
    /// Opens the store and starts every part.
    pub async fn start(options: NodeOptions) -> Result<Node, String> {
        let data = &options.data;
        std::fs::create_dir_all(data)
            .map_err(|e| format!("cannot create the data directory {}: {e}", data.display()))?;
        let file = data.join(STORE_FILE);
        let mut store_options = EmbeddedOptions {
            cache_bytes: options.cache_bytes,
            recover_truncated: options.recover_truncated,
            // Idempotency-Keys are random: their rows go in arrival order.
            arrival_tables: vec![postbox_topology::REQUESTS_TABLE.to_owned()],
            ..EmbeddedOptions::default()
        }
        .keeping(postbox_queue::tables());
        if let Some(clock) = &options.test_clock {
            store_options.clock = clock.clone();
        }
        let store = EmbeddedStore::open(&file, store_options.clone())
            .map_err(|e| format!("cannot open the store {}: {e}", file.display()))?;
        let queues = Queues::open(
            store.clone(),
            QueuesOptions {
                clock: store_options.clock.clone(),
                ..QueuesOptions::default()
            },
        )
        .await
        .map_err(|e| format!("cannot open the queues in {}: {e}", file.display()))?;
        create_events_queues(&queues).await?;

        let mut handlers = options.handlers;
        if let Some(setup) = handlers.setup.take() {
            setup(store.clone(), queues.clone()).await?;
        }
        let builder = Engine::builder(Arc::new(store.clone()), options.catalog.clone());
        let engine = Arc::new(
            (handlers.engine)(builder)
                .build()
                .await
                .map_err(|e| e.to_string())?,
        );

        let mut relay_config = crate::pipes::node_relay_config(
            options.pipes,
            handlers.pipes.as_deref(),
            &options.catalog,
        )?;
        let durable = options
            .catalog
            .subscriptions
            .iter()
            .any(|s| s.lane == Lane::Durable);
        let best_effort = options
            .catalog
            .subscriptions
            .iter()
            .any(|s| s.lane == Lane::BestEffort);
        if best_effort {
            for pipe in row_change_pipes(&options.catalog)? {
                if !relay_config.pipes.iter().any(|p| p.name == pipe.name) {
                    relay_config.pipes.push(pipe);
                }
            }
        }
        let pipes = Arc::new(relay_config.clone());
        let relay = crate::pipes::start_relay(store.clone(), queues.clone(), relay_config).await?;

        let (stop, stop_rx) = watch::channel(false);
        let mut workers = Vec::new();
        let mut durable_handlers = crate::durable::durable_handlers(
            &options.catalog,
            &mut || webhook_secret(data),
            "postbox serve",
            true,
            std::mem::take(&mut handlers.durable),
        )?;
        let pull =
            crate::durable::pull_hub(&options.catalog, options.workers, &mut durable_handlers);
        let worker = if durable {
            let worker = Worker::new(
                Arc::new(store.clone()),
                queues.clone(),
                &options.catalog,
                durable_handlers,
                WorkerOptions {
                    clock: store_options.clock.clone(),
                    lease: options.lease,
                    on_completed: options.on_completed.clone(),
                    ..WorkerOptions::default()
                },
            )
            .await
            .map_err(|e| format!("the workers refuse to start: {e}"))?;
            workers.extend(worker_loops(&worker, options.workers, &stop_rx));
            Some(worker)
        } else {
            None
        };

        if best_effort {
            let consumer = RowChangeConsumer::new(
                queues.clone(),
                &options.catalog,
                std::mem::take(&mut handlers.best_effort),
                RowChangeOptions::default(),
            )
            .await
            .map_err(|e| format!("the row-change consumers refuse to start: {e}"))?;
            for _ in 0..options.workers {
                let c = consumer.clone();
                let rx = stop_rx.clone();
                workers.push(tokio::spawn(async move { c.run(rx).await }));
            }
        }

        if let Some(background) = handlers.background.take() {
            workers.push(background(store.clone(), queues.clone(), stop_rx.clone()));
        }
        let relay = Arc::new(relay);
        let relay_stats: Arc<Mutex<Vec<PipeStats>>> = Arc::default();
        let stats_task = {
            let relay_stats = relay_stats.clone();
            let relay = relay.clone();
            let mut rx = stop_rx.clone();
            tokio::spawn(async move {
                loop {
                    if let Ok(s) = relay.stats().await {
                        *relay_stats.lock().expect("relay stats") = s;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = rx.changed() => return,
                    }
                }
            })
        };
        let verified = crate::verifier::State::default();
        if let Some(every) = options.verify_every {
            workers.push(tokio::spawn(crate::verifier::run(
                store.clone(),
                EVENTS_TABLE,
                every,
                verified.clone(),
                stop_rx.clone(),
            )));
        }
        let mut sources = sources(relay_stats, worker.clone(), verified, options.metrics);
        sources.pull = pull.clone();
        sources.pipes = Some(pipes);
        let api = Api::embedded(
            engine.clone(),
            queues.clone(),
            ApiConfig {
                reserved_tables: std::mem::take(&mut handlers.reserved_tables),
                ..ApiConfig::default()
            },
            sources,
        )
        .await
        .map_err(|e| format!("cannot start the API: {}", e.message))?;
        let admin_token_file = data.join("admin-token");
        let created_admin_token = ensure_admin_token(&api, &admin_token_file).await?;
        let admin_access_key_file = data.join(ADMIN_ACCESS_KEY_FILE);
        let created_admin_access_key =
            ensure_admin_access_key(&store, &admin_access_key_file).await?;

        let services = postbox_server::Services {
            store: store.clone(),
            queues: Some(queues.clone()),
            test_clock: options.test_clock,
            auth: options.wire_auth,
        };
        let wire_router = postbox_server::app(services);
        let metrics_router = api.metrics_router();
        let api_router = api_router(&api, handlers.routes, engine.clone());
        Ok(Node {
            file,
            api_router,
            metrics_router,
            wire_router,
            admin_token_file,
            created_admin_token,
            admin_access_key_file,
            created_admin_access_key,
            store,
            queues,
            engine,
            worker,
            stop_rx,
            relay,
            stats_task,
            workers,
            stop,
            pull,
        })
    }

    /// Starts `n` more durable worker loops (none without DURABLE
    /// subscriptions): a node started with `workers: 0` fills its events
    /// queue first, as `postbox bench` does before it times the drain.
    pub fn start_workers(&mut self, n: usize) {
        if let Some(worker) = &self.worker {
            self.workers.extend(worker_loops(worker, n, &self.stop_rx));
        }
    }

    /// Stream records the relay has delivered, over all pipes.
    pub async fn relayed(&self) -> Result<u64, String> {
        Ok(self.relay_stats().await?.iter().map(|p| p.delivered).sum())
    }

    /// Each pipe's counters and lag.
    pub async fn relay_stats(&self) -> Result<Vec<PipeStats>, String> {
        self.relay.stats().await.map_err(|e| e.to_string())
    }

    /// The durable workers' counters, over every loop (zero without
    /// DURABLE subscriptions).
    pub fn worker_stats(&self) -> postbox_worker::WorkerStats {
        self.worker.as_ref().map(Worker::stats).unwrap_or_default()
    }

    /// Stops the workers (each finishes the batch it holds, so in-flight
    /// handlers complete or release their claims) and the relay.
    pub async fn shutdown(self) {
        stop_tasks(&self.stop, self.pull.as_ref(), self.workers).await;
        let _ = self.stats_task.await;
        match Arc::try_unwrap(self.relay) {
            Ok(relay) => relay.shutdown().await,
            Err(_) => {
                tracing::warn!("the relay is still referenced; its tasks stop with the process")
            }
        }
    }
}

/// The API's router with the applications' `routes` (on either backend),
/// which answer tenant tokens only, scoped to their tenant.
pub fn api_router<S, Q>(
    api: &Api<S, Q>,
    routes: Option<RoutesFn<S>>,
    engine: Arc<Engine<S>>,
) -> Router
where
    S: postbox_store::ItemStore,
    Q: postbox_queue::QueueClient,
{
    let router = api.router();
    match routes {
        Some(routes) => router.merge(api.tenant_scoped(routes(engine))),
        None => router,
    }
}

/// Turns `stop` true, lets parked pull deliveries go, and waits for
/// `tasks` (each worker finishes the batch it holds): how a node on either
/// backend begins its shutdown.
pub async fn stop_tasks(
    stop: &watch::Sender<bool>,
    pull: Option<&postbox_worker::PullHub>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
) {
    let _ = stop.send(true);
    if let Some(pull) = pull {
        pull.close();
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// `postbox_relay_records_total`: each pipe's records by outcome, named
/// alike on both backends.
pub fn relay_records<'a>(
    out: &mut String,
    pipes: impl Iterator<Item = (&'a str, Vec<(&'static str, u64)>)>,
) {
    let rows: Vec<_> = pipes
        .flat_map(|(pipe, outcomes)| {
            outcomes
                .into_iter()
                .map(move |(outcome, v)| (vec![("pipe", pipe), ("outcome", outcome)], v))
        })
        .collect();
    postbox_api::ops::samples(
        out,
        "postbox_relay_records_total",
        "counter",
        "Stream records by outcome, per pipe.",
        rows,
    );
}

/// `n` loops of `worker`, on either backend, each ending when `stop`
/// turns true.
pub fn worker_loops<S, Q>(
    worker: &Worker<S, Q>,
    n: usize,
    stop: &watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>>
where
    S: postbox_store::ItemStore + 'static,
    Q: postbox_queue::QueueClient + 'static,
{
    (0..n)
        .map(|_| {
            let (w, rx) = (worker.clone(), stop.clone());
            tokio::spawn(async move { w.run(rx).await })
        })
        .collect()
}

/// The events FIFO queue and its dead-letter queue, created if missing.
pub async fn create_events_queues(queues: &Queues) -> Result<(), String> {
    let fifo = |extra: &[(&str, String)]| {
        let mut a = BTreeMap::from([("FifoQueue".to_owned(), "true".to_owned())]);
        for (k, v) in extra {
            a.insert((*k).to_owned(), v.clone());
        }
        a
    };
    let dlq_retention = ("MessageRetentionPeriod", (14 * 24 * 3600).to_string());
    if queues.queue_exists(EVENTS_DLQ).is_err() {
        queues
            .create_queue(EVENTS_DLQ, fifo(&[dlq_retention]))
            .await
            .map_err(|e| format!("cannot create the queue {EVENTS_DLQ}: {e}"))?;
    }
    if queues.queue_exists(DEFAULT_EVENTS_QUEUE).is_err() {
        let policy = redrive_policy_text(&queues.arn(EVENTS_DLQ), MAX_RECEIVE_COUNT);
        queues
            .create_queue(DEFAULT_EVENTS_QUEUE, fifo(&[("RedrivePolicy", policy)]))
            .await
            .map_err(|e| format!("cannot create the queue {DEFAULT_EVENTS_QUEUE}: {e}"))?;
    }
    Ok(())
}

/// The row-change pipes of the BEST_EFFORT lane: one per table of the
/// catalog's entities, into the standard queue the row-change consumers
/// read. An entity a BEST_EFFORT subscription matches must name its table.
fn row_change_pipes(catalog: &Catalog) -> Result<Vec<postbox_relay::config::PipeSpec>, String> {
    let subscriptions: Vec<_> = catalog
        .subscriptions
        .iter()
        .filter(|s| s.lane == Lane::BestEffort)
        .map(|s| (s, Glob::new(&s.glob)))
        .collect();
    let mut entities = Vec::new();
    for e in &catalog.entities {
        if let Some(table) = &e.table {
            entities.push((e.name.as_str(), table.as_str()));
            continue;
        }
        let matched_by = subscriptions.iter().find(|(_, glob)| {
            ROW_OPS
                .iter()
                .any(|op| glob.matches(&format!("{ROW_PREFIX}{}:{op}", e.name)))
        });
        if let Some((s, _)) = matched_by {
            return Err(format!(
                "entity {:?} names no table, so its row changes cannot be relayed to BEST_EFFORT subscription {:?}; add `table = \"...\"` to the entity",
                e.name, s.name
            ));
        }
    }
    Ok(default_row_change_pipes(
        &entities,
        DEFAULT_ROW_CHANGES_QUEUE,
    ))
}

/// The secret webhook deliveries are signed with: `POSTBOX_WEBHOOK_SECRET`
/// if set, else the one in `<data>/webhook-secret`, created on first use
/// (readable by the owner only) so receivers can be given it once.
pub fn webhook_secret(data: &Path) -> Result<Vec<u8>, String> {
    if let Ok(s) = std::env::var("POSTBOX_WEBHOOK_SECRET")
        && !s.is_empty()
    {
        return Ok(s.into_bytes());
    }
    let path = data.join("webhook-secret");
    if let Ok(s) = std::fs::read_to_string(&path) {
        return Ok(s.trim().as_bytes().to_vec());
    }
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| format!("no random bytes for the webhook secret: {e}"))?;
    // A Standard Webhooks secret, which that specification's libraries take
    // as it is.
    let secret = {
        use base64::Engine;
        format!(
            "whsec_{}",
            base64::engine::general_purpose::STANDARD.encode(bytes)
        )
    };
    write_private(&path, &secret)?;
    Ok(secret.into_bytes())
}

/// Writes `text` and a newline to a new file only its owner can read.
fn write_private(path: &Path, text: &str) -> Result<(), String> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut f = options
        .open(path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    std::io::Write::write_all(&mut f, format!("{text}\n").as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Creates an admin token on first start and writes it to `path` (readable
/// by the owner only); later starts leave it.
pub async fn ensure_admin_token<S: postbox_store::ItemStore, Q: postbox_queue::QueueClient>(
    api: &Api<S, Q>,
    path: &Path,
) -> Result<bool, String> {
    if path.exists() {
        return Ok(false);
    }
    let token = api
        .tokens()
        .create(None, "admin")
        .await
        .map_err(|e| format!("cannot create the admin token: {}", e.message))?;
    write_private(path, &token)?;
    Ok(true)
}

/// The file in the data directory holding the admin access key.
pub const ADMIN_ACCESS_KEY_FILE: &str = "admin-access-key";

/// Creates an admin access key on first start and writes it to `path`
/// (readable by the owner only) as `AWS_ACCESS_KEY_ID=...` and
/// `AWS_SECRET_ACCESS_KEY=...` lines; later starts reuse it. A file whose
/// key the store does not know (a store file replaced under it) is
/// replaced, with a warning.
async fn ensure_admin_access_key(store: &EmbeddedStore, path: &Path) -> Result<bool, String> {
    if let Ok(text) = std::fs::read_to_string(path) {
        let known = match postbox_client::Credentials::parse_file(&text) {
            Some(c) => postbox_server::auth::access_key_exists(store, &c.access_key_id)
                .await
                .map_err(|e| format!("cannot read the access keys: {e}"))?,
            None => false,
        };
        if known {
            return Ok(false);
        }
        tracing::warn!(
            file = %path.display(),
            "the admin access key file names no key of this store; writing a new one"
        );
        std::fs::remove_file(path)
            .map_err(|e| format!("cannot replace {}: {e}", path.display()))?;
    }
    let key = postbox_server::create_access_key(store, None)
        .await
        .map_err(|e| format!("cannot create the admin access key: {e}"))?;
    write_private(
        path,
        &format!(
            "AWS_ACCESS_KEY_ID={}\nAWS_SECRET_ACCESS_KEY={}",
            key.id, key.secret
        ),
    )?;
    Ok(true)
}

/// The relay's and the workers' metrics and report fields.
fn sources(
    relay: Arc<Mutex<Vec<PipeStats>>>,
    worker: Option<Worker<EmbeddedStore>>,
    verified: crate::verifier::State,
    more: Option<postbox_api::MetricsSource>,
) -> Sources {
    let report_relay = relay.clone();
    let report_verified = verified.clone();
    let metrics = move |out: &mut String| {
        use postbox_api::ops::{family, samples};
        let pipes = relay.lock().expect("relay stats").clone();
        family(
            out,
            "postbox_relay_records_behind",
            "gauge",
            "Stream records not yet relayed, per pipe.",
            pipes
                .iter()
                .map(|p| ("pipe", p.pipe.as_str(), p.records_behind)),
        );
        samples(
            out,
            "postbox_relay_oldest_unrelayed_age_seconds",
            "gauge",
            "Age of the oldest unrelayed record, per pipe.",
            pipes.iter().map(|p| {
                let age = p.oldest_unrelayed_age_ms.unwrap_or(0) as f64 / 1000.0;
                (vec![("pipe", p.pipe.as_str())], age)
            }),
        );
        relay_records(
            out,
            pipes.iter().map(|p| {
                let outcomes = [
                    ("read", p.read),
                    ("filtered", p.filtered),
                    ("delivered", p.delivered),
                    ("dead_lettered", p.dead_lettered),
                ];
                (p.pipe.as_str(), outcomes.to_vec())
            }),
        );
        // The worker tasks share one Worker, and so its counters.
        let total = worker.as_ref().map(Worker::stats).unwrap_or_default();
        family(
            out,
            "postbox_worker_total",
            "counter",
            "Worker outcomes.",
            [
                ("received", total.received),
                ("completed", total.completed),
                ("retried", total.retried),
                ("dead", total.dead),
                ("poison", total.poison),
                ("fenced", total.fenced),
                ("delivered_to_nobody", total.delivered_to_nobody),
            ]
            .map(|(outcome, v)| ("outcome", outcome, v)),
        );
        crate::verifier::metrics(&verified.lock().expect("verify state"), out);
        if let Some(more) = &more {
            more(out);
        }
    };
    let report = move || {
        let pipes = report_relay.lock().expect("relay stats").clone();
        let mut fields = serde_json::Map::new();
        let mut reasons = Vec::new();
        let lag: Vec<serde_json::Value> = pipes
            .iter()
            .map(|p| {
                if p.dead_lettered > 0 {
                    reasons.push(serde_json::Value::from(format!(
                        "pipe {}: {} record(s) sent to its dead-letter queue",
                        p.pipe, p.dead_lettered
                    )));
                }
                serde_json::json!({
                    "pipe": p.pipe,
                    "records_behind": p.records_behind,
                    "oldest_unrelayed_age_ms": p.oldest_unrelayed_age_ms,
                })
            })
            .collect();
        fields.insert("relay_lag".into(), lag.into());
        let verified = report_verified.lock().expect("verify state");
        fields.insert(
            "background_verification".into(),
            crate::verifier::report(&verified, &mut reasons),
        );
        fields.insert("reasons".into(), reasons.into());
        fields
    };
    Sources {
        metrics: Some(Arc::new(metrics)),
        report: Some(Arc::new(report)),
        pull: None,
        pipes: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use postbox_store::ItemStore;
    use postbox_store::api::{CreateTableInput, StreamSpecification, StreamViewType};
    use postbox_worker::row_change::row_handler;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const CATALOG: &str = r#"
[[entities]]
name = "CONTACT"
table = "contacts"

[[subscriptions]]
name = "contact-seen"
glob = "row:CONTACT:*"
lane = "BEST_EFFORT"
handler = "contacts::seen"
"#;

    fn options(data: &Path, catalog: &str, handlers: Handlers) -> NodeOptions {
        let catalog = Catalog::from_toml(catalog, "test").unwrap();
        NodeOptions {
            workers: 1,
            ..NodeOptions::new(data, catalog, handlers)
        }
    }

    /// Handlers with `contacts::seen` counting its deliveries, and a setup
    /// that creates the `contacts` table and hands out the store.
    fn counting(seen: Arc<AtomicUsize>, store: Arc<Mutex<Option<EmbeddedStore>>>) -> Handlers {
        let mut handlers = Handlers::none();
        handlers.best_effort.insert(
            "contacts::seen".to_owned(),
            row_handler(move |d| {
                let seen = seen.clone();
                async move {
                    assert_eq!(d.change.row_type, "row:CONTACT:INSERT");
                    seen.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                }
            }),
        );
        handlers.setup = Some(Box::new(move |s: EmbeddedStore, _| {
            Box::pin(async move {
                s.create_table(CreateTableInput {
                    stream_specification: Some(StreamSpecification {
                        stream_enabled: true,
                        stream_view_type: Some(StreamViewType::NewImage),
                    }),
                    ..CreateTableInput::keyed_by("contacts", "pk")
                })
                .await
                .map_err(|e| e.to_string())?;
                *store.lock().unwrap() = Some(s);
                Ok(())
            })
        }));
        handlers
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_idempotency_keys_table_keeps_its_rows_in_arrival_order() {
        let dir = tempfile::tempdir().unwrap();
        let handlers = counting(Arc::default(), Arc::default());
        let node = Node::start(options(dir.path(), CATALOG, handlers))
            .await
            .unwrap();
        let table = postbox_topology::REQUESTS_TABLE;
        for pk in ["c", "a", "b"] {
            let item = postbox_item::item_from_json(&serde_json::json!({"pk": {"S": pk}})).unwrap();
            node.store
                .put_item(postbox_store::api::PutItemInput {
                    table_name: table.into(),
                    item,
                    ..Default::default()
                })
                .await
                .unwrap();
        }
        let out = node
            .store
            .scan(postbox_store::api::ScanInput {
                table_name: table.into(),
                ..Default::default()
            })
            .await
            .unwrap();
        let order: Vec<_> = out
            .items
            .unwrap()
            .iter()
            .map(|i| i.get("pk").cloned().unwrap())
            .collect();
        let s = postbox_item::AttributeValue::s;
        assert_eq!(order, [s("c"), s("a"), s("b")]);
        node.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_row_change_reaches_its_best_effort_handler() {
        let dir = tempfile::tempdir().unwrap();
        let seen = Arc::new(AtomicUsize::new(0));
        let store = Arc::new(Mutex::new(None));
        let node = Node::start(options(
            dir.path(),
            CATALOG,
            counting(seen.clone(), store.clone()),
        ))
        .await
        .unwrap();
        let store = store.lock().unwrap().clone().unwrap();
        let item = postbox_item::item_from_json(
            &serde_json::json!({"pk": {"S": "CONTACT#1"}, "name": {"S": "Ada"}}),
        )
        .unwrap();
        store
            .put_item(postbox_store::api::PutItemInput {
                table_name: "contacts".into(),
                item,
                ..Default::default()
            })
            .await
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while seen.load(Ordering::SeqCst) == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the row change never reached its BEST_EFFORT handler"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        node.shutdown().await;
        assert_eq!(seen.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_best_effort_subscription_without_its_handler_refuses_to_start() {
        let dir = tempfile::tempdir().unwrap();
        let mut handlers = counting(Arc::default(), Arc::default());
        handlers.best_effort.clear();
        let e = Node::start(options(dir.path(), CATALOG, handlers))
            .await
            .err()
            .expect("the node must not start");
        assert!(
            e.contains("row-change consumers refuse to start")
                && e.contains("contact-seen")
                && e.contains("contacts::seen"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn an_entity_without_a_table_cannot_feed_best_effort() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = CATALOG.replace("table = \"contacts\"\n", "");
        let e = Node::start(options(dir.path(), &catalog, Handlers::none()))
            .await
            .err()
            .expect("the node must not start");
        assert!(
            e.contains("\"CONTACT\" names no table") && e.contains("contact-seen"),
            "{e}"
        );
    }
}
