//! Group commit per tenant.
//!
//! Each tenant with emits in progress has one batcher task. It takes the
//! queued events in arrival order, packs as many as fit into one
//! transaction (100 actions, 4 MB, `max_batch_events`), assigns their seqs
//! and hashes from its cached head, and submits it. Up to `pipeline_depth`
//! transactions are in flight at once, each conditioned on the head the
//! previous one leaves (seq and hash), so a store with its own group commit
//! (the embedded one) can put several of them behind one fsync. A partial
//! batch behind a transaction in flight waits a few scheduler rounds for
//! more of its tenant's events, never for that transaction's commit. Each
//! transaction is polled once as soon as it is built, so a backend that
//! enqueues on first poll sees them in order; correctness does not depend
//! on that (a transaction that overtakes its predecessor fails its head
//! condition and is retried).
//!
//! When a transaction fails, every transaction behind it fails too (their
//! head conditions assume it committed); the batcher waits for them, puts
//! their events back in order, re-reads the head and carries on:
//! - a caller's own write failed (the cancellation reasons name the action):
//!   that caller gets its own error; the others are retried at once;
//! - the head moved (another process appended): retried after a jittered
//!   backoff; an event that has seen `max_tries` contended commits fails
//!   with `Contention`;
//! - the store refused the request as a whole (a validation error names no
//!   action): its events are retried one per transaction, so each caller
//!   gets its own answer;
//! - a storage failure fails the transaction's callers.
//!
//! An idle batcher retires after [`IDLE`]; the next emit starts a new one.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::Duration;

use postbox_store::{ItemStore, StoreResult};
use tokio::sync::{mpsc, oneshot};

use super::plan::{self, Failure, Head};
use super::{
    EmitError, EventRequest, Expanded, Inner, MAX_ACTIONS, MAX_TRANSACTION_BYTES, backoff,
    own_error, read_head,
};
use crate::chain::Hash;
use crate::envelope::Envelope;
use crate::lanes::bump;

/// Scheduler rounds a partial batch waits for more events when a
/// transaction of its tenant is already in flight (see `Batcher::fill`).
const COALESCE_ROUNDS: usize = 3;

/// How long a batcher waits for work before retiring.
pub const IDLE: Duration = Duration::from_secs(5);

/// Distinguishes a tenant's successive batchers.
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// A committed event's seq and hash, and its envelope handed back (the
/// caller answers with it, so it is not copied before the commit).
pub(crate) type Committed = ((u64, Hash), Envelope);

/// An emit waiting for its commit.
pub(crate) struct Pending {
    req: EventRequest,
    /// Contended commits this event has been part of.
    tries: u32,
    /// Commit alone (after the store refused a batch as a whole).
    solo: bool,
    reply: oneshot::Sender<Result<Committed, EmitError>>,
}

/// Queues `req` on its tenant's batcher and waits for the commit.
pub(crate) async fn submit<S: ItemStore>(
    inner: &Arc<Inner<S>>,
    req: EventRequest,
) -> Result<Committed, EmitError> {
    let (tx, rx) = oneshot::channel();
    let mut pending = Pending {
        req,
        tries: 0,
        solo: false,
        reply: tx,
    };
    loop {
        let sender = {
            let mut map = inner.batchers.lock().unwrap_or_else(|p| p.into_inner());
            let tenant = &pending.req.env.tenant;
            match map.get(tenant) {
                Some((_, s)) if !s.is_closed() => s.clone(),
                _ => {
                    let (s, r) = mpsc::unbounded_channel();
                    let generation = GENERATION.fetch_add(1, Ordering::Relaxed);
                    map.insert(tenant.clone(), (generation, s.clone()));
                    let batcher = Batcher {
                        inner: inner.clone(),
                        tenant: tenant.clone(),
                        generation,
                        rx: r,
                        pending: VecDeque::new(),
                        head: None,
                    };
                    tokio::spawn(batcher.run());
                    s
                }
            }
        };
        match sender.send(pending) {
            Ok(()) => break,
            // The batcher retired between the lookup and the send: start another.
            Err(mpsc::error::SendError(p)) => pending = p,
        }
    }
    rx.await.map_err(|_| EmitError::Closed)?
}

type TxFuture<'a> = Pin<Box<dyn Future<Output = StoreResult<()>> + Send + 'a>>;

struct InFlight<'a> {
    fut: TxFuture<'a>,
    ready: Option<StoreResult<()>>,
    batch: Vec<(Pending, Expanded)>,
    owners: Vec<plan::Owner>,
    links: Vec<(u64, Hash)>,
}

