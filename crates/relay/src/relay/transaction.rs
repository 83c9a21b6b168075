//! The delivery transaction: the one store operation a commit runs on the
//! store's writer ([`Transaction::apply`]). In order, it checks that the lease
//! still names this relay and its token and that the checkpoint still
//! equals the position the records were read after (else it writes
//! nothing), enqueues each queue's messages, dead-letters the records of a
//! queue that refused its messages together with the records planned
//! dead, and moves the checkpoint. Everything the writer can be spared —
//! validating and encoding messages, building dead letters — is done
//! before, off the writer ([`prepare_sends`], [`Commit::dead_letters`]).
//!
//! [`Commit::dead_letters`]: super::commit::Commit::dead_letters

use std::time::Duration;

use postbox_queue::{NewMessage, PreparedSend, QueueResult, Queues};
use postbox_store::StoreError;
use postbox_store::embedded::WriteContext;
use serde_json::Value;

use super::AFTER_ENQUEUE_BEFORE_CHECKPOINT;
use crate::lease;
use crate::plan::{DeadReason, QueueMessage, RecordView, dead_letter};

/// One queue's messages for a commit: the queue, the index of each
/// message's record, and the messages validated and encoded (or why the
/// queue refused them).
pub(super) type QueueSend = (String, Vec<usize>, QueueResult<PreparedSend>);

/// What a delivery commit found.
pub(super) enum Committed {
    /// The commit is made; these sends (record index and why) were refused
    /// inside it and their records dead-lettered.
    Done { failed_sends: Vec<(usize, String)> },
    /// Another relay holds the lease or moved the checkpoint: nothing was
    /// written.
    LeaseLost,
}

/// What fences a delivery: this relay's hold on the pipe's lease and the
/// checkpoint its records were read after.
pub(super) struct Fence {
    pub(super) pipe: String,
    pub(super) owner: String,
    pub(super) token: u64,
    pub(super) lease_for: Duration,
    pub(super) table: String,
    pub(super) reader: String,
    pub(super) from: u64,
}

/// A delivery commit's store operation.
pub(super) struct Transaction {
    pub(super) fence: Fence,
    /// The checkpoint it moves to.
    pub(super) to: u64,
    pub(super) dlq: String,
    pub(super) queues: Queues,
    pub(super) sends: Vec<QueueSend>,
    /// Dead letters of the records planned dead.
    pub(super) dead: Vec<QueueMessage>,
    /// The sequence number of each of the round's records, by index:
    /// numbers, not ids, so nothing is allocated per record for the rare
    /// in-commit refusal, and nothing is freed on the writer thread.
    pub(super) seqs: Vec<u64>,
}

impl Transaction {
    /// Runs the operation on the writer.
    pub(super) fn apply(self, ctx: &mut WriteContext<'_>) -> Result<Committed, StoreError> {
        // Validate everything before the first (unstaged) write.
        if !self.fence.holds(ctx)? {
            return Ok(Committed::LeaseLost);
        }
        let Transaction {
            fence,
            to,
            dlq,
            queues,
            sends,
            dead,
            seqs,
        } = self;
        if queues.queue_exists(&dlq).is_err() {
            return Err(StoreError::validation(format!(
                "the dead-letter queue {dlq} of pipe {} does not exist",
                fence.pipe
            )));
        }
        let failed = enqueue(ctx, &queues, sends)?;
        // A queue's batch is all or nothing. One refused when prepared
        // or inside the commit (the pre-check passed, so the queue
        // changed in between) wrote nothing; retrying here would hold
        // the writer, so its records go to the DLQ in this commit.
        let mut letters = dead;
        letters.extend(refused_letters(
            &fence.pipe,
            &dlq,
            &fence.table,
            &seqs,
            &failed,
            ctx.now_ms(),
        ));
        if !letters.is_empty() {
            let messages: Vec<NewMessage> = letters.into_iter().map(|m| m.message).collect();
            if let Err(e) = queues.send_in(ctx, &dlq, messages)? {
                tracing::error!(pipe = %fence.pipe, error = %e, "dead letters could not be enqueued");
            }
        }
        // Killed here, the process leaves this commit unwritten: the
        // messages above are not enqueued and the checkpoint has not
        // moved, so a restarted relay sends them once.
        if postbox_store::faults::hit(AFTER_ENQUEUE_BEFORE_CHECKPOINT) {
            return Err(StoreError::validation(format!(
                "fault point {AFTER_ENQUEUE_BEFORE_CHECKPOINT}: the delivery commit is abandoned"
            )));
        }
        ctx.set_checkpoint(&fence.table, &fence.reader, to)?;
        Ok(Committed::Done {
            failed_sends: failed,
        })
    }
}

