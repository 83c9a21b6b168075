//! Running a group's messages, the one processing path: a group is taken
//! in chunks (see `group::chunks`); each chunk's (event, subscription)
//! pairs are ordered and claimed at once, then its messages run in order,
//! each event's subscriptions concurrently, each handler under a renewed
//! lease. The first message not settled stops the group: it is held, the
//! later ones are put back and the claims taken for them released, unrun.

use postbox_engine::glob::Glob;
use postbox_engine::{Context, Envelope};
use postbox_queue::{QueueClient, ReceivedMessage};
use postbox_store::ItemStore;
use tracing::Instrument as _;

use super::Worker;
use super::group::{self, Chunk};
use super::message::{Body, Received};
use super::settle::{Leave, Outcome, Settlement};
use super::stats::bump;
use crate::claim::{ClaimKey, ClaimRow, ClaimTarget, Decision, Lease};
use crate::error::{WorkerError, WorkerResult};
use crate::faults;
use crate::handler::{Delivery, Handler, HandlerError};
use crate::inbox::ClaimOutcome;

/// What the claim step left to do for one (event, subscription).
pub(super) enum Step {
    /// The caller holds the claim: run the handler.
    Run(Box<ClaimRow>),
    /// Nothing to run: settled already, or waiting.
    Done(Outcome),
}

/// The claim steps of one message's subscriptions: (subscription, step).
type Steps = Vec<(usize, WorkerResult<Step>)>;

impl<S: ItemStore, Q: QueueClient> Worker<S, Q> {
    /// One group's messages, in order: each body parsed once, then chunk by
    /// chunk. Returns what is left to settle, and an error met after part
    /// of the group was settled (the message it hit is left as it is and
    /// comes back after its visibility timeout).
    pub(super) async fn process_group(
        &self,
        messages: Vec<ReceivedMessage>,
    ) -> (Settlement, Option<WorkerError>) {
        let group: Vec<Received> = messages.into_iter().map(Received::parse).collect();
        let globs: Vec<&Glob> = self.inner.subscriptions.iter().map(|s| &s.glob).collect();
        // None: the message did not get its turn.
        let mut leave = vec![None; group.len()];
        let mut error = None;
        for chunk in group::chunks(&group, &globs, self.inner.options.batch) {
            if !self
                .process_chunk(&group, chunk, &mut leave, &mut error)
                .await
            {
                break;
            }
        }
        // Back to visible now; the FIFO queue hands them out only after the
        // held message of their group is settled.
        let leave = leave
            .into_iter()
            .map(|l| l.unwrap_or(Leave::Visible(0)))
            .collect();
        (Settlement::new(group, leave), error)
    }

    /// One chunk of a group: every (event, subscription) claimed at once
    /// (concurrent conditional writes, which the store commits together),
    /// then message by message in order, each event's subscriptions run and
    /// completed concurrently, until one is not settled. Sets what becomes
    /// of each message that ran in `leave`; returns whether the group goes
    /// on.
    ///
    /// Ordering: a pair whose subscription also matches an earlier event of
    /// the chunk skips the predecessor check — that event is its
    /// predecessor (a chunk's seqs are contiguous) and settles first, or the
    /// group stops before it. Handlers of one subscription still run one
    /// event at a time, each after its predecessor's completion committed.
    async fn process_chunk(
        &self,
        group: &[Received],
        chunk: Chunk,
        leave: &mut [Option<Leave>],
        error: &mut Option<WorkerError>,
    ) -> bool {
        let pairs: Vec<_> = chunk
            .pairs
            .iter()
            .filter_map(|p| Some((p, group[p.message].envelope()?)))
            .collect();
        let claims = join_all(
            pairs
                .iter()
                .map(|&(p, e)| {
                    Box::pin(self.claim_step(e, p.subscription, p.check_order, 0)) as Boxed<'_, _>
                })
                .collect(),
        )
        .await;
        let first = chunk.messages.start;
        let mut steps: Vec<Steps> = chunk.messages.clone().map(|_| Vec::new()).collect();
        for (&(p, _), step) in pairs.iter().zip(claims) {
            steps[p.message - first].push((p.subscription, step));
        }

        let mut goes_on = true;
        for (i, mine) in chunk.messages.zip(&mut steps) {
            let m = &group[i];
            let outcome = match &m.body {
                Body::Poison { text, reason } => self
                    .record_poison(&m.settle.message_id, text, reason)
                    .await
                    .map(|()| Outcome::Settled),
                Body::Event(envelope) => {
                    self.run_event(envelope, std::mem::take(mine), &m.settle.receipt_handle)
                        .await
                }
            };
            let outcome = outcome.unwrap_or_else(|e| {
                error.get_or_insert(e);
                Outcome::Abandon
            });
            let l = match outcome.leave(self.inner.options.order_wait_seconds) {
                Leave::Delete if faults::hit(faults::AFTER_COMPLETE_BEFORE_DELETE) => {
                    Leave::Untouched
                }
                l => l,
            };
            leave[i] = Some(l);
            if l != Leave::Delete {
                goes_on = false;
                break;
            }
        }
        self.release_unrun(steps).await;
        goes_on
    }