struct Batcher<S> {
    inner: Arc<Inner<S>>,
    tenant: String,
    generation: u64,
    rx: mpsc::UnboundedReceiver<Pending>,
    pending: VecDeque<Pending>,
    /// The head after every in-flight transaction; None = read it first.
    head: Option<Head>,
}

enum Step {
    Done(StoreResult<()>),
    Arrived(Option<Box<Pending>>),
}

impl<S: ItemStore> Batcher<S> {
    async fn run(mut self) {
        let store = self.inner.store.clone();
        let mut inflight: VecDeque<InFlight<'_>> = VecDeque::new();
        let mut open = true;
        loop {
            self.fill(&store, &mut inflight).await;
            if inflight.is_empty() {
                if !open && self.pending.is_empty() {
                    return;
                }
                if !self.pending.is_empty() {
                    continue;
                }
                match tokio::time::timeout(IDLE, self.rx.recv()).await {
                    Ok(Some(p)) => self.pending.push_back(p),
                    Ok(None) => open = false,
                    Err(_) => {
                        self.retire();
                        // Whatever was sent before the close is still queued.
                        self.rx.close();
                    }
                }
                self.drain_queue();
                continue;
            }
            let front = inflight.front_mut().expect("not empty");
            let step = match front.ready.take() {
                Some(r) => Step::Done(r),
                None => tokio::select! {
                    biased;
                    r = &mut front.fut => Step::Done(r),
                    p = self.rx.recv(), if open => Step::Arrived(p.map(Box::new)),
                },
            };
            match step {
                Step::Arrived(Some(p)) => {
                    self.pending.push_back(*p);
                    self.drain_queue();
                }
                Step::Arrived(None) => open = false,
                Step::Done(result) => {
                    let done = inflight.pop_front().expect("not empty");
                    self.finish(done, result, &mut inflight).await;
                }
            }
        }
    }

    fn drain_queue(&mut self) {
        while let Ok(p) = self.rx.try_recv() {
            self.pending.push_back(p);
        }
    }

    /// Leaves the tenant's slot so the next emit starts a fresh batcher.
    fn retire(&self) {
        let mut map = self
            .inner
            .batchers
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if map
            .get(&self.tenant)
            .is_some_and(|(g, _)| *g == self.generation)
        {
            map.remove(&self.tenant);
        }
    }

