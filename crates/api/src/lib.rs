//! Postbox's HTTP API: what applications and operators call.
//!
//! Every path is under `/v1`. Requests carry `Authorization: Bearer <token>`;
//! a tenant token acts for its tenant only and an admin token for operator
//! endpoints ([`auth`]). Only the health probes answer without a token.
//!
//! Code map:
//! - [`auth`]: API tokens (stored hashed) and the caller a request acts as;
//! - [`events`]: emit with extra writes and an idempotency key, the log,
//!   following the log with server-sent events;
//! - [`ops`]: dead letters and replay, queue redrive, the catalog and its
//!   contract report, the reconciliation report, health, metrics;
//! - [`webhook`]: durable subscriptions delivered to an HTTP URL, signed;
//! - [`pull`]: durable subscriptions whose consumers ask for deliveries;
//! - [`error`]: the JSON error body every failure has;
//! - [`openapi`]: the OpenAPI 3.1 document, kept equal to [`ROUTES`] by a test.
//! - [`pipes`]: the relay's pipes and `pipe test` over HTTP (admin);
//! - [`console`]: the operator console's page, served at `/console`.
//!
//! Architecture Invariant: the tenant of every read and write comes from the
//! token, never from the request; another tenant's data answers 404, as if it
//! did not exist.

pub mod auth;
mod body;
pub mod console;
pub mod error;
pub mod events;
mod log;
pub mod openapi;
pub mod ops;
pub mod pipes;
pub mod pull;
pub mod webhook;

use std::sync::Arc;

use axum::Router;
use axum::routing::{any, delete, get, post};
use postbox_engine::Engine;
use postbox_queue::{QueueClient, Queues};
use postbox_store::ItemStore;
use postbox_store::embedded::EmbeddedStore;
use postbox_worker::Inbox;

pub use auth::{Caller, Tokens};
pub use error::ApiError;

/// Every route of the API, as `(method, path)`; the OpenAPI document lists
/// exactly these (a test keeps them equal).
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/v1/health"),
    ("get", "/v1/ready"),
    ("get", "/v1/openapi.json"),
    ("post", "/v1/events"),
    ("get", "/v1/events"),
    ("get", "/v1/events/stream"),
    ("get", "/v1/events/{seq}"),
    ("get", "/v1/dead-letters"),
    ("post", "/v1/dead-letters/replay"),
    ("post", "/v1/queues/redrive"),
    ("get", "/v1/catalog"),
    ("get", "/v1/pipes"),
    ("post", "/v1/pipes/{name}/test"),
    ("get", "/v1/reconciliation"),
    ("get", "/v1/metrics"),
    ("post", "/v1/tokens"),
    ("get", "/v1/tokens"),
    ("delete", "/v1/tokens/{id}"),
    ("post", "/v1/tokens/{id}/rotate"),
    ("post", "/v1/subscriptions/{name}/receive"),
    ("post", "/v1/subscriptions/{name}/complete"),
    ("post", "/v1/subscriptions/{name}/fail"),
    ("post", "/v1/subscriptions/{name}/extend"),
];

/// Names and limits the API works with.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    /// The engine's events table.
    pub events_table: String,
    /// The workers' inbox table.
    pub inbox_table: String,
    /// The events FIFO queue the workers read.
    pub queue: String,
    /// The table holding API tokens (hashed).
    pub tokens_table: String,
    /// The table holding emit idempotency keys.
    pub requests_table: String,
    /// How long an emit's Idempotency-Key is remembered.
    pub idempotency_ttl_secs: u64,
    /// Largest request body, bytes.
    pub max_body_bytes: usize,
    /// Longest wait for a whole request body (a client sending it a byte
    /// at a time is answered 408 after it).
    pub body_timeout: std::time::Duration,
    /// Most extra writes one emit may carry.
    pub max_writes: usize,
    /// Tables of the application that only its own code writes (the
    /// examples' jobs and job keys): an emit's extra writes may not target
    /// them. Postbox's own tables (every name starting with `postbox_`, and
    /// the tables above) are refused anyway.
    pub reserved_tables: Vec<String>,
    /// Log streams (`/v1/events/stream`) one token may hold open at once;
    /// one more is answered 429.
    pub max_streams_per_token: usize,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            events_table: postbox_topology::EVENTS_TABLE.into(),
            inbox_table: postbox_worker::inbox::DEFAULT_INBOX_TABLE.into(),
            queue: postbox_topology::EVENTS_QUEUE.into(),
            tokens_table: postbox_topology::TOKENS_TABLE.into(),
            requests_table: postbox_topology::REQUESTS_TABLE.into(),
            idempotency_ttl_secs: 24 * 3600,
            max_body_bytes: 1024 * 1024,
            body_timeout: std::time::Duration::from_secs(30),
            max_writes: 25,
            reserved_tables: Vec::new(),
            max_streams_per_token: 8,
        }
    }
}

