//! The durable worker loop (SPEC §8).
//!
//! One batch: receive up to 10 messages from the events FIFO queue; for each
//! message, in order:
//! 1. parse the body (the event row's raw NewImage) back into an envelope;
//!    a body that is no event is POISON: recorded and deleted at once;
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
//! Batched (the default, [`WorkerOptions::batch`]): the steps above cost
//! about three commits per message when taken one at a time, so a group's
//! messages are claimed at once — every (event, subscription) as its own
//! conditional write, issued together so the embedded store commits them
//! in one group commit and each succeeds or fails alone — then run event by
//! event in order, the subscriptions of one event concurrently (their
//! completions share a commit too), and the batch's deletes and visibility
//! changes go in one call each. The handler of a tenant's next event still
//! runs only after the previous event's completion committed, so it sees
//! its predecessor's writes. The first event not settled stops its group
//! as above, and the claims taken for the later events are released
//! unrun (their lease ends now; attempts untouched). Groups with a poison
//! body or a gap in their seqs go one by one. A claim waiting for its turn
//! behind a long handler is not renewed; should its lease run out and
//! another worker take it, the completion is refused by the token fence.
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

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use postbox_engine::catalog::{Catalog, Lane, Retry};
use postbox_engine::glob::Glob;
use postbox_engine::{Context, Envelope, layout};
use postbox_item::AttributeValue;
use postbox_queue::core::MAX_HIDDEN_AFTER_RECEIVE_MS;
use postbox_queue::{QueueClient, ReceiveOptions, ReceivedMessage};
use postbox_store::api::{GetItemInput, QueryInput, Values};
use postbox_store::embedded::Clock;
use postbox_store::{ItemStore, StoreError};

use crate::claim::{self, ClaimKey, ClaimRow, ClaimTarget, Decision, FailureKind, Lease, Status};
use crate::error::{WorkerError, WorkerResult};
use crate::faults;
use crate::handler::{Delivery, Handler, HandlerError};
use crate::inbox::{ClaimOutcome, DEFAULT_INBOX_TABLE, Inbox};
use crate::poison;

/// How a worker runs.
#[derive(Clone)]
pub struct WorkerOptions {
    /// This worker's name, recorded as the lease owner.
    pub owner: String,
    /// The events FIFO queue.
    pub queue: String,
    /// The events table (to read predecessors from the log).
    pub events_table: String,
    /// The inbox table.
    pub inbox_table: String,
    /// Lease length; renewed every third of it while a handler runs.
    pub lease: Duration,
    /// How long claim rows live after their last write.
    pub claim_retention: Duration,
    /// Long-poll wait of a receive, seconds (0..=20).
    pub wait_seconds: i64,
    /// Visibility of a message waiting for its predecessor, seconds.
    pub order_wait_seconds: i64,
    /// The source of "now" for leases and timestamps.
    pub clock: Arc<dyn Clock>,
    /// Settle a received batch together (see the module doc): every claim
    /// of a tenant's messages in one round of concurrent writes, each
    /// event's subscriptions completed together, one delete for the batch.
    /// Off: claim, run, complete and delete one (event, subscription) at a
    /// time, which costs about three commits per message.
    pub batch: bool,
    /// Called after each completion committed, with the event and the
    /// subscription (metrics; benchmarks measure latency with it).
    pub on_completed: Option<CompletionHook>,
    /// Batches one [`Worker::run`] loop keeps in flight: above 1 it
    /// receives again as soon as a batch is handed to its own task, so each
    /// receive takes what arrived meanwhile (up to 10) instead of many idle
    /// loops each waking for one message. The FIFO queue never hands one
    /// group to two batches at once. Default 8: a tenant's events complete
    /// one commit after another, so throughput with few subscriptions comes
    /// from many tenants' batches sharing each commit.
    pub batches_in_flight: usize,
}

/// See [`WorkerOptions::on_completed`].
pub type CompletionHook = Arc<dyn Fn(&Envelope, &str) + Send + Sync>;

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            owner: format!("worker-{}-{:08x}", std::process::id(), fastrand::u32(..)),
            queue: "postbox-events.fifo".into(),
            events_table: "postbox_events".into(),
            inbox_table: DEFAULT_INBOX_TABLE.into(),
            lease: Duration::from_secs(30),
            claim_retention: Duration::from_secs(30 * 24 * 3600),
            wait_seconds: 1,
            order_wait_seconds: 1,
            clock: Arc::new(postbox_store::embedded::SystemClock),
            batch: true,
            on_completed: None,
            batches_in_flight: 8,
        }
    }
}

impl std::fmt::Debug for WorkerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerOptions")
            .field("owner", &self.owner)
            .field("queue", &self.queue)
            .field("lease", &self.lease)
            .field("batch", &self.batch)
            .finish_non_exhaustive()
    }
}

/// A worker's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Messages received.
    pub received: u64,
    /// Messages deleted (every matching subscription final).
    pub deleted: u64,
    /// Handler runs whose completion committed.
    pub completed: u64,
    /// Retryable failures (claim FAILED, message kept).
    pub retried: u64,
    /// Claims marked DEAD with a dead letter.
    pub dead: u64,
    /// Poison messages recorded and deleted.
    pub poison: u64,
    /// Completions or transitions refused because the lease was taken over.
    pub fenced: u64,
    /// Deliveries that waited for a predecessor or another worker's lease.
    pub waited: u64,
    /// Predecessors read from the log and delivered ahead of their message.
    pub predecessors_from_log: u64,
    /// Durable events that matched no subscription.
    pub delivered_to_nobody: u64,
    /// Deletes or visibility changes the queue refused (expired receipt
    /// handles); the messages come back and are settled then.
    pub settle_failures: u64,
}

