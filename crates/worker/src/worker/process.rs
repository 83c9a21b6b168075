//! Running a group's messages: ordering and claiming each (event,
//! subscription), running its handler under a renewed lease, and folding
//! the outcomes into what becomes of each message.

use std::time::Instant;

use postbox_engine::{Context, Envelope};
use postbox_queue::{QueueClient, ReceivedMessage};
use postbox_store::{ItemStore, StoreError};

use super::Worker;
use super::group::batchable;
use super::message::{Body, Received};
use super::settle::{Leave, MAX_HIDDEN_SECONDS, Outcome, Settlement, hidden_for};
use super::stats::bump;
use crate::claim::{ClaimKey, ClaimRow, ClaimTarget, Decision, FailureKind, Lease};
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

/// What the batched path leaves of a group: what becomes of each message,
/// and an error met after part of the group was settled.
struct Left {
    leave: Vec<Leave>,
    error: Option<WorkerError>,
}

impl<S: ItemStore, Q: QueueClient> Worker<S, Q> {
    /// One group's messages: batched when [`WorkerOptions::batch`] is on and
    /// the group qualifies, else one by one. Returns the messages the
    /// one-by-one path deleted, what is left to settle, and an error met
    /// after part of the group was settled.
    pub(super) async fn run_group(
        &self,
        messages: Vec<ReceivedMessage>,
        received: Instant,
    ) -> WorkerResult<(usize, Settlement, Option<WorkerError>)> {
        let group: Vec<Received> = messages.into_iter().map(Received::parse).collect();
        if self.inner.options.batch
            && let Some(envelopes) = batchable(&group)
        {
            let leave = self.process_group_batched(&group, envelopes).await;
            let mut settlement = Settlement::default();
            for (m, leave) in group.into_iter().zip(leave.leave) {
                match leave {
                    Leave::Delete => settlement.delete.push(m.settle),
                    Leave::Visible(seconds) => settlement.visibility.push((m.settle, seconds)),
                    Leave::Untouched => {}
                }
            }
            return Ok((0, settlement, leave.error));
        }
        let deleted = self.process_group(group, received).await?;
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
    async fn process_group_batched(&self, group: &[Received], envelopes: Vec<&Envelope>) -> Left {
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
                    Box::pin(self.claim_step(envelopes[i], s, check, 0)) as Boxed<'_, _>
                })
                .collect(),
        )
        .await;
        let mut steps: Vec<Vec<(usize, WorkerResult<Step>)>> =
            group.iter().map(|_| Vec::new()).collect();
        for (&(i, s, _), step) in pairs.iter().zip(claims) {
            steps[i].push((s, step));
        }

        let mut leave = vec![Leave::Untouched; group.len()];
        let mut error = None;
        let mut stopped = false;
        for (((m, &envelope), mine), leave) in
            group.iter().zip(&envelopes).zip(&mut steps).zip(&mut leave)
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
                        Ok(Step::Run(row)) => Box::pin(self.run_claimed(
                            envelope,
                            s,
                            *row,
                            Some(&m.settle.receipt_handle),
                        )),
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
        Left { leave, error }
    }

    /// One group's messages of a batch, in order; returns how many were deleted.
    async fn process_group(
        &self,
        messages: Vec<Received>,
        received: Instant,
    ) -> WorkerResult<usize> {
        let queue = &self.inner.options.queue;
        let mut deleted = 0;
        let mut held = false;
        for Received { settle: m, body } in messages {
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
            let outcome = match &body {
                Body::Poison { text, reason } => {
                    self.record_poison(&m.message_id, text, reason).await?;
                    Outcome::Settled
                }
                Body::Event(envelope) => {
                    self.process_event(envelope, Some(&m.receipt_handle))
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
    pub(super) fn deliver<'a>(
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

/// A fencing token no other lease ever had: 128 random bits.
fn new_token() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}
