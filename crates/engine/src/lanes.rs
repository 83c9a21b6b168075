//! The in-process lanes: INLINE handlers (inside emit, before commit) and
//! LOCAL handlers (after commit, on a bounded pool), the per-type dispatch
//! table, and the engine's counters.
//!
//! INLINE handlers are synchronous closures. They run when the event is
//! planned into its transaction, so they see the envelope exactly as it
//! will be committed (seq included), and may return writes that join that
//! transaction. An error aborts that emit alone; nothing of it is written
//! and the other events of its batch go on. A retried transaction plans its
//! events again and so runs their handlers again, possibly at another seq:
//! handlers must only compute writes, never act on the world (that is what
//! LOCAL and DURABLE are for). They run on the tenant's batcher, so they
//! must be quick.
//!
//! LOCAL handlers are async. After a commit, each matching handler is
//! queued on a bounded channel (`local_queue` jobs); a dispatcher runs them
//! with at most `local_concurrency` at a time. Emit never waits for them: if
//! the queue is full the job is dropped, logged and counted. Errors and
//! panics are logged and counted, never retried: LOCAL is best effort, and
//! work that must happen belongs on DURABLE.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub(crate) use postbox_stats::bump;
use tokio::sync::{Semaphore, mpsc};

use crate::catalog::{Catalog, Lane};
use crate::envelope::Envelope;
use crate::glob::Glob;
use crate::writes::Write;

/// What a handler returns on failure.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// An INLINE handler: writes to add to the emit's transaction, or an error
/// that aborts it.
pub type InlineHandler = Arc<dyn Fn(&Envelope) -> Result<Vec<Write>, HandlerError> + Send + Sync>;

/// A boxed handler future.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send>>;

/// A LOCAL handler.
pub type LocalHandler = Arc<dyn Fn(Envelope) -> HandlerFuture + Send + Sync>;

postbox_stats::counters! {
    /// A snapshot of the engine's counters.
    pub struct Stats;
    /// The counters of one engine; read them with `Engine::stats`.
    pub(crate) struct Counters {
        /// Events committed.
        emitted,
        /// Transactions committed (fewer than `emitted` under group commit).
        transactions,
        /// Times a transaction was retried because the head row moved.
        contention_retries,
        /// Emits refused before anything was written (bad input, limits).
        rejected,
        /// Emits that failed because one of the caller's own conditions failed.
        condition_failures,
        /// Emits aborted by an INLINE handler.
        inline_aborts,
        /// LOCAL handler runs that succeeded.
        local_ok,
        /// LOCAL handler runs that failed or panicked.
        local_failed,
        /// LOCAL handler runs dropped because the queue was full.
        local_dropped,
        /// Committed events that matched no subscription on any lane.
        undelivered,
    }
}

/// The handlers registered with an engine, by handler reference.
#[derive(Clone, Default)]
pub struct Handlers {
    pub(crate) inline: HashMap<String, InlineHandler>,
    pub(crate) local: HashMap<String, LocalHandler>,
}

impl Handlers {
    pub(crate) fn has(&self, lane: Lane, handler: &str) -> bool {
        match lane {
            Lane::Inline => self.inline.contains_key(handler),
            Lane::Local => self.local.contains_key(handler),
            Lane::Durable | Lane::BestEffort => true,
        }
    }
}

/// What one event type dispatches to, computed once at start.
#[derive(Clone, Default)]
pub(crate) struct Route {
    pub inline: Vec<(String, InlineHandler)>,
    pub local: Vec<(String, LocalHandler)>,
    /// Whether any subscription on any lane matches.
    pub delivered: bool,
}

/// The dispatch table: event type to its route.
pub(crate) fn routes(catalog: &Catalog, handlers: &Handlers) -> HashMap<String, Route> {
    let mut out = HashMap::new();
    for t in &catalog.event_types {
        let mut route = Route::default();
        for s in &catalog.subscriptions {
            if s.lane == Lane::BestEffort || !Glob::new(&s.glob).matches(&t.name) {
                continue;
            }
            route.delivered = true;
            match s.lane {
                Lane::Inline => {
                    if let Some(h) = handlers.inline.get(&s.handler) {
                        route.inline.push((s.name.clone(), h.clone()));
                    }
                }
                Lane::Local => {
                    if let Some(h) = handlers.local.get(&s.handler) {
                        route.local.push((s.name.clone(), h.clone()));
                    }
                }
                _ => {}
            }
        }
        out.insert(t.name.clone(), route);
    }
    out
}

struct LocalJob {
    subscription: String,
    handler: LocalHandler,
    envelope: Envelope,
}

/// The bounded LOCAL pool.
pub(crate) struct LocalPool {
    tx: mpsc::Sender<LocalJob>,
}

impl LocalPool {
    /// Starts the dispatcher on the current tokio runtime.
    pub(crate) fn start(queue: usize, concurrency: usize, counters: Arc<Counters>) -> LocalPool {
        let (tx, mut rx) = mpsc::channel::<LocalJob>(queue.max(1));
        let permits = Arc::new(Semaphore::new(concurrency.max(1)));
        tokio::spawn(async move {
            while let Some(job) = rx.recv().await {
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    return;
                };
                let counters = counters.clone();
                tokio::spawn(async move {
                    let _permit = permit;
                    let LocalJob {
                        subscription,
                        handler,
                        envelope,
                    } = job;
                    let (id, seq) = (envelope.id.clone(), envelope.seq);
                    // A panicking handler must count as a failure, not take
                    // the pool down: run it in its own task and look at the join.
                    let outcome = tokio::spawn(handler(envelope)).await;
                    match outcome {
                        Ok(Ok(())) => bump(&counters.local_ok),
                        Ok(Err(e)) => {
                            bump(&counters.local_failed);
                            tracing::warn!(%subscription, event = %id, seq, error = %e, "LOCAL handler failed (not retried)");
                        }
                        Err(e) => {
                            bump(&counters.local_failed);
                            tracing::warn!(%subscription, event = %id, seq, error = %e, "LOCAL handler panicked (not retried)");
                        }
                    }
                });
            }
        });
        LocalPool { tx }
    }

    /// Queues the LOCAL handlers of a committed event without waiting.
    pub(crate) fn dispatch(&self, route: &Route, envelope: &Envelope, counters: &Counters) {
        for (name, handler) in &route.local {
            let job = LocalJob {
                subscription: name.clone(),
                handler: handler.clone(),
                envelope: envelope.clone(),
            };
            if self.tx.try_send(job).is_err() {
                bump(&counters.local_dropped);
                tracing::warn!(subscription = %name, event = %envelope.id, "LOCAL queue full or closed; handler run dropped");
            }
        }
    }
}
