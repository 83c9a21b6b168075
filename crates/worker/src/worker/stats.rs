//! What a worker counts: the counters its batches bump as they go, and the
//! snapshot of them that [`Worker::stats`](super::Worker::stats) returns.

use std::sync::atomic::{AtomicU64, Ordering};

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

/// The live counters behind [`WorkerStats`], shared by a worker's clones.
#[derive(Default)]
pub(super) struct Counters {
    pub(super) received: AtomicU64,
    pub(super) deleted: AtomicU64,
    pub(super) completed: AtomicU64,
    pub(super) retried: AtomicU64,
    pub(super) dead: AtomicU64,
    pub(super) poison: AtomicU64,
    pub(super) fenced: AtomicU64,
    pub(super) waited: AtomicU64,
    pub(super) predecessors_from_log: AtomicU64,
    pub(super) delivered_to_nobody: AtomicU64,
    pub(super) settle_failures: AtomicU64,
}

impl Counters {
    /// The counters as they are now.
    pub(super) fn snapshot(&self) -> WorkerStats {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        WorkerStats {
            received: g(&self.received),
            deleted: g(&self.deleted),
            completed: g(&self.completed),
            retried: g(&self.retried),
            dead: g(&self.dead),
            poison: g(&self.poison),
            fenced: g(&self.fenced),
            waited: g(&self.waited),
            predecessors_from_log: g(&self.predecessors_from_log),
            delivered_to_nobody: g(&self.delivered_to_nobody),
            settle_failures: g(&self.settle_failures),
        }
    }
}

/// Adds one to a counter.
pub(super) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}
