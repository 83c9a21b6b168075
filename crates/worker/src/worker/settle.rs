//! Settlement: what becomes of a claim once its handler is done (completed
//! with the handler's writes, failed for a retry, dead-lettered, or dropped
//! when its lease was taken over), and of a message once its claims are
//! known (deleted, made visible again later, or left as it is), applied to
//! the queue ten messages per call. Also the poison record, which settles
//! a body that is no event.

use std::time::{Duration, Instant};

use postbox_engine::{Envelope, Write};
use postbox_queue::QueueClient;
use postbox_queue::core::MAX_HIDDEN_AFTER_RECEIVE_MS;
use postbox_store::{ItemStore, StoreError};

use super::Worker;
use super::message::Received;
use super::stats::bump;
use crate::claim::{self, ClaimRow, FailureKind, Status};
use crate::error::{WorkerError, WorkerResult};
use crate::handler::HandlerError;
use crate::{faults, poison};

/// What became of one (event, subscription), or of a whole message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Outcome {
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

impl Outcome {
    /// What becomes of a message whose subscriptions ended so (before the
    /// fault point between complete and delete).
    pub(super) fn leave(self, order_wait_seconds: i64) -> Leave {
        match self {
            Outcome::Settled => Leave::Delete,
            Outcome::Retry(seconds) => Leave::Visible(seconds),
            Outcome::Wait => Leave::Visible(order_wait_seconds),
            Outcome::Abandon => Leave::Untouched,
        }
    }
}

/// How the groups of a batch leave the queue: messages to delete, and
/// visibility changes for the held ones.
#[derive(Default)]
pub(super) struct Settlement {
    pub(super) delete: Vec<Settle>,
    pub(super) visibility: Vec<(Settle, i64)>,
}

impl Settlement {
    /// The queue calls that `leave` asks for a group's messages.
    pub(super) fn new(group: Vec<Received>, leave: Vec<Leave>) -> Settlement {
        let mut s = Settlement::default();
        for (m, leave) in group.into_iter().zip(leave) {
            match leave {
                Leave::Delete => s.delete.push(m.settle),
                Leave::Visible(seconds) => s.visibility.push((m.settle, seconds)),
                Leave::Untouched => {}
            }
        }
        s
    }

    /// Adds another group's calls.
    pub(super) fn extend(&mut self, other: Settlement) {
        self.delete.extend(other.delete);
        self.visibility.extend(other.visibility);
    }
}

/// What settling a message needs of it, moved out of the message rather
/// than cloned with its body and attributes.
pub(super) struct Settle {
    pub(super) message_id: String,
    pub(super) receipt_handle: String,
}

/// What becomes of one message of a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Leave {
    /// Settled: deleted.
    Delete,
    /// Held, or put back: visible again after this many seconds.
    Visible(i64),
    /// Left as it is (its visibility timeout brings it back).
    Untouched,
}

impl<S: ItemStore, Q: QueueClient> Worker<S, Q> {
    /// Deletes and changes the visibility of a batch's messages, ten per
    /// call; returns how many were deleted.
    pub(super) async fn apply(&self, settlement: Settlement, received: Instant) -> usize {
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
                .map(|(m, seconds)| {
                    let hidden = hidden_for(*seconds, received.elapsed());
                    (m.receipt_handle.clone(), hidden)
                })
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

    /// Logs and counts a delete or visibility change the queue refused
    /// (typically: the receipt handle expired because the message's
    /// visibility ran out and it was handed out again). Nothing is lost: the
    /// message comes back and its claims make the redelivery a no-op or a
    /// wait. Returns whether the call succeeded.
    pub(super) fn settle(&self, result: postbox_queue::QueueResult<()>, message_id: &str) -> bool {
        match result {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(message_id, error = %e, "the queue refused to settle a message; it will come back");
                bump(&self.inner.counters.settle_failures);
                false
            }
        }
    }

