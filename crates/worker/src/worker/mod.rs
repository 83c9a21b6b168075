//! The durable worker loop.
//!
//! One batch: receive up to 10 messages from the events FIFO queue; for each
//! message, in order:
//! 1. parse the body (the event row's raw NewImage) back into an envelope,
//!    once; a body that is no event is POISON: recorded and deleted;
//! 2. for each matching DURABLE subscription: wait for its predecessor
//!    (per-subscription seq order within the tenant), claim, run the handler
//!    in the event's tenant context while renewing the lease and the
//!    message's visibility, then complete (with the handler's writes) or
//!    fail;
//! 3. delete the message only when every matching subscription is COMPLETED
//!    or DEAD. Otherwise the message stays (visibility = the retry backoff,
//!    or a short wait for ordering) and the rest of its group in this batch
//!    is put back untouched: a tenant's later events never overtake it,
//!    other tenants carry on.
//!
//! Batched: the steps above cost about three commits per message when
//! taken one at a time, so a group's messages are claimed at once — every
//! (event, subscription) as its own conditional write, issued together so
//! the embedded store commits them in one group commit and each succeeds or
//! fails alone — then run event by event in order, the subscriptions of one
//! event concurrently (their completions share a commit too), and the
//! batch's deletes and visibility changes go in one call each. The handler
//! of a tenant's next event still runs only after the previous event's
//! completion committed, so it sees its predecessor's writes. The first
//! event not settled stops its group as above, and the claims taken for the
//! later events are released unrun (their lease ends now; attempts
//! untouched). A claim waiting for its turn behind a long handler is not
//! renewed; should its lease run out and another worker take it, the
//! completion is refused by the token fence.
//!
//! A group is claimed at once only when every body is an event and its
//! seqs are contiguous (so an earlier event of the group is the predecessor
//! of the next). A group with a poison body, a gap or a replayed duplicate,
//! and every group when [`WorkerOptions::batch`] is off, is taken message
//! by message, each message a batch of one: the same steps, with no claim
//! taken ahead for the group's later messages.
//!
//! Order within a tenant: the FIFO queue already delivers a tenant's events
//! in order; the check here also covers a source that reorders (DynamoDB
//! Streams orders per item only) and replays. An event runs for a
//! subscription only when the subscription's previous matching event in the
//! log is COMPLETED or DEAD; a predecessor with no claim at all (its message
//! has not arrived) is read from the log and delivered first. A per-worker
//! cache remembers, per (tenant, subscription), the seq up to which this is
//! known, so the common case costs no read.
//!
//! Known limit: a predecessor whose claim row expired (older than the claim
//! retention) would be taken for missing and delivered again; the retention
//! check at startup keeps claims longer than any message can live, and a
//! predecessor that old is normally in the cache or settled long ago.
//!
//! Where each part lives:
//! - `receive`: the loop, a batch split by group, the settlements applied;
//! - `message`: a received message, its body parsed once;
//! - `group`: a batch by group; which of a group's messages go together;
//! - `process`: a group's messages run: claim, handler, outcome;
//! - `ordering`: predecessor checks and the per-worker order cache;
//! - `settle`: claims completed or failed, messages deleted or held;
//! - `options` and `stats`: the options, the startup check, the counters.

mod group;
mod message;
mod options;
mod ordering;
mod process;
mod receive;
mod settle;
mod stats;

use std::collections::HashMap;
use std::sync::Arc;

use postbox_engine::catalog::{Catalog, Lane, Retry};
use postbox_engine::glob::Glob;
use postbox_queue::QueueClient;
use postbox_store::ItemStore;

use crate::error::{WorkerError, WorkerResult};
use crate::handler::Handler;
use crate::inbox::Inbox;

pub(crate) use options::dead_letter_queue;
pub use options::{CompletionHook, WorkerOptions, check_retention};
use ordering::OrderCache;
pub use ordering::read_event;
pub use receive::BatchReport;
use stats::Counters;
pub use stats::WorkerStats;

/// One DURABLE subscription bound to its handler.
struct Bound {
    name: String,
    glob: Glob,
    retry: Retry,
    handler: Handler,
}

/// The durable worker, over any store `S` and any queue client `Q` (the
/// embedded queues, or an SQS endpoint over the wire). Cheap to clone;
/// clones share state.
pub struct Worker<S, Q = postbox_queue::Queues> {
    inner: Arc<Inner<S, Q>>,
}

impl<S, Q> Clone for Worker<S, Q> {
    fn clone(&self) -> Self {
        Worker {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<S, Q> {
    store: Arc<S>,
    queues: Q,
    inbox: Inbox<S>,
    options: WorkerOptions,
    subscriptions: Vec<Bound>,
    order: OrderCache,
    counters: Counters,
    /// "Delivered to nobody", logged once a minute per event type.
    nobody: postbox_engine::throttle::Throttle,
}

impl<S: ItemStore, Q: QueueClient> Worker<S, Q> {
    /// A worker for the catalog's DURABLE subscriptions, with `handlers` by
    /// the catalog's handler reference. Refuses to start when a DURABLE
    /// subscription's handler is missing, or when claim rows would not
    /// outlive the queue's messages; creates the inbox table.
    pub async fn new(
        store: Arc<S>,
        queues: Q,
        catalog: &Catalog,
        handlers: HashMap<String, Handler>,
        options: WorkerOptions,
    ) -> WorkerResult<Worker<S, Q>> {
        let mut subscriptions = Vec::new();
        for s in catalog
            .subscriptions
            .iter()
            .filter(|s| s.lane == Lane::Durable)
        {
            let handler = handlers.get(&s.handler).cloned().ok_or_else(|| {
                WorkerError::Config(format!(
                    "DURABLE subscription {:?} names handler {:?}, which is not registered with the worker",
                    s.name, s.handler
                ))
            })?;
            subscriptions.push(Bound {
                name: s.name.clone(),
                glob: Glob::new(&s.glob),
                retry: s.retry.clone(),
                handler,
            });
        }
        let (queue_retention, dlq_retention) =
            options::queue_retentions(&queues, &options.queue).await?;
        check_retention(options.claim_retention, queue_retention, dlq_retention)?;
        let inbox = Inbox::new(
            store.clone(),
            options.inbox_table.clone(),
            options.claim_retention.as_millis() as u64,
        );
        inbox.create_table().await?;
        Ok(Worker {
            inner: Arc::new(Inner {
                store,
                queues,
                inbox,
                options,
                subscriptions,
                order: OrderCache::default(),
                counters: Counters::default(),
                nobody: Default::default(),
            }),
        })
    }

    /// The inbox this worker writes.
    pub fn inbox(&self) -> &Inbox<S> {
        &self.inner.inbox
    }

    /// The counters so far.
    pub fn stats(&self) -> WorkerStats {
        self.inner.counters.snapshot()
    }

    fn now(&self) -> u64 {
        self.inner.options.clock.now_ms()
    }

    fn lease_seconds(&self) -> i64 {
        self.inner.options.lease.as_millis().div_ceil(1000) as i64
    }
}
