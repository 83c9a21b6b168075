//! A commit's course from the pipe's task to the store and back: begun
//! (log lines written, the transaction built and queued to the store's
//! writer), kept in flight while the next records are planned, and
//! finished (awaited, counted, reported to the commit hook).
//!
//! Commits reach the writer in the order they were begun: queuing happens
//! when a commit is begun, not when it is awaited, and each commit's fence
//! checks the checkpoint the one before it moves, so a commit behind a
//! failed one writes nothing.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use postbox_store::StoreError;
use postbox_store::embedded::EmbeddedStore;

use super::RelayError;
use super::batch::Planned;
use super::commit::Commit;
use super::logs::append_logs;
use super::runner::Runner;
use super::stats::CommitCounts;
use super::transaction::{Committed, Fence, Transaction, prepare_sends};

/// A delivery commit queued to the store's writer.
type CommitTask = Pin<Box<dyn Future<Output = Result<Committed, StoreError>> + Send>>;

/// A commit handed to the writer, and what to count when it returns.
pub(super) struct InFlight {
    /// `None` for a commit that moved nothing and was not sent.
    task: Option<CommitTask>,
    /// The checkpoint it moves to.
    pub(super) to: u64,
    counts: CommitCounts,
}

impl Runner {
    /// Writes log lines, then commits the enqueues, dead letters and the
    /// checkpoint move in one store operation fenced by the lease.
    pub(super) async fn commit(
        &self,
        planned: &[Planned],
        c: Commit,
        token: u64,
    ) -> Result<u64, RelayError> {
        let started = self.begin_commit(planned, c, token).await?;
        self.finish_commit(started).await
    }

    /// Writes the log lines and hands the commit to the store's writer.
    pub(super) async fn begin_commit(
        &self,
        planned: &[Planned],
        mut c: Commit,
        token: u64,
    ) -> Result<InFlight, RelayError> {
        if !c.moves() {
            return Ok(InFlight {
                task: None,
                to: c.to,
                counts: CommitCounts::default(),
            });
        }
        self.write_logs(&c).await?;
        // Counted before the transaction takes the sends out of `c`.
        let counts = c.counts();
        let transaction = self.transaction(planned, &mut c, token);
        let task = queue_to_writer(&self.store, transaction);
        Ok(InFlight {
            task: Some(task),
            to: c.to,
            counts,
        })
    }

    /// Appends and syncs commit `c`'s log lines.
    ///
    /// The records were read before their commit was synced
    /// (`read_committed_stream`): the delivery commit is logged after them,
    /// so a crash loses the two together. A log line leaves the store at
    /// once, so it waits for the records' sync first.
    async fn write_logs(&self, c: &Commit) -> Result<(), RelayError> {
        if !c.logs.is_empty() {
            self.store.wait_synced().await?;
            append_logs(&c.logs)?;
        }
        Ok(())
    }

    /// The transaction writing commit `c` of `planned`, fenced by the lease
    /// with `token`; `c`'s sends move into it.
    fn transaction(&self, planned: &[Planned], c: &mut Commit, token: u64) -> Transaction {
        let dlq = self.spec.dead_letter_queue.clone();
        let now = self.options.clock.now_ms();
        let dead = c.dead_letters(&self.spec.name, &self.spec.table, &dlq, planned, now);
        let sends = prepare_sends(&self.queues, std::mem::take(&mut c.sends));
        Transaction {
            fence: Fence {
                pipe: self.spec.name.clone(),
                owner: self.options.owner.clone(),
                token,
                lease_for: self.lease,
                table: self.spec.table.clone(),
                reader: self.reader(),
                from: c.from,
            },
            to: c.to,
            dlq,
            queues: self.queues.clone(),
            sends,
            dead,
            seqs: planned.iter().map(|p| p.seq).collect(),
        }
    }

    /// Waits for a commit and counts what it did.
    pub(super) async fn finish_commit(&self, f: InFlight) -> Result<u64, RelayError> {
        let Some(task) = f.task else { return Ok(f.to) };
        let failed = match task.await {
            Ok(Committed::Done { failed_sends }) => failed_sends,
            Ok(Committed::LeaseLost) => return Err(RelayError::LeaseLost(self.spec.name.clone())),
            Err(e) => return Err(e.into()),
        };
        let to = f.to;
        self.counters
            .count_commit(&self.spec.name, to, f.counts, failed.len());
        if let Some(hook) = &self.options.on_commit {
            hook(&self.spec.name, to);
        }
        Ok(to)
    }
}

/// Queues `transaction` to the store's writer now, before the task is
/// awaited.
///
/// Answered at its commit, before the commit log syncs it: every effect of
/// a delivery is in this store (log-file lines were written and synced
/// before), and what a crash takes back it takes back together with the
/// checkpoint, so the relay sends it again. The relay moves on to the next
/// records without waiting out a sync.
fn queue_to_writer(store: &EmbeddedStore, transaction: Transaction) -> CommitTask {
    let store = store.clone();
    let task = async move {
        store
            .submit_unsynced(move |ctx| transaction.apply(ctx))
            .await
    };
    // Poll once now: that queues the operation to the writer, so commits
    // reach the writer in the order they were begun (the next one checks
    // the checkpoint this one moves).
    let mut task: CommitTask = Box::pin(task);
    match task.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(result) => Box::pin(std::future::ready(result)),
        Poll::Pending => task,
    }
}