    pub(super) async fn record_poison(
        &self,
        message_id: &str,
        text: &str,
        reason: &str,
    ) -> WorkerResult<()> {
        tracing::error!(message_id, reason, "poison message: recorded and deleted");
        let item = poison::poison_item(
            &self.inner.options.queue,
            message_id,
            text,
            reason,
            self.now(),
        );
        self.inner.inbox.record_poison(item).await?;
        bump(&self.inner.counters.poison);
        Ok(())
    }

    /// Settles a claim whose handler returned `result`: completes it with
    /// the handler's writes, or fails it (for a retry, or dead when
    /// terminal or out of attempts).
    pub(super) async fn settle_run(
        &self,
        envelope: &Envelope,
        index: usize,
        row: &ClaimRow,
        result: Result<Vec<Write>, HandlerError>,
        recorded: Option<String>,
    ) -> WorkerResult<Outcome> {
        let sub = &self.inner.subscriptions[index];
        match result {
            Ok(writes) => {
                if faults::hit(faults::AFTER_HANDLER_BEFORE_COMPLETE) {
                    return Ok(Outcome::Abandon);
                }
                match self
                    .inner
                    .inbox
                    .complete_with_result(row, self.now(), writes, recorded)
                    .await
                {
                    Ok(_) => {
                        bump(&self.inner.counters.completed);
                        deliveries(&sub.name, "completed");
                        if let Some(at) =
                            postbox_engine::envelope::parse_timestamp(&envelope.occurred_at)
                        {
                            let now = postbox_engine::envelope::now_ms();
                            metrics::histogram!(
                                "postbox_emit_to_completion_seconds",
                                "subscription" => sub.name.clone()
                            )
                            .record(now.saturating_sub(at) as f64 / 1000.0);
                        }
                        if let Some(hook) = &self.inner.options.on_completed {
                            hook(envelope, &sub.name);
                        }
                        self.mark_settled(envelope, &sub.name);
                        Ok(Outcome::Settled)
                    }
                    Err(WorkerError::Fenced { .. }) => self.fenced(row),
                    Err(e @ WorkerError::WriteRefused { .. }) => {
                        self.settle_failure(
                            row,
                            envelope,
                            index,
                            &e.to_string(),
                            FailureKind::Retryable,
                        )
                        .await
                    }
                    Err(WorkerError::Store(e @ StoreError::Validation(_))) => {
                        let msg = format!("the handler's writes were refused: {e}");
                        self.settle_failure(row, envelope, index, &msg, FailureKind::Terminal)
                            .await
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) => {
                let outcome = self
                    .settle_failure(row, envelope, index, e.message(), e.kind())
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

    /// Fails the claim `row` held for subscription `index` with `error`:
    /// FAILED, to be retried after the subscription's backoff, or DEAD with
    /// a dead letter when the failure is terminal or the attempts ran out.
    pub(super) async fn settle_failure(
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
                deliveries(&sub.name, "dead");
                self.mark_settled(envelope, &sub.name);
                Ok(Outcome::Settled)
            }
            Ok(next) => {
                tracing::warn!(event = %envelope.id, subscription = %sub.name, error, attempts = next.attempts, "handler failed; will retry");
                bump(&self.inner.counters.retried);
                deliveries(&sub.name, "retried");
                Ok(Outcome::Retry(claim::backoff_seconds(
                    sub.retry.backoff_ms,
                    next.attempts,
                )))
            }
            Err(WorkerError::Fenced { .. }) => self.fenced(row),
            Err(e) => Err(e),
        }
    }

    /// Dead-letters a claim found FAILED with no attempts left (the worker
    /// died between its last failure and the DEAD write, or `max_attempts`
    /// was lowered).
    pub(super) async fn settle_exhausted(
        &self,
        row: &ClaimRow,
        envelope: &Envelope,
    ) -> WorkerResult<Outcome> {
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

    /// Counts a lease another worker took over; this worker's part is
    /// dropped and the message left as it is.
    pub(super) fn fenced(&self, row: &ClaimRow) -> WorkerResult<Outcome> {
        tracing::warn!(claim = %row.key.pk(), "lease taken over by another worker; result dropped");
        bump(&self.inner.counters.fenced);
        Ok(Outcome::Abandon)
    }
}

/// How long after its receive a queue keeps a message hidden at most.
const MAX_HIDDEN_SECONDS: i64 = (MAX_HIDDEN_AFTER_RECEIVE_MS / 1000) as i64;

/// Slack for the time between a receive and the start of its batch (a
/// remote queue's answer on its way), so a cut wait is never refused.
const RECEIVE_SLACK_SECONDS: i64 = 60;

/// The visibility timeout to ask for `seconds` of waiting on a message
/// received `since_receive` ago: cut to what is left of the queue's 12
/// hours, since a change past them is refused and the message would come
/// back at the end of its lease instead.
fn hidden_for(seconds: i64, since_receive: Duration) -> i64 {
    let left =
        MAX_HIDDEN_SECONDS - since_receive.as_secs_f64().ceil() as i64 - RECEIVE_SLACK_SECONDS;
    seconds.min(left).max(0)
}

/// Counts a settled run of `subscription`'s handler by outcome
/// (`postbox_deliveries_total{subscription, outcome}`: completed, retried,
/// dead), beside the worker's own totals.
fn deliveries(subscription: &str, outcome: &'static str) {
    metrics::counter!(
        "postbox_deliveries_total",
        "subscription" => subscription.to_owned(),
        "outcome" => outcome
    )
    .increment(1);
}

#[cfg(test)]
mod tests {
    use super::super::message::tests::event;
    use super::*;

    #[test]
    fn the_least_settled_outcome_wins() {
        assert!(Outcome::Settled < Outcome::Wait && Outcome::Wait < Outcome::Retry(0));
        assert!(Outcome::Retry(900) < Outcome::Abandon);
    }

    #[test]
    fn only_a_settled_message_is_deleted_and_a_waiting_one_comes_back_after_the_order_wait() {
        assert_eq!(Outcome::Settled.leave(5), Leave::Delete);
        assert_eq!(Outcome::Retry(120).leave(5), Leave::Visible(120));
        assert_eq!(Outcome::Wait.leave(5), Leave::Visible(5));
        assert_eq!(Outcome::Abandon.leave(5), Leave::Untouched);
    }

    #[test]
    fn a_groups_settlement_holds_the_calls_its_messages_ask_for_and_no_others() {
        let group: Vec<Received> = (1..=4)
            .map(|seq| Received::parse(event("acme", seq, "ORDER_PLACED")))
            .collect();
        let leave = vec![
            Leave::Delete,
            Leave::Visible(30),
            Leave::Untouched,
            Leave::Visible(0),
        ];
        let s = Settlement::new(group, leave);
        let handle = |seq: u64| format!("r-01JDQ4Z8Y3V5X7W9T1R3P5N{seq:03}");
        let deleted: Vec<_> = s.delete.iter().map(|m| m.receipt_handle.clone()).collect();
        assert_eq!(deleted, vec![handle(1)]);
        let visible: Vec<_> = s
            .visibility
            .iter()
            .map(|(m, secs)| (m.receipt_handle.clone(), *secs))
            .collect();
        assert_eq!(visible, vec![(handle(2), 30), (handle(4), 0)]);
    }

    #[test]
    fn a_wait_is_cut_to_what_is_left_of_the_queues_twelve_hours() {
        let hour = Duration::from_secs(3600);
        assert_eq!(hidden_for(30, Duration::ZERO), 30, "a short wait is kept");
        assert_eq!(
            hidden_for(24 * 3600, hour),
            12 * 3600 - 3600 - RECEIVE_SLACK_SECONDS,
            "a day, an hour after the receive"
        );
        // A part of a second counts as a whole one, so the wait is never
        // refused for being a moment too long.
        assert_eq!(
            hidden_for(24 * 3600, Duration::from_millis(1)),
            12 * 3600 - 1 - RECEIVE_SLACK_SECONDS
        );
        assert_eq!(hidden_for(30, 12 * hour), 0, "nothing left: no wait");
    }
}