#[derive(Default)]
struct Counters {
    received: AtomicU64,
    deleted: AtomicU64,
    completed: AtomicU64,
    retried: AtomicU64,
    dead: AtomicU64,
    poison: AtomicU64,
    fenced: AtomicU64,
    waited: AtomicU64,
    predecessors_from_log: AtomicU64,
    delivered_to_nobody: AtomicU64,
    settle_failures: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// One DURABLE subscription bound to its handler.
struct Bound {
    name: String,
    glob: Glob,
    retry: Retry,
    handler: Handler,
}

/// What became of one (event, subscription), or of a whole message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    /// COMPLETED or DEAD.
    Settled,
    /// Waiting for a predecessor or another worker's lease.
    Wait,
    /// A retryable failure: come back after this many seconds.
    Retry(i64),
    /// This worker gave up its part (fenced, or a fault point): leave the
    /// message exactly as it is.
    Abandon,
}

/// What the claim step left to do for one (event, subscription).
enum Step {
    /// The caller holds the claim: run the handler.
    Run(Box<ClaimRow>),
    /// Nothing to run: settled already, or waiting.
    Done(Outcome),
}

/// How one group of a batch leaves the queue: messages to delete, and
/// visibility changes for the held ones.
#[derive(Default)]
struct Settlement {
    delete: Vec<Settle>,
    visibility: Vec<(Settle, i64)>,
}

/// What settling a message needs of it, moved out of the message rather
/// than cloned with its body and attributes.
struct Settle {
    message_id: String,
    receipt_handle: String,
}

impl From<ReceivedMessage> for Settle {
    fn from(m: ReceivedMessage) -> Settle {
        Settle {
            message_id: m.message_id,
            receipt_handle: m.receipt_handle,
        }
    }
}

/// What becomes of one message of a batched group.
#[derive(Clone, Copy)]
enum Leave {
    /// Settled: deleted.
    Delete,
    /// Held, or put back: visible again after this many seconds.
    Visible(i64),
    /// Left as it is (its visibility timeout brings it back).
    Untouched,
}

/// What one batch did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchReport {
    /// Messages received.
    pub received: usize,
    /// Messages deleted.
    pub deleted: usize,
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
    /// (tenant, subscription) -> seq up to which every matching event is
    /// known COMPLETED or DEAD.
    settled_upto: Mutex<HashMap<(String, String), u64>>,
    counters: Counters,
}