impl Fence {
    /// Whether the lease row still names this relay and its token (renewed
    /// when half used) and the checkpoint is still where the records were
    /// read after: stream records are immutable, so this makes the read
    /// part of the transaction.
    pub(super) fn holds(&self, ctx: &mut WriteContext<'_>) -> Result<bool, StoreError> {
        Ok(
            lease::check_in(ctx, &self.pipe, &self.owner, self.token, self.lease_for)?
                && ctx.checkpoint(&self.table, &self.reader)?.unwrap_or(0) == self.from,
        )
    }
}

/// Validates and encodes each queue's messages (`sends`: per queue, each
/// message with the index of its record). Done before the commit, not on
/// the store's writer: the writer is the one serial part, and only
/// enqueues.
pub(super) fn prepare_sends(
    queues: &Queues,
    sends: Vec<(String, Vec<(usize, NewMessage)>)>,
) -> Vec<QueueSend> {
    sends
        .into_iter()
        .map(|(queue, list)| {
            let (index, messages): (Vec<usize>, Vec<_>) = list.into_iter().unzip();
            let prepared = queues.prepare_send(&queue, messages);
            (queue, index, prepared)
        })
        .collect()
}

/// Enqueues each queue's prepared messages; returns, for every message of
/// a queue that refused them, its record's index and why.
fn enqueue(
    ctx: &mut WriteContext<'_>,
    queues: &Queues,
    sends: Vec<QueueSend>,
) -> Result<Vec<(usize, String)>, StoreError> {
    let mut failed = Vec::new();
    for (queue, index, prepared) in sends {
        let sent = match prepared {
            Ok(prepared) => queues.send_prepared_in(ctx, prepared)?,
            Err(e) => Err(e),
        };
        if let Err(e) = sent {
            failed.extend(index.iter().map(|&i| (i, format!("queue {queue}: {e}"))));
        }
    }
    Ok(failed)
}

/// The dead letters of the records whose sends were refused inside the
/// commit (`failed`: record index and why; `seqs`: each record's sequence
/// number in `table`), for dead-letter queue `dlq` of pipe `pipe`, at
/// `now_ms`. The record itself is not at hand on the writer: its id is.
fn refused_letters(
    pipe: &str,
    dlq: &str,
    table: &str,
    seqs: &[u64],
    failed: &[(usize, String)],
    now_ms: u64,
) -> Vec<QueueMessage> {
    failed
        .iter()
        .map(|(i, e)| {
            let id = crate::record::record_id(table, seqs[*i]);
            let view = RecordView {
                json: &Value::Null,
                id: &id,
                created_ms: 0,
                images: None,
            };
            dead_letter(pipe, dlq, view, &DeadReason::Delivery(e.clone()), now_ms)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_sends_are_dead_lettered_by_record_id_with_the_reason() {
        let failed = [
            (2, "queue q: refused".to_owned()),
            (0, "queue r: gone".to_owned()),
        ];
        let letters = refused_letters("p", "dlq", "t", &[40, 41, 42], &failed, 1_000);
        let bodies: Vec<Value> = letters
            .iter()
            .map(|l| serde_json::from_str(&l.message.body).unwrap())
            .collect();
        assert!(letters.iter().all(|l| l.queue == "dlq"));
        let fields = |b: &Value| {
            (
                b["recordId"].as_str().unwrap().to_owned(),
                b["errorCode"].as_str().unwrap().to_owned(),
                b["reason"].as_str().unwrap().to_owned(),
            )
        };
        assert_eq!(
            bodies.iter().map(fields).collect::<Vec<_>>(),
            [
                (
                    "t#42".into(),
                    "DeliveryFailed".into(),
                    "delivery failed after every retry: queue q: refused".into()
                ),
                (
                    "t#40".into(),
                    "DeliveryFailed".into(),
                    "delivery failed after every retry: queue r: gone".into()
                ),
            ]
        );
        assert_eq!(bodies[0]["pipe"], "p");
        assert_eq!(bodies[0]["failedAt"], "1970-01-01T00:00:01.000Z");
    }
}
