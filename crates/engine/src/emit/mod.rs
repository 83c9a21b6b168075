//! The engine and `emit`: an event, the caller's writes and the INLINE
//! handlers' writes in ONE TransactWriteItems with the tenant's head update.
//!
//! Two commit paths share the planner (`plan`):
//! - group commit (default): each tenant has a batcher task (`batcher`)
//!   that coalesces concurrent emits into transactions of up to 16 events
//!   (`max_batch_events`), 100 actions and 4 MB, and keeps a few of them in
//!   flight at once;
//! - direct (`group_commit: false`): every emit reads the head and commits
//!   its own transaction, retrying on contention. This is the textbook
//!   outbox, kept as the benchmark's baseline and for stores where one
//!   process should not hold a tenant's head.
//!
//! In both, contention (the head moved under us: another process appended)
//! is retried with jittered exponential backoff, `max_tries` times in all,
//! then reported as [`EmitError::Contention`].
//!
//! Architecture Invariant: an event row is committed in the same
//! transaction as the writes that caused it; nothing is written when emit
//! returns an error.
//!
//! Known limit: the embedded store's answers are definitive, but on
//! DynamoDB a transaction can time out with its outcome unknown. The AWS
//! SDK gives each one a ClientRequestToken (an idempotency token in the
//! service's model) and keeps it across its retries, so a repeat of a lost
//! answer is applied at most once (`crates/aws/tests/service_faults.rs`
//! guards that); when every retry fails, emit
//! reports the store error although the event may have committed (the
//! caller's retry with the same Idempotency-Key then finds it).

mod batcher;
mod plan;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use postbox_item::MAX_ITEM_SIZE;
use postbox_store::api::GetItemInput;
use postbox_store::{ItemStore, StoreError};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::catalog::Catalog;
use crate::chain;
use crate::contract::{self, Violation};
use crate::envelope::{Context, Envelope, format_timestamp, new_event_id, now_ms};
use crate::json::{self, JsonError};
use crate::lanes::{
    Counters, HandlerError, Handlers, InlineHandler, LocalPool, Route, Stats, bump,
};
use crate::layout;
use crate::schema::Schema;
use crate::verify::{self, Progress, TenantReport, VerifyError, VerifyOptions};
use crate::writes::Write;

pub(crate) use plan::{EventRequest, Expanded, Head};

/// DynamoDB's limit on actions in one TransactWriteItems.
pub const MAX_ACTIONS: usize = 100;
/// DynamoDB's limit on the size of one TransactWriteItems.
pub const MAX_TRANSACTION_BYTES: usize = 4 * 1024 * 1024;

/// Fault point after an emit committed, before it returns (see
/// `postbox_store::faults`).
pub const AFTER_COMMIT_BEFORE_RETURN: &str = "emit::after_commit_before_return";

/// The name errors give the writes of [`Engine::emit_recorded`]'s `record`
/// (where an INLINE handler's writes give its subscription).
pub const RECORD: &str = "(the caller's record)";

/// How an engine runs.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// The events table (created at start if missing).
    pub events_table: String,
    /// Tries of a contended commit before [`EmitError::Contention`] (5).
    pub max_tries: u32,
    /// First backoff after contention; doubled per try, jittered +-50%.
    pub backoff_base: Duration,
    /// Longest backoff.
    pub backoff_max: Duration,
    /// Coalesce a tenant's concurrent emits (true) or commit each alone.
    pub group_commit: bool,
    /// Most events in one group-commit transaction (also bounded by 100
    /// actions and 4 MB); 16 by default. Small transactions keep several of
    /// a tenant's in flight at once, so the store's writer runs one while
    /// the commit log syncs another, instead of idling through each sync:
    /// one tenant's emit went from 24-36k to 31-37k events/s in six
    /// alternating rounds against 99, and from 34-45k to 52-58k in three
    /// rounds of a faster window, with less CPU per event
    /// (`POSTBOX_BENCH_BATCH`, `benches/emit.rs`). With `pipeline_depth`
    /// 1 (DynamoDB) nothing overlaps; raise it there.
    pub max_batch_events: usize,
    /// Group-commit transactions a tenant may have in flight at once (8).
    /// The embedded store applies them in order behind one fsync; on
    /// DynamoDB, concurrent transactions on the same head item are refused
    /// with TransactionConflict, so use 1 there.
    pub pipeline_depth: usize,
    /// LOCAL jobs queued before new ones are dropped.
    pub local_queue: usize,
    /// LOCAL handlers running at once.
    pub local_concurrency: usize,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            events_table: postbox_topology::EVENTS_TABLE.to_owned(),
            max_tries: 5,
            backoff_base: Duration::from_millis(2),
            backoff_max: Duration::from_millis(200),
            group_commit: true,
            max_batch_events: 16,
            pipeline_depth: 8,
            local_queue: 10_000,
            local_concurrency: 16,
        }
    }
}

