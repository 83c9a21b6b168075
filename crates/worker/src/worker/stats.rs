//! What a worker counts: the counters its batches bump as they go, and the
//! snapshot of them that [`Worker::stats`](super::Worker::stats) returns.

postbox_stats::counters! {
    /// A worker's counters.
    pub struct WorkerStats;
    /// The live counters behind [`WorkerStats`], shared by a worker's clones.
    pub(super) struct Counters {
        /// Messages received.
        received,
        /// Messages deleted (every matching subscription final).
        deleted,
        /// Handler runs whose completion committed.
        completed,
        /// Retryable failures (claim FAILED, message kept).
        retried,
        /// Claims marked DEAD with a dead letter.
        dead,
        /// Poison messages recorded and deleted.
        poison,
        /// Completions or transitions refused because the lease was taken over.
        fenced,
        /// Deliveries that waited for a predecessor or another worker's lease.
        waited,
        /// Predecessors read from the log and delivered ahead of their message.
        predecessors_from_log,
        /// Durable events that matched no subscription.
        delivered_to_nobody,
        /// Deletes or visibility changes the queue refused (expired receipt
        /// handles); the messages come back and are settled then.
        settle_failures,
    }
}

pub(super) use postbox_stats::bump;
