//! The relay loop, one task per pipe: hold the pipe's lease, wait for
//! stream records (woken by the store's commits, no polling), plan each
//! record (filter, age, template), deliver in batches, and move the
//! checkpoint in the same commit as the enqueues.
//!
//! # One transaction per delivery, fenced
//!
//! Records are read from a snapshot and planned off the writer thread (the
//! writer must stay quick); the delivery is one `EmbeddedStore::submit`
//! operation that (1) checks the lease row still names this relay and its
//! token, (2) checks the checkpoint still equals the position the records
//! were read after — stream records are immutable, so this makes the read
//! part of the transaction — (3) enqueues the messages and dead letters, and
//! (4) moves the checkpoint. If (1) or (2) fails nothing is written. So a
//! crash anywhere leaves either the enqueues and the checkpoint move, or
//! neither: the relay itself adds no duplicates and loses nothing.
//!
//! Many batches go into one commit (up to `max_records_per_commit`
//! records): the batch is the unit of retry and bisection, the commit the
//! unit of durability, so throughput does not pay one fsync per 10 records.
//! One commit is kept in flight while the next records are planned; it is
//! queued to the writer before the next one, whose checkpoint check makes
//! it write nothing if this one failed. A commit is answered once it is
//! made, not once the commit log has synced it
//! (`EmbeddedStore::submit_unsynced`): a crash that takes it back takes its
//! checkpoint move too.
//!
//! # Failures
//!
//! Before a batch is committed its messages are checked against their
//! queues (queue exists, body and attributes valid, size within the
//! queue's maximum, FIFO ids valid). A failing batch is retried with
//! exponential backoff up to `max_retries`, then bisected; a record that
//! still fails alone goes to the dead-letter queue with the reason, and the
//! relay moves on. Template errors and records older than the maximum age
//! go to the dead-letter queue at once: retrying cannot fix them.
//!
//! Log-file targets are appended and fsync'd before the commit that moves
//! the checkpoint: a crash between the two repeats those lines (at least
//! once); queues never see a duplicate from the relay.
//!
//! Records the stream's retention removed before they were relayed cannot
//! be delivered or dead-lettered: they are logged as an error, counted in
//! [`PipeStats::lost_to_retention`], and the relay continues.
//!
//! Module map: `runner` (a pipe's task: lease, wait, read, relay a round),
//! `batch` (records planned and cut into batches), `precheck` (SendMessage's
//! checks before a commit), `retry` (the slow path: retry, bisect,
//! dead-letter), `commit` (what one commit writes), `transaction` (the
//! store operation that writes it, fenced), `inflight` (a commit's course:
//! begun, in flight, finished and counted), `logs` (log-file targets),
//! `stats` (counters and lag), `setup` (the checks at start).

mod batch;
mod commit;
mod inflight;
mod logs;
mod precheck;
mod retry;
mod runner;
mod setup;
mod stats;
mod transaction;

use std::sync::Arc;

use postbox_queue::{QueueError, Queues};
use postbox_store::StoreError;
use postbox_store::embedded::EmbeddedStore;
use postbox_store::{Clock, SystemClock};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::RelayConfig;
use crate::lease;
use runner::Runner;
use setup::prepare;

pub use stats::PipeStats;

/// Fault point inside a delivery commit, after the messages are enqueued
/// and before the checkpoint moves (see `postbox_store::faults`).
pub const AFTER_ENQUEUE_BEFORE_CHECKPOINT: &str = "relay::after_enqueue_before_checkpoint";
/// Fault point in [`Relay::stats`] of a pipe this relay holds no lease on,
/// after its counters are read and before the store's checkpoint is.
pub const STATS_BEFORE_STORE: &str = "relay::stats_before_store";
/// Called after each delivery commit with the pipe's name and its new
/// checkpoint.
pub type CommitHook = Arc<dyn Fn(&str, u64) + Send + Sync>;

/// How a relay runs.
#[derive(Clone)]
pub struct RelayOptions {
    /// This relay's identity in lease rows; unique per process.
    pub owner: String,
    /// Most records read and delivered in one commit.
    pub max_records_per_commit: usize,
    /// "Now" for record ages; pass the store's clock.
    pub clock: Arc<dyn Clock>,
    /// Called after each delivery commit with the pipe's name and the
    /// checkpoint it moved to (benchmarks measure lag with it). The commit
    /// is made but may not be synced yet: a crash of the machine (not of
    /// the process alone) can take it back, and the relay then delivers
    /// those records again.
    pub on_commit: Option<CommitHook>,
}

impl Default for RelayOptions {
    fn default() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        RelayOptions {
            owner: format!("relay-{}-{nanos:09}", std::process::id()),
            max_records_per_commit: 1000,
            clock: Arc::new(SystemClock),
            on_commit: None,
        }
    }
}

impl std::fmt::Debug for RelayOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayOptions")
            .field("owner", &self.owner)
            .field("max_records_per_commit", &self.max_records_per_commit)
            .finish_non_exhaustive()
    }
}

/// A relay failure.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RelayError {
    /// The store failed (the relay retries the session).
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// A queue could not be created or inspected.
    #[error("queue {queue}: {error}")]
    Queue {
        /// The queue.
        queue: String,
        /// What SQS semantics said.
        error: QueueError,
    },
    /// Another relay took the lease, or moved the checkpoint.
    #[error("pipe {0}: the lease was lost to another relay")]
    LeaseLost(String),
    /// A log-file target could not be written.
    #[error("log file {path}: {error}")]
    Log {
        /// The file.
        path: String,
        /// The I/O error.
        error: String,
    },
    /// The pipe cannot run as configured.
    #[error("pipe {pipe}: {message}")]
    Setup {
        /// The pipe.
        pipe: String,
        /// What is wrong.
        message: String,
    },
}

/// A running relay: one task per pipe.
pub struct Relay {
    runners: Vec<Arc<Runner>>,
    tasks: Vec<JoinHandle<()>>,
    stop: watch::Sender<bool>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("pipes", &self.runners.len())
            .finish_non_exhaustive()
    }
}

impl Relay {
    /// Checks the pipes against the store (source tables have streams,
    /// queues exist or are created), then starts one task per pipe.
    pub async fn start(
        store: EmbeddedStore,
        queues: Queues,
        config: RelayConfig,
        options: RelayOptions,
    ) -> Result<Relay, RelayError> {
        lease::ensure_table(&store).await?;
        let buses = Arc::new(config.buses.clone());
        let (stop, _) = watch::channel(false);
        let mut runners = Vec::new();
        for spec in config.pipes {
            prepare(&store, &queues, &spec, &buses, config.create_missing_queues).await?;
            for w in &spec.warnings {
                tracing::warn!(pipe = %spec.name, "{w}");
            }
            runners.push(Arc::new(Runner::new(
                spec,
                buses.clone(),
                store.clone(),
                queues.clone(),
                options.clone(),
                config.lease,
            )));
        }
        let tasks = runners
            .iter()
            .map(|r| tokio::spawn(r.clone().run(stop.subscribe())))
            .collect();
        Ok(Relay {
            runners,
            tasks,
            stop,
        })
    }

    /// Counters and lag of every pipe.
    pub async fn stats(&self) -> Result<Vec<PipeStats>, RelayError> {
        let mut out = Vec::new();
        for r in &self.runners {
            out.push(r.stats().await?);
        }
        Ok(out)
    }

    /// Stops every pipe after its current commit and gives up the leases.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}