/// Why the engine refused to start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The catalog breaks the reachability contract.
    #[error("the engine refuses to start: the catalog breaks the reachability contract:\n{}", .0.iter().map(|v| format!("  - {v}")).collect::<Vec<_>>().join("\n"))]
    Contract(Vec<Violation>),
    /// The events table could not be checked or created.
    #[error("the engine cannot prepare the events table: {0}")]
    Store(#[from] StoreError),
}

/// Why an emit wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    /// The type is not declared in the catalog.
    #[error("event type {event_type:?} is not declared in the catalog{}; declare it under [[event_types]]", .suggestion.as_ref().map(|s| format!(" (did you mean {s:?}?)")).unwrap_or_default())]
    UnknownType {
        event_type: String,
        suggestion: Option<String>,
    },
    /// The payload is not a JSON object.
    #[error("the payload of a {event_type} event must be a JSON object, not {found}")]
    PayloadNotObject {
        event_type: String,
        found: &'static str,
    },
    /// The payload is not I-JSON (e.g. a number a double cannot carry).
    #[error(transparent)]
    Payload(#[from] JsonError),
    /// The payload breaks the type's schema.
    #[error("the payload breaks the schema of {event_type}: {message}")]
    SchemaViolation { event_type: String, message: String },
    /// A write targets the events table, which only the engine writes.
    #[error(
        "write {index} ({write}) targets the events table; event rows are written only by emit"
    )]
    WriteOnEventsTable { index: usize, write: String },
    /// An INLINE handler failed; the emit is aborted.
    #[error("INLINE subscription {subscription:?} aborted the emit: {message}")]
    InlineAborted {
        subscription: String,
        message: String,
    },
    /// More actions than one transaction allows.
    #[error(
        "the emit needs {actions} actions (event, head and writes) but a transaction allows {MAX_ACTIONS}"
    )]
    TooManyWrites { actions: usize },
    /// The event row is over DynamoDB's item size.
    #[error(
        "the event row would be {bytes} bytes, over the {MAX_ITEM_SIZE}-byte item limit; make the payload smaller"
    )]
    EventTooLarge { bytes: usize },
    /// The transaction would be over 4 MB.
    #[error(
        "the emit's transaction would be about {bytes} bytes, over the {MAX_TRANSACTION_BYTES}-byte limit"
    )]
    TransactionTooLarge { bytes: usize },
    /// One of the caller's own conditions failed.
    #[error("write {index} of the emit ({write}{}) failed its condition; nothing was committed", .subscription.as_ref().map(|s| format!(", added by INLINE subscription {s:?}")).unwrap_or_default())]
    ConditionalCheckFailed {
        index: usize,
        write: String,
        subscription: Option<String>,
    },
    /// One of the caller's writes was refused for another reason.
    #[error("write {index} of the emit ({write}) was refused: {code} {message}")]
    WriteRefused {
        index: usize,
        write: String,
        code: String,
        message: String,
    },
    /// The tenant's head kept moving under us.
    #[error(
        "the event log of tenant {tenant:?} is contended: the commit was retried {tries} times; try again later"
    )]
    Contention { tenant: String, tries: u32 },
    /// The store failed or refused the request.
    #[error("the store refused the emit: {0}")]
    Store(#[from] StoreError),
    /// The engine is shutting down.
    #[error("the engine is shutting down")]
    Closed,
}

/// A committed event.
#[derive(Clone, Debug, PartialEq)]
pub struct Emitted {
    /// The envelope as committed (with its seq).
    pub envelope: Envelope,
    /// Its chain hash, hex.
    pub hash: String,
}

/// Registers handlers and options, checks the contract, starts the engine.
pub struct EngineBuilder<S> {
    store: Arc<S>,
    catalog: Catalog,
    options: EngineOptions,
    handlers: Handlers,
}

impl<S: ItemStore> EngineBuilder<S> {
    /// Sets the options.
    pub fn options(mut self, options: EngineOptions) -> Self {
        self.options = options;
        self
    }