/// Extra Prometheus lines from the parts the API does not own (relay,
/// workers), written in the text exposition format.
pub type MetricsSource = Arc<dyn Fn(&mut String) + Send + Sync>;

/// Extra fields of the reconciliation report from the parts the API does
/// not own (the relay's lag), as a JSON object merged into the report.
pub type ReportSource = Arc<dyn Fn() -> serde_json::Map<String, serde_json::Value> + Send + Sync>;

/// What the rest of the process adds to the API's metrics and report.
#[derive(Clone, Default)]
pub struct Sources {
    /// Extra Prometheus lines.
    pub metrics: Option<MetricsSource>,
    /// Extra reconciliation fields (admin view).
    pub report: Option<ReportSource>,
    /// The workers' pull hub, when the catalog has pull subscriptions and
    /// this process runs workers.
    pub pull: Option<postbox_worker::PullHub>,
    /// The relay's pipes, when this process runs the relay.
    pub pipes: Option<Arc<postbox_relay::RelayConfig>>,
}

/// Everything a request handler reaches, on any backend: the store `S`
/// (the embedded store by default, DynamoDB on AWS) and the queues `Q`.
pub struct Api<S = EmbeddedStore, Q = Queues> {
    pub(crate) inner: Arc<Inner<S, Q>>,
}

impl<S, Q> Clone for Api<S, Q> {
    fn clone(&self) -> Self {
        Api {
            inner: self.inner.clone(),
        }
    }
}

pub(crate) struct Inner<S, Q> {
    pub(crate) store: Arc<S>,
    pub(crate) engine: Arc<Engine<S>>,
    pub(crate) queues: Q,
    pub(crate) inbox: Inbox<S>,
    pub(crate) tokens: Tokens<S>,
    pub(crate) config: ApiConfig,
    pub(crate) sources: Sources,
    pub(crate) requests: ops::RequestCounters,
    /// Each tenant's emit budget, when the catalog limits emits.
    pub(crate) emit_buckets:
        std::sync::Mutex<std::collections::HashMap<String, (f64, std::time::Instant)>>,
    /// Open log streams (`/v1/events/stream`) by caller.
    pub(crate) streams:
        std::sync::Mutex<std::collections::HashMap<(Option<String>, String), usize>>,
}

impl<S: ItemStore, Q: QueueClient> Api<S, Q> {
    /// The API over a running engine and its queues. Creates the tokens and
    /// requests tables if they are missing.
    pub async fn new(
        engine: Arc<Engine<S>>,
        queues: Q,
        config: ApiConfig,
        sources: Sources,
    ) -> Result<Api<S, Q>, ApiError> {
        let store = engine.store().clone();
        let tokens = Tokens::new(store.clone(), config.tokens_table.clone());
        tokens.ensure_table().await?;
        events::ensure_requests_table(store.as_ref(), &config.requests_table).await?;
        let inbox = Inbox::new(store.clone(), config.inbox_table.clone(), 0);
        // Dead letters and the report read the inbox even before a worker ran.
        inbox.create_table().await?;
        Ok(Api {
            inner: Arc::new(Inner {
                store,
                engine,
                queues,
                inbox,
                tokens,
                config,
                sources,
                requests: ops::RequestCounters::default(),
                streams: Default::default(),
                emit_buckets: Default::default(),
            }),
        })
    }
}