/// The longest a message can come back after its first send: the queue's
/// retention, its dead-letter queue's retention (a redrive moves it back)
/// and the 5-minute deduplication window. Claims must outlive it.
pub fn check_retention(
    claim_retention: Duration,
    queue_retention: Duration,
    dlq_retention: Duration,
) -> WorkerResult<()> {
    let dedup = Duration::from_secs(300);
    let needed = queue_retention + dlq_retention + dedup;
    if claim_retention < needed {
        return Err(WorkerError::Config(format!(
            "claim rows live {}s but a message can come back for {}s (queue retention {}s + DLQ retention {}s + dedup window {}s); \
             raise the claim retention to at least {}s or shorten the queues' retention",
            claim_retention.as_secs(),
            needed.as_secs(),
            queue_retention.as_secs(),
            dlq_retention.as_secs(),
            dedup.as_secs(),
            needed.as_secs()
        )));
    }
    Ok(())
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
        let (queue_retention, dlq_retention) = queue_retentions(&queues, &options.queue).await?;
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
                settled_upto: Mutex::new(HashMap::new()),
                counters: Counters::default(),
            }),
        })
    }

    /// The inbox this worker writes.
    pub fn inbox(&self) -> &Inbox<S> {
        &self.inner.inbox
    }

    /// The counters so far.
    pub fn stats(&self) -> WorkerStats {
        let c = &self.inner.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        WorkerStats {
            received: g(&c.received),
            deleted: g(&c.deleted),
            completed: g(&c.completed),
            retried: g(&c.retried),
            dead: g(&c.dead),
            poison: g(&c.poison),
            fenced: g(&c.fenced),
            waited: g(&c.waited),
            predecessors_from_log: g(&c.predecessors_from_log),
            delivered_to_nobody: g(&c.delivered_to_nobody),
            settle_failures: g(&c.settle_failures),
        }
    }

    /// Runs batches until `stop` turns true, up to
    /// [`WorkerOptions::batches_in_flight`] at once. A failed batch is
    /// logged and the loop goes on (after a pause if the receive failed):
    /// its messages stay in the queue and come back after their visibility
    /// timeout, so nothing is lost by going on.
    pub async fn run(&self, mut stop: tokio::sync::watch::Receiver<bool>) {
        let in_flight = self.inner.options.batches_in_flight.max(1);
        let permits = Arc::new(tokio::sync::Semaphore::new(in_flight));
        while !*stop.borrow() {
            let permit = tokio::select! {
                p = permits.clone().acquire_owned() => p.expect("the semaphore is never closed"),
                _ = stop.changed() => continue,
            };
            let received = tokio::select! {
                r = self.receive() => r,
                _ = stop.changed() => continue,
            };
            match received {
                Err(e) => {
                    tracing::error!(error = %e, "worker receive failed; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                // A short poll (wait_seconds = 0) on an empty queue returns
                // without awaiting; looping on it would hold a runtime
                // thread and starve the tasks that hold messages.
                Ok(messages) if messages.is_empty() => {
                    tokio::time::sleep(Duration::from_millis(10)).await
                }
                Ok(messages) if in_flight == 1 => {
                    tokio::select! {
                        r = self.process_batch(messages) => self.log_batch(r),
                        _ = stop.changed() => {}
                    }
                }
                Ok(messages) => {
                    let w = self.clone();
                    tokio::spawn(async move {
                        w.log_batch(w.process_batch(messages).await);
                        drop(permit);
                    });
                }
            }
        }
        // Let the batches in flight finish.
        let _ = permits.acquire_many(in_flight as u32).await;
    }

    fn log_batch(&self, result: WorkerResult<BatchReport>) {
        if let Err(e) = result {
            tracing::error!(error = %e, "worker batch failed; its messages come back after their visibility timeout");
        }
    }

    /// Receives up to 10 messages, hidden for the lease.
    async fn receive(&self) -> WorkerResult<Vec<ReceivedMessage>> {
        let o = &self.inner.options;
        let options = ReceiveOptions {
            max_messages: Some(10),
            visibility_timeout: Some(self.lease_seconds()),
            wait_time_seconds: Some(o.wait_seconds),
            // Same process as the store (a client over the wire ignores
            // it): a crash that loses the receive takes this worker too,
            // and the claim that follows is logged after it.
            answer_before_sync: true,
            ..Default::default()
        };
        Ok(self.inner.queues.receive(&o.queue, options).await?)
    }

    /// Receives one batch (up to 10 messages) and processes it.
    pub async fn run_once(&self) -> WorkerResult<BatchReport> {
        let messages = self.receive().await?;
        self.process_batch(messages).await
    }

    /// Processes received messages: each message group (tenant) in order,
    /// different groups concurrently. A group whose message was not settled
    /// has its later messages put back untouched.
    pub async fn process_batch(&self, messages: Vec<ReceivedMessage>) -> WorkerResult<BatchReport> {
        // The messages were received just before: their 12 hours of
        // visibility at most count from about now.
        let since = Instant::now();
        let received = messages.len();
        let mut groups: Vec<(String, Vec<ReceivedMessage>)> = Vec::new();
        for m in messages {
            bump(&self.inner.counters.received);
            let group = m.system.get("MessageGroupId").cloned().unwrap_or_default();
            match groups.iter_mut().find(|(g, _)| *g == group) {
                Some((_, ms)) => ms.push(m),
                None => groups.push((group, vec![m])),
            }
        }
        let mut results = Vec::new();
        if groups.len() == 1 {
            let (_, ms) = groups.pop().unwrap_or_default();
            results.push(self.run_group(ms, since).await);
        } else {
            let mut tasks = tokio::task::JoinSet::new();
            for (_, ms) in groups {
                let w = self.clone();
                tasks.spawn(async move { w.run_group(ms, since).await });
            }
            while let Some(joined) = tasks.join_next().await {
                match joined {
                    Ok(r) => results.push(r),
                    Err(panic) => std::panic::resume_unwind(panic.into_panic()),
                }
            }
        }
        // Every group's settlement is applied before an error is returned:
        // what completed is deleted rather than received again for nothing.
        let mut deleted = 0;
        let mut settlement = Settlement::default();
        let mut first_error = None;
        for r in results {
            match r {
                Ok((n, s, error)) => {
                    deleted += n;
                    settlement.delete.extend(s.delete);
                    settlement.visibility.extend(s.visibility);
                    if let Some(e) = error {
                        first_error.get_or_insert(e);
                    }
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        deleted += self.apply(settlement, since).await;
        match first_error {
            Some(e) => Err(e),
            None => Ok(BatchReport { received, deleted }),
        }
    }

    /// One group's messages: batched when [`WorkerOptions::batch`] is on and
    /// the group qualifies, else one by one. Returns the messages the
    /// one-by-one path deleted, what is left to settle, and an error met
    /// after part of the group was settled.
    async fn run_group(
        &self,
        messages: Vec<ReceivedMessage>,
        received: Instant,
    ) -> WorkerResult<(usize, Settlement, Option<WorkerError>)> {
        if self.inner.options.batch
            && let Some(envelopes) = batchable(&messages)
        {
            let (settlement, error) = self.process_group_batched(messages, envelopes).await;
            return Ok((0, settlement, error));
        }
        let deleted = self.process_group(messages, received).await?;
        Ok((deleted, Settlement::default(), None))
    }

    /// One group's messages, batched: every (event, subscription) claimed
    /// at once (concurrent conditional writes, which the store commits
    /// together), then event by event in order, each event's subscriptions
    /// run and completed concurrently. The first event not settled stops
    /// the group as in the one-by-one path: it is held, the later ones are
    /// put back and the claims taken for them are released, unrun.
    ///
    /// Ordering: a pair whose subscription also matches an earlier event of
    /// this batch skips the predecessor check — that event is its
    /// predecessor (the group's seqs are contiguous) and settles first, or
    /// the group stops before it. Handlers of one subscription still run one
    /// event at a time, each after its predecessor's completion committed.
    async fn process_group_batched(
        &self,
        messages: Vec<ReceivedMessage>,
        envelopes: Vec<Envelope>,
    ) -> (Settlement, Option<WorkerError>) {
        let subscriptions = &self.inner.subscriptions;
        // (message, subscription, whether it must check its predecessor)
        let mut pairs = Vec::new();
        let mut matched_earlier = vec![false; subscriptions.len()];
        for (i, e) in envelopes.iter().enumerate() {
            for (s, sub) in subscriptions.iter().enumerate() {
                if sub.glob.matches(&e.event_type) {
                    pairs.push((i, s, !matched_earlier[s]));
                    matched_earlier[s] = true;
                }
            }
        }
        let claims = join_all(
            pairs
                .iter()
                .map(|&(i, s, check)| {
                    Box::pin(self.claim_step(&envelopes[i], s, check, 0)) as Boxed<'_, _>
                })
                .collect(),
        )
        .await;
        let mut steps: Vec<Vec<(usize, WorkerResult<Step>)>> =
            messages.iter().map(|_| Vec::new()).collect();
        for (&(i, s, _), step) in pairs.iter().zip(claims) {
            steps[i].push((s, step));
        }

        let mut leave = vec![Leave::Untouched; messages.len()];
        let mut error = None;
        let mut stopped = false;
        for (((m, envelope), mine), leave) in messages
            .iter()
            .zip(&envelopes)
            .zip(&mut steps)
            .zip(&mut leave)
        {
            if stopped {
                // Back to visible now; the FIFO queue hands it out only after
                // the held message of its group is settled.
                *leave = Leave::Visible(0);
                continue;
            }
            let mut outcome = Outcome::Settled;
            if mine.is_empty() {
                tracing::warn!(event = %envelope.id, r#type = %envelope.event_type, "durable event delivered to nobody");
                bump(&self.inner.counters.delivered_to_nobody);
            }
            let runs = std::mem::take(mine)
                .into_iter()
                .map(|(s, step)| -> Boxed<'_, WorkerResult<Outcome>> {
                    match step {
                        Ok(Step::Run(row)) => {
                            Box::pin(self.run_claimed(envelope, s, *row, Some(&m.receipt_handle)))
                        }
                        Ok(Step::Done(o)) => Box::pin(std::future::ready(Ok(o))),
                        Err(e) => Box::pin(std::future::ready(Err(e))),
                    }
                })
                .collect();
            for r in join_all(runs).await {
                match r {
                    Ok(o) => outcome = outcome.max(o),
                    Err(e) => {
                        // Leave the message as it is: it comes back after
                        // its visibility timeout.
                        outcome = Outcome::Abandon;
                        error.get_or_insert(e);
                    }
                }
            }
            stopped = true;
            match outcome {
                Outcome::Settled if !faults::hit(faults::AFTER_COMPLETE_BEFORE_DELETE) => {
                    *leave = Leave::Delete;
                    stopped = false;
                }
                Outcome::Retry(seconds) => *leave = Leave::Visible(seconds),
                Outcome::Wait => *leave = Leave::Visible(self.inner.options.order_wait_seconds),
                Outcome::Settled | Outcome::Abandon => {}
            }
        }
        let mut settlement = Settlement::default();
        for (m, leave) in messages.into_iter().zip(leave) {
            match leave {
                Leave::Delete => settlement.delete.push(m.into()),
                Leave::Visible(seconds) => settlement.visibility.push((m.into(), seconds)),
                Leave::Untouched => {}
            }
        }
        // Claims taken for events that did not get their turn.
        let now = self.now();
        let releases = steps
            .into_iter()
            .flatten()
            .filter_map(|(_, step)| match step {
                Ok(Step::Run(row)) => Some(Box::pin(async move {
                    if let Err(e) = self.inner.inbox.release(&row, now).await {
                        tracing::debug!(claim = %row.key.pk(), error = %e, "could not release an unrun claim; its lease runs out instead");
                    }
                }) as Boxed<'_, ()>),
                Ok(Step::Done(_)) => None,
                Err(e) => {
                    tracing::warn!(error = %e, "claim failed for an event held back anyway");
                    None
                }
            })
            .collect();
        join_all(releases).await;
        (settlement, error)
    }

    /// Deletes and changes the visibility of a batch's messages, ten per
    /// call; returns how many were deleted.
    async fn apply(&self, settlement: Settlement, received: Instant) -> usize {
        let queue = &self.inner.options.queue;
        let mut deleted = 0;
        for chunk in settlement.delete.chunks(10) {
            let handles = chunk.iter().map(|m| m.receipt_handle.clone()).collect();
            let results = match self.inner.queues.delete_batch(queue, handles).await {
                Ok(results) => results,
                Err(e) => vec![Err(e); chunk.len()],
            };
            for (m, r) in chunk.iter().zip(results) {
                if self.settle(r, &m.message_id) {
                    bump(&self.inner.counters.deleted);
                    deleted += 1;
                }
            }
        }
        for chunk in settlement.visibility.chunks(10) {
            let entries = chunk
                .iter()
                .map(|(m, seconds)| (m.receipt_handle.clone(), hidden_for(*seconds, received)))
                .collect();
            let results = match self
                .inner
                .queues
                .change_visibility_batch(queue, entries)
                .await
            {
                Ok(results) => results,
                Err(e) => vec![Err(e); chunk.len()],
            };
            for ((m, _), r) in chunk.iter().zip(results) {
                self.settle(r, &m.message_id);
            }
        }
        deleted
    }

    /// One group's messages of a batch, in order; returns how many were deleted.
    async fn process_group(
        &self,
        messages: Vec<ReceivedMessage>,
        received: Instant,
    ) -> WorkerResult<usize> {
        let queue = &self.inner.options.queue;
        let mut deleted = 0;
        let mut held = false;
        for m in messages {
            if held {
                // Back to visible now; the FIFO queue hands it out only after
                // the held message of its group is settled.
                self.inner
                    .queues
                    .change_visibility(queue, &m.receipt_handle, 0)
                    .await
                    .ok();
                continue;
            }
            let outcome = match poison::parse_body(&m.body) {
                Err(reason) => {
                    self.record_poison(&m, &reason).await?;
                    Outcome::Settled
                }
                Ok(envelope) => {
                    self.process_event(&envelope, Some(&m.receipt_handle))
                        .await?
                }
            };
            match outcome {
                Outcome::Settled => {
                    if faults::hit(faults::AFTER_COMPLETE_BEFORE_DELETE) {
                        held = true;
                        continue;
                    }
                    if self.settle(
                        self.inner.queues.delete(queue, &m.receipt_handle).await,
                        &m.message_id,
                    ) {
                        bump(&self.inner.counters.deleted);
                        deleted += 1;
                    }
                }
                Outcome::Retry(seconds) => {
                    held = true;
                    let r = self
                        .inner
                        .queues
                        .change_visibility(queue, &m.receipt_handle, hidden_for(seconds, received))
                        .await;
                    self.settle(r, &m.message_id);
                }
                Outcome::Wait => {
                    held = true;
                    let wait = self.inner.options.order_wait_seconds;
                    let r = self
                        .inner
                        .queues
                        .change_visibility(queue, &m.receipt_handle, wait)
                        .await;
                    self.settle(r, &m.message_id);
                }
                Outcome::Abandon => held = true,
            }
        }
        Ok(deleted)
    }

    /// Logs and counts a delete or visibility change the queue refused
    /// (typically: the receipt handle expired because the message's
    /// visibility ran out and it was handed out again). Nothing is lost: the
    /// message comes back and its claims make the redelivery a no-op or a
    /// wait. Returns whether the call succeeded.
    fn settle(&self, result: postbox_queue::QueueResult<()>, message_id: &str) -> bool {
        match result {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(message_id, error = %e, "the queue refused to settle a message; it will come back");
                bump(&self.inner.counters.settle_failures);
                false
            }
        }
    }

    async fn record_poison(&self, m: &ReceivedMessage, reason: &str) -> WorkerResult<()> {
        tracing::error!(message_id = %m.message_id, reason, "poison message: recorded and deleted");
        let item = poison::poison_item(
            &self.inner.options.queue,
            &m.message_id,
            &m.body,
            reason,
            self.now(),
        );
        self.inner.inbox.record_poison(item).await?;
        bump(&self.inner.counters.poison);
        Ok(())
    }

    /// Delivers `envelope` to every matching subscription; the message's
    /// outcome is the least settled of theirs.
    async fn process_event(
        &self,
        envelope: &Envelope,
        receipt: Option<&str>,
    ) -> WorkerResult<Outcome> {
        let mut outcome = Outcome::Settled;
        let mut matched = false;
        for index in 0..self.inner.subscriptions.len() {
            if !self.inner.subscriptions[index]
                .glob
                .matches(&envelope.event_type)
            {
                continue;
            }
            matched = true;
            let o = self.deliver(envelope, index, receipt, 0).await?;
            outcome = outcome.max(o);
        }
        if !matched {
            tracing::warn!(event = %envelope.id, r#type = %envelope.event_type, "durable event delivered to nobody");
            bump(&self.inner.counters.delivered_to_nobody);
        }
        Ok(outcome)
    }

    /// Delivers `envelope` to subscription `index`: order, claim, run, settle.
    /// `depth` counts predecessors being delivered from the log.
    fn deliver<'a>(
        &'a self,
        envelope: &'a Envelope,
        index: usize,
        receipt: Option<&'a str>,
        depth: usize,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = WorkerResult<Outcome>> + Send + 'a>>
    where
        S: ItemStore,
    {
        Box::pin(async move {
            match self.claim_step(envelope, index, true, depth).await? {
                Step::Run(row) => self.run_claimed(envelope, index, *row, receipt).await,
                Step::Done(outcome) => Ok(outcome),
            }
        })
    }

    /// Orders and claims `envelope` for subscription `index`. With
    /// `check_order`, first waits for the subscription's previous matching
    /// event (the batched path skips it when that event is earlier in the
    /// same batch and settles first).
    async fn claim_step(
        &self,
        envelope: &Envelope,
        index: usize,
        check_order: bool,
        depth: usize,
    ) -> WorkerResult<Step> {
        let sub = &self.inner.subscriptions[index];
        if check_order && !self.predecessor_settled(envelope, index, depth).await? {
            bump(&self.inner.counters.waited);
            return Ok(Step::Done(Outcome::Wait));
        }
        let target = ClaimTarget {
            key: ClaimKey::new(&envelope.id, &sub.name),
            tenant: envelope.tenant.clone(),
            seq: envelope.seq,
        };
        let lease = Lease {
            owner: self.inner.options.owner.clone(),
            token: new_token(),
            lease_ms: self.inner.options.lease.as_millis() as u64,
        };
        let max = sub.retry.max_attempts.max(1);
        match self
            .inner
            .inbox
            .claim(&target, &lease, self.now(), max)
            .await?
        {
            ClaimOutcome::Claimed(row) => Ok(Step::Run(Box::new(row))),
            ClaimOutcome::Refused(Decision::Final(_), _) => {
                self.mark_settled(envelope, &sub.name);
                Ok(Step::Done(Outcome::Settled))
            }
            ClaimOutcome::Refused(Decision::Exhausted, Some(row)) => {
                Ok(Step::Done(self.settle_exhausted(&row, envelope).await?))
            }
            ClaimOutcome::Refused(_, _) => {
                bump(&self.inner.counters.waited);
                Ok(Step::Done(Outcome::Wait))
            }
        }
    }

    /// Runs the handler of a claim the caller holds, then completes (with
    /// the handler's writes) or fails it.
    async fn run_claimed(
        &self,
        envelope: &Envelope,
        index: usize,
        row: ClaimRow,
        receipt: Option<&str>,
    ) -> WorkerResult<Outcome> {
        let sub = &self.inner.subscriptions[index];
        if faults::hit(faults::AFTER_CLAIM) {
            return Ok(Outcome::Abandon);
        }
        let delivery = Delivery {
            envelope: envelope.clone(),
            subscription: sub.name.clone(),
            idempotency_key: row.key.idempotency_key(),
            context: Context::caused_by(envelope, format!("subscription:{}", sub.name)),
            attempt: row.attempts,
        };
        let (result, row) = match self
            .run_with_renewal(&sub.handler, delivery, row, receipt)
            .await?
        {
            Some(done) => done,
            None => return Ok(Outcome::Abandon),
        };
        match result {
            Ok(writes) => {
                if faults::hit(faults::AFTER_HANDLER_BEFORE_COMPLETE) {
                    return Ok(Outcome::Abandon);
                }
                match self.inner.inbox.complete(&row, self.now(), writes).await {
                    Ok(_) => {
                        bump(&self.inner.counters.completed);
                        if let Some(hook) = &self.inner.options.on_completed {
                            hook(envelope, &sub.name);
                        }
                        self.mark_settled(envelope, &sub.name);
                        Ok(Outcome::Settled)
                    }
                    Err(WorkerError::Fenced { .. }) => self.fenced(&row),
                    Err(e @ WorkerError::WriteRefused { .. }) => {
                        self.settle_failure(
                            &row,
                            envelope,
                            index,
                            &e.to_string(),
                            FailureKind::Retryable,
                        )
                        .await
                    }
                    Err(WorkerError::Store(e @ StoreError::Validation(_))) => {
                        let msg = format!("the handler's writes were refused: {e}");
                        self.settle_failure(&row, envelope, index, &msg, FailureKind::Terminal)
                            .await
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) => {
                let outcome = self
                    .settle_failure(&row, envelope, index, e.message(), e.kind())
                    .await?;
                // A dependency that said when to come back is not asked sooner
                // (as far as the queue's 12 hours allow: `hidden_for`).
                Ok(match (outcome, e.min_delay()) {
                    (Outcome::Retry(secs), Some(d)) => {
                        Outcome::Retry(secs.max(d.as_secs().min(MAX_HIDDEN_SECONDS as u64) as i64))
                    }
                    (o, _) => o,
                })
            }
        }
    }

    /// Runs the handler, renewing the lease and the message's visibility
    /// every third of the lease. None if the lease was lost meanwhile.
    async fn run_with_renewal(
        &self,
        handler: &Handler,
        delivery: Delivery,
        mut row: ClaimRow,
        receipt: Option<&str>,
    ) -> WorkerResult<Option<(Result<Vec<postbox_engine::Write>, HandlerError>, ClaimRow)>> {
        let lease = self.inner.options.lease;
        let fut = handler(delivery);
        tokio::pin!(fut);
        // First renewal a third of the lease from now. (An `interval`'s
        // first tick is "immediate", but awaiting it waits for the timer's
        // next turn, up to a millisecond, on every handler run.)
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + lease / 3, lease / 3);
        loop {
            tokio::select! {
                result = &mut fut => return Ok(Some((result, row))),
                _ = tick.tick() => {
                    match self.inner.inbox.renew(&row, self.now(), lease.as_millis() as u64).await {
                        Ok(next) => row = next,
                        Err(WorkerError::Fenced { .. }) => {
                            self.fenced(&row)?;
                            return Ok(None);
                        }
                        Err(e) => return Err(e),
                    }
                    if let Some(receipt) = receipt {
                        let queue = &self.inner.options.queue;
                        if let Err(e) = self.inner.queues.change_visibility(queue, receipt, self.lease_seconds()).await {
                            // The claim's lease still protects the effect; the
                            // message may be handed out again meanwhile.
                            tracing::warn!(error = %e, "could not extend the message's visibility");
                            bump(&self.inner.counters.settle_failures);
                        }
                    }
                }
            }
        }
    }

    async fn settle_failure(
        &self,
        row: &ClaimRow,
        envelope: &Envelope,
        index: usize,
        error: &str,
        kind: FailureKind,
    ) -> WorkerResult<Outcome> {
        let sub = &self.inner.subscriptions[index];
        let max = sub.retry.max_attempts.max(1);
        match self
            .inner
            .inbox
            .fail(row, self.now(), error, kind, max, &envelope.event_type)
            .await
        {
            Ok(next) if next.status == Status::Dead => {
                tracing::error!(event = %envelope.id, subscription = %sub.name, error, attempts = next.attempts, "dead-lettered");
                bump(&self.inner.counters.dead);
                self.mark_settled(envelope, &sub.name);
                Ok(Outcome::Settled)
            }
            Ok(next) => {
                tracing::warn!(event = %envelope.id, subscription = %sub.name, error, attempts = next.attempts, "handler failed; will retry");
                bump(&self.inner.counters.retried);
                Ok(Outcome::Retry(claim::backoff_seconds(
                    sub.retry.backoff_ms,
                    next.attempts,
                )))
            }
            Err(WorkerError::Fenced { .. }) => self.fenced(row),
            Err(e) => Err(e),
        }
    }

    async fn settle_exhausted(&self, row: &ClaimRow, envelope: &Envelope) -> WorkerResult<Outcome> {
        match self
            .inner
            .inbox
            .bury_exhausted(row, self.now(), &envelope.event_type)
            .await
        {
            Ok(_) => {
                bump(&self.inner.counters.dead);
                self.mark_settled(envelope, &row.key.subscription);
                Ok(Outcome::Settled)
            }
            // Someone else moved the row first: look again next time.
            Err(WorkerError::Fenced { .. }) => Ok(Outcome::Wait),
            Err(e) => Err(e),
        }
    }

    fn fenced(&self, row: &ClaimRow) -> WorkerResult<Outcome> {
        tracing::warn!(claim = %row.key.pk(), "lease taken over by another worker; result dropped");
        bump(&self.inner.counters.fenced);
        Ok(Outcome::Abandon)
    }

    /// Whether every earlier event of the tenant that matches subscription
    /// `index` is COMPLETED or DEAD; a predecessor with no claim is
    /// delivered from the log first.
    async fn predecessor_settled(
        &self,
        envelope: &Envelope,
        index: usize,
        depth: usize,
    ) -> WorkerResult<bool> {
        let sub = &self.inner.subscriptions[index];
        let cached = self.settled_upto(&envelope.tenant, &sub.name);
        if envelope.seq <= 1 || cached + 1 >= envelope.seq {
            return Ok(true);
        }
        // The nearest earlier event of the tenant this subscription matches.
        let Some(previous) = self.previous_matching(envelope, index, cached).await? else {
            return Ok(true);
        };
        let key = ClaimKey::new(&previous.id, &sub.name);
        match self.inner.inbox.get(&key).await? {
            Some(row) if row.status.is_final() => Ok(true),
            Some(_) => Ok(false),
            None if depth >= 64 => Ok(false),
            None => {
                bump(&self.inner.counters.predecessors_from_log);
                let o = self.deliver(&previous, index, None, depth + 1).await?;
                Ok(o == Outcome::Settled)
            }
        }
    }

    /// The latest event before `envelope` in its tenant's log whose type
    /// subscription `index` matches, above seq `floor` (below it all are
    /// known settled).
    async fn previous_matching(
        &self,
        envelope: &Envelope,
        index: usize,
        floor: u64,
    ) -> WorkerResult<Option<Envelope>> {
        let sub = &self.inner.subscriptions[index];
        let mut start = None;
        loop {
            let page = self
                .inner
                .store
                .query(QueryInput {
                    table_name: self.inner.options.events_table.clone(),
                    key_condition_expression: Some("pk = :pk AND sk BETWEEN :lo AND :hi".into()),
                    expression_attribute_values: Some(Values::from([
                        (
                            ":pk".to_owned(),
                            AttributeValue::S(layout::event_pk(&envelope.tenant)),
                        ),
                        (
                            ":lo".to_owned(),
                            AttributeValue::S(layout::seq_sk(floor + 1)),
                        ),
                        (
                            ":hi".to_owned(),
                            AttributeValue::S(layout::seq_sk(envelope.seq - 1)),
                        ),
                    ])),
                    scan_index_forward: Some(false),
                    limit: Some(64),
                    exclusive_start_key: start,
                    consistent_read: Some(true),
                    ..Default::default()
                })
                .await?;
            for item in page.items.unwrap_or_default() {
                let (e, _) = layout::envelope_of(&item).map_err(|m| WorkerError::MissingEvent {
                    tenant: envelope.tenant.clone(),
                    seq: envelope.seq,
                    detail: m.0,
                })?;
                if sub.glob.matches(&e.event_type) {
                    return Ok(Some(e));
                }
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                return Ok(None);
            }
        }
    }

    fn settled_upto(&self, tenant: &str, sub: &str) -> u64 {
        let map = self.inner.settled_upto.lock().unwrap();
        map.get(&(tenant.to_owned(), sub.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// Records that `envelope` is settled for `sub`; its predecessors were
    /// checked before it ran, so every matching event up to it is settled.
    fn mark_settled(&self, envelope: &Envelope, sub: &str) {
        let mut map = self.inner.settled_upto.lock().unwrap();
        let e = map
            .entry((envelope.tenant.clone(), sub.to_owned()))
            .or_insert(0);
        *e = (*e).max(envelope.seq);
    }

    fn now(&self) -> u64 {
        self.inner.options.clock.now_ms()
    }

    fn lease_seconds(&self) -> i64 {
        self.inner.options.lease.as_millis().div_ceil(1000) as i64
    }
}

/// Reads one event of the log, for replay and for tests.
pub async fn read_event<S: ItemStore>(
    store: &S,
    events_table: &str,
    tenant: &str,
    seq: u64,
) -> WorkerResult<Envelope> {
    let out = store
        .get_item(GetItemInput {
            table_name: events_table.to_owned(),
            key: layout::key(layout::event_pk(tenant), &layout::seq_sk(seq)),
            consistent_read: Some(true),
            ..Default::default()
        })
        .await?;
    let item = out.item.ok_or_else(|| WorkerError::MissingEvent {
        tenant: tenant.to_owned(),
        seq,
        detail: "no such row".into(),
    })?;
    let (e, _) = layout::envelope_of(&item).map_err(|m| WorkerError::MissingEvent {
        tenant: tenant.to_owned(),
        seq,
        detail: m.0,
    })?;
    Ok(e)
}

/// The retention of `queue` and of its dead-letter queue (zero if none).
async fn queue_retentions<Q: QueueClient>(
    queues: &Q,
    queue: &str,
) -> WorkerResult<(Duration, Duration)> {
    let names = [
        "MessageRetentionPeriod".to_owned(),
        "RedrivePolicy".to_owned(),
    ];
    let attrs = queues.queue_attributes(queue, &names).await?;
    let secs = |a: &std::collections::BTreeMap<String, String>| {
        a.get("MessageRetentionPeriod")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(345_600)
    };
    let own = secs(&attrs);
    let dlq = match dead_letter_queue(&attrs) {
        Some(name) => queues
            .queue_attributes(&name, &names)
            .await
            .ok()
            .map_or(0, |a| secs(&a)),
        None => 0,
    };
    Ok((Duration::from_secs(own), Duration::from_secs(dlq)))
}

/// The name of the dead-letter queue in a queue's `RedrivePolicy`
/// attribute, if it has one.
pub(crate) fn dead_letter_queue(
    attributes: &std::collections::BTreeMap<String, String>,
) -> Option<String> {
    let policy: serde_json::Value = serde_json::from_str(attributes.get("RedrivePolicy")?).ok()?;
    let arn = policy.get("deadLetterTargetArn")?.as_str()?;
    arn.rsplit(':').next().map(str::to_owned)
}

/// A future borrowed for the length of a batch.
type Boxed<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Runs `futures` concurrently on the current task; their outputs in
/// order. Concurrent store writes issued this way reach the embedded
/// store's writer together and share one commit.
async fn join_all<T>(futures: Vec<Boxed<'_, T>>) -> Vec<T> {
    let mut pending: Vec<Option<Boxed<'_, T>>> = futures.into_iter().map(Some).collect();
    let mut done: Vec<Option<T>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut left = 0;
        for (slot, out) in pending.iter_mut().zip(done.iter_mut()) {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        *out = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => left += 1,
                }
            }
        }
        if left == 0 {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    done.into_iter()
        .map(|v| v.expect("every future finished"))
        .collect()
}

/// The envelopes of a group's messages if the batched path may take it:
/// every body an event, one tenant, seqs contiguous and ascending (so an
/// earlier event of the batch is the predecessor of the next). Anything
/// else (poison, a gap, a replayed duplicate) goes one by one.
fn batchable(messages: &[ReceivedMessage]) -> Option<Vec<Envelope>> {
    let envelopes: Vec<Envelope> = messages
        .iter()
        .map(|m| poison::parse_body(&m.body).ok())
        .collect::<Option<_>>()?;
    let ordered = envelopes
        .windows(2)
        .all(|w| w[0].tenant == w[1].tenant && w[0].seq + 1 == w[1].seq);
    ordered.then_some(envelopes)
}

/// A fencing token no other lease ever had: 128 random bits.
/// How long after its receive a queue keeps a message hidden at most.
const MAX_HIDDEN_SECONDS: i64 = (MAX_HIDDEN_AFTER_RECEIVE_MS / 1000) as i64;

/// Slack for the time between a receive and the start of its batch (a
/// remote queue's answer on its way), so a cut wait is never refused.
const RECEIVE_SLACK_SECONDS: i64 = 60;

/// The visibility timeout to ask for `seconds` of waiting on a message
/// received at about `received`: cut to what is left of the queue's 12
/// hours, since a change past them is refused and the message would come
/// back at the end of its lease instead.
fn hidden_for(seconds: i64, received: Instant) -> i64 {
    let left =
        MAX_HIDDEN_SECONDS - received.elapsed().as_secs_f64().ceil() as i64 - RECEIVE_SLACK_SECONDS;
    seconds.min(left).max(0)
}

fn new_token() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_shorter_than_a_message_can_live_is_refused_with_the_numbers() {
        let day = Duration::from_secs(86_400);
        let e = check_retention(day, 4 * day, 14 * day)
            .unwrap_err()
            .to_string();
        assert!(e.contains("86400s") && e.contains("1555500s"), "{e}");
        check_retention(30 * day, 4 * day, 14 * day).unwrap();
    }

    #[test]
    fn the_least_settled_outcome_wins() {
        assert!(Outcome::Settled < Outcome::Wait && Outcome::Wait < Outcome::Retry(0));
        assert!(Outcome::Retry(900) < Outcome::Abandon);
    }
}