    /// Registers an INLINE handler under `reference` (the catalog's
    /// `handler`). It runs when its event is planned into a transaction,
    /// sees the envelope with its seq, and returns writes for that
    /// transaction; it may run more than once (see [`crate::lanes`]).
    pub fn inline<F>(mut self, reference: impl Into<String>, f: F) -> Self
    where
        F: Fn(&Envelope) -> Result<Vec<Write>, HandlerError> + Send + Sync + 'static,
    {
        self.handlers.inline.insert(reference.into(), Arc::new(f));
        self
    }

    /// Registers a LOCAL handler under `reference`.
    pub fn local<F, Fut>(mut self, reference: impl Into<String>, f: F) -> Self
    where
        F: Fn(Envelope) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
    {
        self.handlers
            .local
            .insert(reference.into(), Arc::new(move |e| Box::pin(f(e))));
        self
    }

    /// Checks the reachability contract (refusing to start on any
    /// violation, naming the subscription and the reason), makes sure the
    /// events table exists and starts the LOCAL pool. Needs a tokio runtime.
    pub async fn build(self) -> Result<Engine<S>, StartError> {
        let mut violations = contract::check(&self.catalog);
        violations.extend(contract::check_handlers(&self.catalog, |lane, h| {
            self.handlers.has(lane, h)
        }));
        if !violations.is_empty() {
            return Err(StartError::Contract(violations));
        }
        let table = &self.options.events_table;
        match self.store.key_schema(table).await {
            Ok(_) => {}
            Err(StoreError::ResourceNotFound(_)) => match self
                .store
                .create_table(layout::create_events_table(table))
                .await
            {
                Ok(_) | Err(StoreError::ResourceInUse(_)) => {}
                Err(e) => return Err(e.into()),
            },
            Err(e) => return Err(e.into()),
        }
        let schemas = self
            .catalog
            .event_types
            .iter()
            .filter_map(|t| {
                t.schema.clone().map(|s| {
                    (
                        t.name.clone(),
                        Schema::new(s).expect("checked when the catalog loaded"),
                    )
                })
            })
            .collect();
        let counters = Arc::new(Counters::default());
        let local = LocalPool::start(
            self.options.local_queue,
            self.options.local_concurrency,
            counters.clone(),
        );
        let routes = crate::lanes::routes(&self.catalog, &self.handlers)
            .into_iter()
            .map(|(k, r)| (k, Arc::new(r)))
            .collect();
        Ok(Engine::new(Arc::new(Inner {
            store: self.store,
            catalog: self.catalog,
            schemas,
            routes,
            options: self.options,
            counters,
            local,
            batchers: Mutex::new(HashMap::new()),
            nobody: Default::default(),
        })))
    }
}

pub(crate) struct Inner<S> {
    pub store: Arc<S>,
    pub catalog: Catalog,
    schemas: HashMap<String, Schema>,
    routes: HashMap<String, Arc<Route>>,
    pub options: EngineOptions,
    pub counters: Arc<Counters>,
    local: LocalPool,
    /// Per-tenant batchers: (generation, queue).
    pub batchers: Mutex<HashMap<String, (u64, mpsc::UnboundedSender<batcher::Pending>)>>,
    /// "Delivered to nobody", logged once a minute per event type.
    pub nobody: crate::throttle::Throttle,
}

/// The event engine over an item store. Cheap to clone.
pub struct Engine<S> {
    /// Shared by the engine's clones, not by its batchers (which hold the
    /// `Inner` within): see [`Handles`].
    inner: Arc<Handles<S>>,
}

/// When the engine's last clone goes, the batchers' queues close: each
/// commits what it holds and ends, letting go of the store at once rather
/// than after idling [`batcher::IDLE`] (a server waits for its store to
/// close before it exits).
struct Handles<S>(Arc<Inner<S>>);

impl<S> std::ops::Deref for Handles<S> {
    type Target = Arc<Inner<S>>;
    fn deref(&self) -> &Arc<Inner<S>> {
        &self.0
    }
}