impl Api<EmbeddedStore, Queues> {
    /// [`Api::new`] on the embedded backend, with the store's and the
    /// queues' own metrics (`ops::embedded_metrics`) before those of
    /// `sources`.
    pub async fn embedded(
        engine: Arc<Engine<EmbeddedStore>>,
        queues: Queues,
        config: ApiConfig,
        mut sources: Sources,
    ) -> Result<Self, ApiError> {
        let own = ops::embedded_metrics(engine.store().as_ref().clone(), queues.clone());
        let rest = sources.metrics.take();
        sources.metrics = Some(Arc::new(move |out: &mut String| {
            own(out);
            if let Some(rest) = &rest {
                rest(out);
            }
        }));
        Api::new(engine, queues, config, sources).await
    }
}

impl<S: ItemStore, Q: QueueClient> Api<S, Q> {
    /// The token store, to create tokens at startup or from tests.
    pub fn tokens(&self) -> &Tokens<S> {
        &self.inner.tokens
    }

    /// Puts an application's routes behind the API's tokens: every request
    /// needs a tenant token, and reaches the routes with `X-Tenant-Id` set
    /// to the token's tenant (a client-sent `X-Tenant-Id` is replaced), so
    /// an application scoped by that header inherits tenant isolation.
    pub fn tenant_scoped(&self, routes: Router) -> Router {
        routes.layer(axum::middleware::from_fn_with_state(
            self.clone(),
            auth::scope_to_tenant::<S, Q>,
        ))
    }

    /// `GET /metrics` with the page of `/v1/metrics`, without a token: for
    /// a listener only a local scraper reaches (`serve --metrics-listen`).
    pub fn metrics_router(&self) -> Router {
        let api = self.clone();
        Router::new().route(
            "/metrics",
            get(move || {
                let api = api.clone();
                async move { ops::metrics_response(ops::render_metrics(&api)) }
            }),
        )
    }

    /// The router serving every route of [`ROUTES`].
    pub fn router(&self) -> Router {
        Router::new()
            .route("/v1/health", get(ops::health))
            .route("/v1/ready", get(ops::ready::<S, Q>))
            .route("/v1/openapi.json", get(openapi::serve))
            .route(
                "/v1/events",
                post(events::emit::<S, Q>).get(log::read::<S, Q>),
            )
            .route("/v1/events/stream", get(log::follow::<S, Q>))
            .route("/v1/events/{seq}", get(log::one::<S, Q>))
            .route("/v1/dead-letters", get(ops::dead_letters::<S, Q>))
            .route("/v1/dead-letters/replay", post(ops::replay::<S, Q>))
            .route("/v1/queues/redrive", post(ops::redrive::<S, Q>))
            .route("/v1/catalog", get(ops::catalog::<S, Q>))
            .route("/v1/pipes", get(pipes::list::<S, Q>))
            .route("/v1/pipes/{name}/test", post(pipes::test::<S, Q>))
            .route("/v1/reconciliation", get(ops::reconciliation::<S, Q>))
            .route("/v1/metrics", get(ops::metrics::<S, Q>))
            .route(
                "/v1/tokens",
                post(auth::create_token::<S, Q>).get(auth::list_tokens::<S, Q>),
            )
            .route("/v1/tokens/{id}", delete(auth::revoke_token::<S, Q>))
            .route("/v1/tokens/{id}/rotate", post(auth::rotate_token::<S, Q>))
            .route(
                "/v1/subscriptions/{name}/receive",
                post(pull::receive::<S, Q>),
            )
            .route(
                "/v1/subscriptions/{name}/complete",
                post(pull::complete::<S, Q>),
            )
            .route("/v1/subscriptions/{name}/fail", post(pull::fail::<S, Q>))
            .route(
                "/v1/subscriptions/{name}/extend",
                post(pull::extend::<S, Q>),
            )
            .route("/v1/{*rest}", any(error::not_found))
            .merge(console::router())
            .layer(axum::middleware::from_fn_with_state(
                self.clone(),
                ops::count_requests::<S, Q>,
            ))
            .with_state(self.clone())
    }
}
