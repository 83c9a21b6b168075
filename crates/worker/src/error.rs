//! The worker's errors: one enum for the library surface.

use postbox_queue::QueueError;
use postbox_store::StoreError;

use crate::claim::MalformedClaim;

/// A failed inbox or worker operation.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The item store refused or failed a call.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The queue refused or failed a call.
    #[error("queue: {0}")]
    Queue(#[from] QueueError),
    /// The caller's lease was taken over (it ran out while the handler ran,
    /// and another worker claimed the event): this worker may not move the
    /// claim, and its handler's writes were NOT committed.
    #[error(
        "the lease on {key} was taken over by another worker; this worker's result was refused (fencing)"
    )]
    Fenced {
        /// The claim's pk.
        key: String,
    },
    /// A handler's own write was refused by its condition; nothing of the
    /// completion committed.
    #[error("handler write {index} ({write}) was refused: {reason}")]
    WriteRefused {
        /// Index of the write among the handler's writes.
        index: usize,
        /// What the write was.
        write: String,
        /// The cancellation reason code.
        reason: String,
    },
    /// A stored claim row could not be decoded.
    #[error(transparent)]
    MalformedClaim(#[from] MalformedClaim),
    /// An event the worker needs is not in the log.
    #[error("event {seq} of tenant {tenant} is not in the log: {detail}")]
    MissingEvent {
        /// The tenant.
        tenant: String,
        /// The seq.
        seq: u64,
        /// What was found instead.
        detail: String,
    },
    /// The worker refuses to start with this configuration.
    #[error("the worker refuses to start: {0}")]
    Config(String),
}

/// Result of a worker call.
pub type WorkerResult<T> = Result<T, WorkerError>;