impl<S> Drop for Handles<S> {
    fn drop(&mut self) {
        self.0
            .batchers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

impl<S> Engine<S> {
    fn new(inner: Arc<Inner<S>>) -> Self {
        Engine {
            inner: Arc::new(Handles(inner)),
        }
    }
}

impl<S> Clone for Engine<S> {
    fn clone(&self) -> Self {
        Engine {
            inner: self.inner.clone(),
        }
    }
}

impl<S> std::fmt::Debug for Engine<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl<S: ItemStore> Engine<S> {
    /// Starts building an engine over `store` with `catalog`.
    pub fn builder(store: Arc<S>, catalog: Catalog) -> EngineBuilder<S> {
        EngineBuilder {
            store,
            catalog,
            options: EngineOptions::default(),
            handlers: Handlers::default(),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<S> {
        &self.inner.store
    }

    /// The catalog.
    pub fn catalog(&self) -> &Catalog {
        &self.inner.catalog
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        self.inner.counters.snapshot()
    }

    /// The seq of `tenant`'s last event; 0 for a tenant with no log.
    pub async fn head_seq(&self, tenant: &str) -> Result<u64, StoreError> {
        Ok(read_head(
            self.inner.store.as_ref(),
            &self.inner.options.events_table,
            tenant,
        )
        .await?
        .seq)
    }

    /// Every tenant with a log (a scan of one item per partition: for
    /// operators' tools and error messages, not for a request's path).
    pub async fn tenants(&self) -> Result<Vec<String>, StoreError> {
        crate::verify::tenants(self.inner.store.as_ref(), &self.inner.options.events_table).await
    }

    /// Emits an event whose payload is I-JSON text (numbers checked against
    /// their literal text; see [`json`]).
    pub async fn emit_json(
        &self,
        ctx: &Context,
        event_type: &str,
        payload: &str,
        writes: Vec<Write>,
    ) -> Result<Emitted, EmitError> {
        match json::parse(payload) {
            Ok(v) => self.emit(ctx, event_type, v, writes).await,
            Err(e) => {
                bump(&self.inner.counters.rejected);
                Err(e.into())
            }
        }
    }

    /// Emits `event_type` with `payload` and the caller's `writes` as one
    /// transaction. On error nothing was written.
    pub async fn emit(
        &self,
        ctx: &Context,
        event_type: &str,
        payload: Value,
        writes: Vec<Write>,
    ) -> Result<Emitted, EmitError> {
        self.emit_recorded(ctx, event_type, payload, writes, None)
            .await
    }

    /// [`Engine::emit`], with `record` called on the envelope once its seq
    /// is known, as an INLINE handler is (again each time the event is
    /// planned), its writes committed in the same transaction after the
    /// caller's `writes` and numbered after them in errors. It is how a
    /// caller stores where its event landed, so that the event can be found
    /// again even if the answer is lost: the HTTP API's idempotency rows
    /// name the event's seq this way.
    pub async fn emit_recorded(
        &self,
        ctx: &Context,
        event_type: &str,
        payload: Value,
        writes: Vec<Write>,
        record: Option<InlineHandler>,
    ) -> Result<Emitted, EmitError> {
        let inner = &self.inner;
        let prepared = self
            .prepare(ctx, event_type, payload, writes)
            .map(|(mut req, route)| {
                if let Some(record) = record {
                    req.inline.push((RECORD.to_owned(), record));
                }
                (req, route)
            });
        let outcome = match prepared {
            Ok((req, route)) => {
                let committed = if inner.options.group_commit {
                    batcher::submit(&self.inner, req).await
                } else {
                    self.commit_direct(req).await
                };
                committed.map(|(link, env)| (link, env, route))
            }
            Err(e) => Err(e),
        };
        let ((seq, hash), mut env, route) = match outcome {
            Ok(committed) => committed,
            Err(e) => {
                let c = &inner.counters;
                match e {
                    EmitError::InlineAborted { .. } => bump(&c.inline_aborts),
                    EmitError::ConditionalCheckFailed { .. } => bump(&c.condition_failures),
                    EmitError::UnknownType { .. }
                    | EmitError::PayloadNotObject { .. }
                    | EmitError::Payload(_)
                    | EmitError::SchemaViolation { .. }
                    | EmitError::WriteOnEventsTable { .. }
                    | EmitError::TooManyWrites { .. }
                    | EmitError::EventTooLarge { .. }
                    | EmitError::TransactionTooLarge { .. } => bump(&c.rejected),
                    _ => {}
                }
                return Err(e);
            }
        };
        env.seq = seq;
        bump(&inner.counters.emitted);
        if !route.delivered {
            bump(&inner.counters.undelivered);
            if let Some(held_back) = inner
                .nobody
                .admit(&env.event_type, std::time::Instant::now())
            {
                tracing::warn!(event = %env.id, event_type = %env.event_type, tenant = %env.tenant, seq, held_back, "event delivered to nobody: it matches no subscription on any lane (logged once a minute per type; postbox_emit_undelivered_total counts them all)");
            }
        }
        inner.local.dispatch(&route, &env, &inner.counters);
        // Killed here, the event and the caller's writes are committed but
        // the caller never hears so; stopped here, it hears an error, as
        // when an answer is lost on the way back.
        if postbox_store::faults::hit(AFTER_COMMIT_BEFORE_RETURN) {
            return Err(EmitError::Store(StoreError::Unavailable(format!(
                "fault point {AFTER_COMMIT_BEFORE_RETURN}: the answer was lost after the commit"
            ))));
        }
        Ok(Emitted {
            envelope: env,
            hash: chain::to_hex(&hash),
        })
    }

    /// Checks input and builds the request (INLINE handlers run when the
    /// event is planned, see [`EventRequest::expand`]).
    fn prepare(
        &self,
        ctx: &Context,
        event_type: &str,
        payload: Value,
        writes: Vec<Write>,
    ) -> Result<(EventRequest, Arc<Route>), EmitError> {
        let inner = &self.inner;
        let Some(route) = inner.routes.get(event_type) else {
            let names: Vec<&str> = inner
                .catalog
                .event_types
                .iter()
                .map(|t| t.name.as_str())
                .collect();
            return Err(EmitError::UnknownType {
                event_type: event_type.to_owned(),
                suggestion: contract::did_you_mean(event_type, &names),
            });
        };
        if !payload.is_object() {
            let found = match payload {
                Value::Null => "null",
                Value::Bool(_) => "a boolean",
                Value::Number(_) => "a number",
                Value::String(_) => "a string",
                Value::Array(_) => "an array",
                Value::Object(_) => "an object",
            };
            return Err(EmitError::PayloadNotObject {
                event_type: event_type.to_owned(),
                found,
            });
        }
        json::check_value(&payload)?;
        if let Some(schema) = inner.schemas.get(event_type) {
            schema
                .validate(&payload)
                .map_err(|message| EmitError::SchemaViolation {
                    event_type: event_type.to_owned(),
                    message,
                })?;
        }
        let now = now_ms();
        let env = Envelope {
            id: new_event_id(now),
            event_type: event_type.to_owned(),
            tenant: ctx.tenant().to_owned(),
            seq: 0,
            correlation_id: ctx.correlation_id().to_owned(),
            causation_id: ctx.causation_id().map(str::to_owned),
            actor: ctx.actor().to_owned(),
            occurred_at: format_timestamp(now),
            payload,
            trace: ctx.trace().map(str::to_owned),
        };
        for (index, w) in writes.iter().enumerate() {
            if w.table() == inner.options.events_table {
                return Err(EmitError::WriteOnEventsTable {
                    index,
                    write: w.describe(),
                });
            }
        }
        let actions = 2 + writes.len();
        if actions > MAX_ACTIONS {
            return Err(EmitError::TooManyWrites { actions });
        }
        let payload_text = crate::canonical::to_canonical_string(&env.payload);
        let event_bytes = layout::event_item_size(&chain::EnvelopeFields {
            actor: &env.actor,
            causation_id: env.causation_id.as_deref(),
            correlation_id: &env.correlation_id,
            id: &env.id,
            occurred_at: &env.occurred_at,
            payload: &payload_text,
            seq: u64::MAX / 2,
            tenant: &env.tenant,
            event_type: &env.event_type,
        }) + ctx
            .trace()
            .map_or(0, |t| postbox_trace::ATTRIBUTE.len() + t.len());
        if event_bytes > MAX_ITEM_SIZE {
            return Err(EmitError::EventTooLarge { bytes: event_bytes });
        }
        // The head row's share is small and fixed; count it generously.
        let bytes = event_bytes + writes.iter().map(Write::size).sum::<usize>() + 256;
        if bytes > MAX_TRANSACTION_BYTES {
            return Err(EmitError::TransactionTooLarge { bytes });
        }
        Ok((
            EventRequest {
                env,
                payload_text,
                writes,
                bytes,
                inline: route.inline.clone(),
            },
            route.clone(),
        ))
    }

    /// The direct path: read the head, commit one transaction, retry on
    /// contention.
    async fn commit_direct(&self, mut req: EventRequest) -> Result<batcher::Committed, EmitError> {
        let inner = &self.inner;
        let table = &inner.options.events_table;
        let mut tries = 0;
        loop {
            let head = read_head(&*inner.store, table, &req.env.tenant).await?;
            let expanded = req.expand(head.seq + 1, table)?;
            let p = plan::plan(
                table,
                &req.env.tenant,
                &head,
                std::iter::once((&req, &expanded)),
            );
            let owners = p.owners;
            match inner.store.transact_write_items(p.input).await {
                Ok(()) => {
                    bump(&inner.counters.transactions);
                    return Ok((p.links[0], req.env));
                }
                Err(e) => match plan::classify(e, &owners) {
                    plan::Failure::Contention => {
                        tries += 1;
                        if tries >= inner.options.max_tries {
                            return Err(EmitError::Contention {
                                tenant: req.env.tenant.clone(),
                                tries,
                            });
                        }
                        bump(&inner.counters.contention_retries);
                        tokio::time::sleep(backoff(&inner.options, tries)).await;
                    }
                    plan::Failure::Own(list) => {
                        return Err(own_error(&req, &expanded, list[0].1, &list[0].2));
                    }
                    plan::Failure::Invalid(e) | plan::Failure::Fatal(e) => {
                        return Err(EmitError::Store(e));
                    }
                },
            }
        }
    }

    /// Verifies one tenant's chain from its checkpoint (or from genesis
    /// with `options.full`), calling `progress` after each page.
    pub async fn verify_tenant(
        &self,
        tenant: &str,
        options: &VerifyOptions,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<TenantReport, VerifyError> {
        verify::verify_tenant(
            &self.inner.store,
            &self.inner.options.events_table,
            tenant,
            options,
            progress,
        )
        .await
    }

    /// Verifies every tenant's chain.
    pub async fn verify_all(
        &self,
        options: &VerifyOptions,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<Vec<TenantReport>, VerifyError> {
        verify::verify_all(
            &self.inner.store,
            &self.inner.options.events_table,
            options,
            progress,
        )
        .await
    }
}

/// The error for a caller's write whose action was refused.
pub(crate) fn own_error(
    req: &EventRequest,
    expanded: &Expanded,
    w: usize,
    reason: &postbox_store::api::CancellationReason,
) -> EmitError {
    let (write, subscription) = match req.write(expanded, w) {
        Some((write, by)) => (write.describe(), by.map(str::to_owned)),
        None => (String::new(), None),
    };
    if reason.code == "ConditionalCheckFailed" {
        EmitError::ConditionalCheckFailed {
            index: w,
            write,
            subscription,
        }
    } else {
        EmitError::WriteRefused {
            index: w,
            write,
            code: reason.code.clone(),
            message: reason.message.clone().unwrap_or_default(),
        }
    }
}

/// Jittered exponential backoff before try `tries + 1`.
pub(crate) fn backoff(options: &EngineOptions, tries: u32) -> Duration {
    let base = options
        .backoff_base
        .saturating_mul(1 << tries.min(16))
        .min(options.backoff_max);
    base.mul_f64(0.5 + fastrand::f64())
}

/// Reads a tenant's head row (strongly consistent).
pub(crate) async fn read_head<S: ItemStore>(
    store: &S,
    table: &str,
    tenant: &str,
) -> Result<Head, StoreError> {
    let out = store
        .get_item(GetItemInput {
            table_name: table.to_owned(),
            key: layout::key(layout::head_pk(tenant), layout::HEAD_SK),
            consistent_read: Some(true),
            ..Default::default()
        })
        .await?;
    let Some(item) = out.item else {
        return Ok(Head::EMPTY);
    };
    let seq = item
        .get("last_seq")
        .and_then(|v| v.as_n())
        .and_then(|n| n.to_i64())
        .and_then(|i| u64::try_from(i).ok())
        .ok_or_else(|| {
            StoreError::Storage(format!(
                "the head row of tenant {tenant} has no valid last_seq"
            ))
        })?;
    let hash = item
        .get("last_hash")
        .and_then(|v| v.as_s())
        .and_then(chain::from_hex)
        .ok_or_else(|| {
            StoreError::Storage(format!(
                "the head row of tenant {tenant} has no valid last_hash"
            ))
        })?;
    Ok(Head {
        seq,
        hash,
        exists: true,
    })
}
