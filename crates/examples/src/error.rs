//! The examples' error: what failed, on which component, and what to do.

use postbox_engine::{EmitError, StartError};
use postbox_queue::QueueError;
use postbox_relay::RelayError;
use postbox_store::StoreError;
use postbox_worker::WorkerError;

/// Why an example could not run to the end.
#[derive(Debug, thiserror::Error)]
pub enum ExampleError {
    /// The item store refused or failed a call.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// A queue refused or failed a call.
    #[error("queue: {0}")]
    Queue(#[from] QueueError),
    /// The engine refused to start (the catalog breaks the contract).
    #[error(transparent)]
    Start(#[from] StartError),
    /// An emit wrote nothing.
    #[error("emit: {0}")]
    Emit(#[from] EmitError),
    /// The relay could not start or failed.
    #[error("relay: {0}")]
    Relay(#[from] RelayError),
    /// A worker could not start or failed.
    #[error("worker: {0}")]
    Worker(#[from] WorkerError),
    /// Writing the output, or a file or socket, failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The example's directory already holds a store.
    #[error(
        "the example runs in a fresh directory, but {0} already holds a store (postbox.redb); pass an empty or new directory"
    )]
    DirectoryInUse(std::path::PathBuf),
    /// Something did not happen in time; says what was still missing.
    #[error("timed out after {seconds}s waiting for {what}; still missing: {missing}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        seconds: u64,
        /// What had not happened, for the person reading the error.
        missing: String,
    },
    /// A component answered something the example does not expect.
    /// The node did not start.
    #[error("the node: {0}")]
    Node(String),
    #[error("unexpected: {0}")]
    Unexpected(String),
}