    /// Runs the claims one event holds, its subscriptions concurrently; its
    /// outcome is the least settled of theirs. An error (the first met)
    /// leaves the message as it is.
    async fn run_event(
        &self,
        envelope: &Envelope,
        steps: Steps,
        receipt: &str,
    ) -> WorkerResult<Outcome> {
        if steps.is_empty() {
            if let Some(held_back) = self
                .inner
                .nobody
                .admit(&envelope.event_type, std::time::Instant::now())
            {
                tracing::warn!(event = %envelope.id, r#type = %envelope.event_type, held_back, "durable event delivered to nobody (logged once a minute per type)");
            }
            bump(&self.inner.counters.delivered_to_nobody);
        }
        let runs = steps
            .into_iter()
            .map(|(s, step)| -> Boxed<'_, WorkerResult<Outcome>> {
                match step {
                    Ok(Step::Run(row)) => {
                        Box::pin(self.run_claimed(envelope, s, *row, Some(receipt)))
                    }
                    Ok(Step::Done(o)) => Box::pin(std::future::ready(Ok(o))),
                    Err(e) => Box::pin(std::future::ready(Err(e))),
                }
            })
            .collect();
        let mut outcome = Ok(Outcome::Settled);
        for r in join_all(runs).await {
            outcome = match (outcome, r) {
                (Ok(a), Ok(b)) => Ok(a.max(b)),
                (Err(e), _) | (Ok(_), Err(e)) => Err(e),
            };
        }
        outcome
    }

    /// Gives back the claims taken for events that did not get their turn:
    /// their lease ends now, their attempts untouched.
    async fn release_unrun(&self, steps: Vec<Steps>) {
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
    }

    /// Orders and claims `envelope` for subscription `index`. With
    /// `check_order`, first waits for the subscription's previous matching
    /// event (skipped when that event is earlier in the same chunk and
    /// settles first). `depth` counts predecessors being delivered from the
    /// log.
    pub(super) async fn claim_step(
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

    /// Runs the handler of a claim the caller holds, then settles the
    /// claim with what the handler returned.
    pub(super) async fn run_claimed(
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
        // The handler's hop in the event's trace (when spans are exported);
        // what it emits, POSTs or hands to a pull consumer continues it.
        let span = if postbox_trace::enabled() {
            let span = tracing::info_span!(
                "handler",
                subscription = %sub.name,
                event = %envelope.id,
                tenant = %envelope.tenant,
                seq = envelope.seq,
                attempt = row.attempts,
            );
            postbox_trace::follow(&span, envelope.trace.as_deref());
            span
        } else {
            tracing::Span::none()
        };
        let context = Context::caused_by(envelope, format!("subscription:{}", sub.name))
            .with_trace(postbox_trace::pass_on(&span, envelope.trace.as_deref()));
        let delivery = Delivery {
            envelope: envelope.clone(),
            subscription: sub.name.clone(),
            idempotency_key: row.key.idempotency_key(),
            context,
            attempt: row.attempts,
            result: Default::default(),
        };
        let recorded = delivery.result.clone();
        let running =
            metrics::gauge!("postbox_handlers_running", "subscription" => sub.name.clone());
        running.increment(1.0);
        let ran = self
            .run_with_renewal(&sub.handler, delivery, row, receipt)
            .instrument(span)
            .await;
        running.decrement(1.0);
        match ran? {
            Some((Err(HandlerError::Released(why)), row)) => {
                // Not run: given back, attempts untouched, visible at once.
                tracing::debug!(claim = %row.key.pk(), %why, "delivery released unrun");
                if let Err(e) = self.inner.inbox.release(&row, self.now()).await {
                    tracing::debug!(claim = %row.key.pk(), error = %e, "could not release the claim; its lease runs out instead");
                }
                Ok(Outcome::Retry(0))
            }
            Some((result, row)) => {
                self.settle_run(envelope, index, &row, result, recorded.take())
                    .await
            }
            None => Ok(Outcome::Abandon),
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
        let started = std::time::Instant::now();
        let handler_seconds = metrics::histogram!(
            "postbox_handler_seconds",
            "subscription" => delivery.subscription.clone()
        );
        let fut = handler(delivery);
        tokio::pin!(fut);
        // First renewal a third of the lease from now. (An `interval`'s
        // first tick is "immediate", but awaiting it waits for the timer's
        // next turn, up to a millisecond, on every handler run.)
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + lease / 3, lease / 3);
        loop {
            tokio::select! {
                result = &mut fut => {
                    handler_seconds.record(started.elapsed().as_secs_f64());
                    return Ok(Some((result, row)));
                }
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
}

/// A future borrowed for the length of a batch.
pub(super) type Boxed<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

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

/// A fencing token no other lease ever had: 128 random bits.
fn new_token() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[tokio::test]
    async fn join_all_answers_in_the_order_given_whatever_order_the_futures_finish_in() {
        // A chunk's claims are matched to its pairs by position.
        let finished = Mutex::new(Vec::new());
        let finished = &finished;
        let futures = (0..3usize)
            .map(|i| {
                Box::pin(async move {
                    for _ in 0..(3 - i) * 2 {
                        tokio::task::yield_now().await;
                    }
                    finished.lock().unwrap().push(i);
                    i
                }) as Boxed<'_, usize>
            })
            .collect();
        assert_eq!(join_all(futures).await, vec![0, 1, 2]);
        assert_eq!(*finished.lock().unwrap(), vec![2, 1, 0]);
    }
}