    /// Plans and submits transactions while the pipeline has room.
    async fn fill<'a>(&mut self, store: &'a S, inflight: &mut VecDeque<InFlight<'a>>) {
        let inner = self.inner.clone();
        let opts = &inner.options;
        let depth = opts.pipeline_depth.max(1);
        // Behind a transaction in flight, a partial batch first lets the
        // scheduler run a few rounds: the callers the last commit answered
        // come back in a burst, and this way they share one transaction
        // instead of taking one each. It does not wait for the transaction
        // in flight to finish: an event held until then misses the commit
        // the store is gathering, which with a few emitters per tenant (100
        // tenants, 2 each) left one event per tenant per commit.
        if !inflight.is_empty()
            && inflight.len() < depth
            && !self.pending.is_empty()
            && !self.full_batch_waiting()
        {
            for _ in 0..COALESCE_ROUNDS {
                tokio::task::yield_now().await;
                self.drain_queue();
            }
        }
        while inflight.len() < depth && !self.pending.is_empty() {
            let head = match self.head {
                Some(h) => h,
                None => match read_head(store, &opts.events_table, &self.tenant).await {
                    Ok(h) => h,
                    Err(e) => {
                        for p in self.pending.drain(..) {
                            let _ = p.reply.send(Err(EmitError::Store(e.clone())));
                        }
                        return;
                    }
                },
            };
            self.head = Some(head);
            let batch = self.take_batch(&head);
            if batch.is_empty() {
                // Every event taken was refused by its INLINE handlers.
                continue;
            }
            let p = plan::plan(
                &opts.events_table,
                &self.tenant,
                &head,
                batch.iter().map(|(p, x)| (&p.req, x)),
            );
            self.head = Some(p.new_head);
            let mut fut: TxFuture<'a> = Box::pin(store.transact_write_items(p.input));
            // Poll once now so the store sees transactions in plan order.
            let mut cx = TaskContext::from_waker(Waker::noop());
            let ready = match fut.as_mut().poll(&mut cx) {
                Poll::Ready(r) => Some(r),
                Poll::Pending => None,
            };
            inflight.push_back(InFlight {
                fut,
                ready,
                batch,
                owners: p.owners,
                links: p.links,
            });
        }
    }

    /// Whether the queued events would fill a transaction.
    fn full_batch_waiting(&self) -> bool {
        let max_events = self.inner.options.max_batch_events.max(1);
        let mut actions = 1;
        for (n, p) in self.pending.iter().enumerate() {
            actions += p.req.base_actions();
            if n + 1 >= max_events || actions > MAX_ACTIONS - 2 {
                return true;
            }
        }
        false
    }

    /// The next events that fit one transaction, in arrival order, each
    /// expanded at the seq it gets after `head` (its INLINE handlers run
    /// then; one whose handler fails is answered and left out, and the next
    /// event takes its seq).
    fn take_batch(&mut self, head: &Head) -> Vec<(Pending, Expanded)> {
        let opts = &self.inner.options;
        let mut batch: Vec<(Pending, Expanded)> =
            Vec::with_capacity(self.pending.len().min(opts.max_batch_events.max(1)));
        let (mut actions, mut bytes) = (1, 0);
        while let Some(mut next) = self.pending.pop_front() {
            let alone =
                batch.first().is_some_and(|(b, _)| b.solo) || (next.solo && !batch.is_empty());
            if alone || batch.len() >= opts.max_batch_events.max(1) {
                self.pending.push_front(next);
                break;
            }
            let seq = head.seq + batch.len() as u64 + 1;
            let expanded = match next.req.expand(seq, &opts.events_table) {
                Ok(x) => x,
                Err(e) => {
                    let _ = next.reply.send(Err(e));
                    continue;
                }
            };
            let fits = actions + expanded.actions <= MAX_ACTIONS
                && bytes + expanded.bytes <= MAX_TRANSACTION_BYTES;
            if !fits && !batch.is_empty() {
                self.pending.push_front(next);
                break;
            }
            actions += expanded.actions;
            bytes += expanded.bytes;
            batch.push((next, expanded));
        }
        batch
    }

    /// Answers a finished transaction and recovers from a failed one.
    async fn finish<'a>(
        &mut self,
        done: InFlight<'a>,
        result: StoreResult<()>,
        inflight: &mut VecDeque<InFlight<'a>>,
    ) {
        let counters = &self.inner.counters;
        let err = match result {
            Ok(()) => {
                bump(&counters.transactions);
                metrics::histogram!("postbox_emit_batch_events").record(done.batch.len() as f64);
                for ((p, _), link) in done.batch.into_iter().zip(done.links) {
                    let _ = p.reply.send(Ok((link, p.req.env)));
                }
                return;
            }
            Err(e) => e,
        };
        let mut retry: Vec<Pending> = Vec::new();
        let mut contended = false;
        match plan::classify(err, &done.owners) {
            Failure::Own(list) => {
                let mut failed = vec![None; done.batch.len()];
                for (r, w, reason) in list {
                    failed[r].get_or_insert((w, reason));
                }
                for ((p, x), f) in done.batch.into_iter().zip(failed) {
                    match f {
                        Some((w, reason)) => {
                            let _ = p.reply.send(Err(own_error(&p.req, &x, w, &reason)));
                        }
                        None => retry.push(p),
                    }
                }
            }
            Failure::Contention => {
                contended = true;
                bump(&counters.contention_retries);
                for (mut p, _) in done.batch {
                    p.tries += 1;
                    if p.tries >= self.inner.options.max_tries {
                        let _ = p.reply.send(Err(EmitError::Contention {
                            tenant: self.tenant.clone(),
                            tries: p.tries,
                        }));
                    } else {
                        retry.push(p);
                    }
                }
            }
            Failure::Invalid(e) if done.batch.len() == 1 => {
                for (p, _) in done.batch {
                    let _ = p.reply.send(Err(EmitError::Store(e.clone())));
                }
            }
            Failure::Invalid(_) => retry.extend(done.batch.into_iter().map(|(mut p, _)| {
                p.solo = true;
                p
            })),
            Failure::Fatal(e) => {
                for (p, _) in done.batch {
                    let _ = p.reply.send(Err(EmitError::Store(e.clone())));
                }
            }
        }
        // Everything behind the failed transaction assumed it committed.
        while let Some(mut next) = inflight.pop_front() {
            let r = match next.ready.take() {
                Some(r) => r,
                None => (&mut next.fut).await,
            };
            match r {
                // Cannot happen (its head condition names a hash that was
                // never written), but if it did, its callers are committed.
                Ok(()) => {
                    for ((p, _), link) in next.batch.into_iter().zip(next.links) {
                        let _ = p.reply.send(Ok((link, p.req.env)));
                    }
                }
                Err(_) => retry.extend(next.batch.into_iter().map(|(p, _)| p)),
            }
        }
        retry.extend(self.pending.drain(..));
        self.pending = retry.into();
        self.head = None;
        if contended {
            let tries = self.pending.front().map_or(1, |p| p.tries);
            tokio::time::sleep(backoff(&self.inner.options, tries)).await;
        }
    }
}
