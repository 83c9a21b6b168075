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

mod batch;
mod commit;
mod inflight;
mod logs;
mod precheck;
mod retry;
mod setup;
mod stats;
mod transaction;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use postbox_queue::{QueueError, Queues};
use postbox_store::embedded::{Clock, EmbeddedStore, SystemClock};
use postbox_store::{ChangeStreams, StoreError};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{PipeSpec, RelayConfig, Rule, StartPosition};
use crate::lease::{self, Decision};
use crate::plan::Outcome;

use batch::{batches, plan_records};
use commit::Commit;
use inflight::InFlight;
use precheck::FactsCache;
use setup::prepare;
use stats::Counters;

pub use stats::PipeStats;

/// Fault point inside a delivery commit, after the messages are enqueued
/// and before the checkpoint moves (see `postbox_store::faults`).
pub const AFTER_ENQUEUE_BEFORE_CHECKPOINT: &str = "relay::after_enqueue_before_checkpoint";
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
            runners.push(Arc::new(Runner {
                spec,
                buses: buses.clone(),
                store: store.clone(),
                queues: queues.clone(),
                options: options.clone(),
                lease: config.lease,
                counters: Counters::default(),
                facts: FactsCache::new(),
            }));
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

/// One pipe's task state.
struct Runner {
    spec: PipeSpec,
    buses: Arc<BTreeMap<String, Vec<Rule>>>,
    store: EmbeddedStore,
    queues: Queues,
    options: RelayOptions,
    lease: Duration,
    counters: Counters,
    /// Queue facts for pre-checks.
    facts: FactsCache,
}

impl Runner {
    fn reader(&self) -> String {
        format!("pipe:{}", self.spec.name)
    }

    async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut failures = 0u32;
        loop {
            if stopped(&stop) {
                return;
            }
            match self.session(&mut stop).await {
                Ok(()) => return,
                Err(e) => {
                    self.counters.without_lease();
                    failures += 1;
                    tracing::warn!(pipe = %self.spec.name, error = %e, "relay session ended; starting over");
                    let pause = Duration::from_millis(50 * u64::from(failures.min(20)));
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        _ = stop.changed() => return,
                    }
                }
            }
        }
    }

    /// Holds the lease and relays until stopped or the lease is lost.
    async fn session(&self, stop: &mut watch::Receiver<bool>) -> Result<(), RelayError> {
        let tick = self.lease / 3;
        let token = loop {
            match lease::acquire(
                &self.store,
                &self.spec.name,
                &self.options.owner,
                self.lease,
            )
            .await?
            {
                Decision::Take(l) => break l.token,
                Decision::Held(_) => {
                    tokio::select! {
                        () = tokio::time::sleep(tick) => {}
                        _ = stop.changed() => return Ok(()),
                    }
                }
            }
        };
        self.counters.token.store(token, Relaxed);
        tracing::info!(pipe = %self.spec.name, owner = %self.options.owner, token, "holding the pipe's lease");
        let mut inflight: Option<InFlight> = None;
        let result = self.deliver(stop, token, &mut inflight).await;
        // A commit still in flight when the session ends is counted, and
        // never left behind half-known.
        if let Some(f) = inflight.take() {
            let _ = self.finish_commit(f).await;
        }
        result
    }

    /// Relays while holding the lease with `token`.
    async fn deliver(
        &self,
        stop: &mut watch::Receiver<bool>,
        token: u64,
        inflight: &mut Option<InFlight>,
    ) -> Result<(), RelayError> {
        let table = self.spec.table.clone();
        let tick = self.lease / 3;
        let mut after = self.start_checkpoint(token).await?;
        *self.counters.counted.lock().expect("relay counters") = Some(after);
        loop {
            // Keep a commit in flight only while more records are waiting.
            if let Some(f) = inflight.take() {
                if stopped(stop) || self.store.committed_stream_head(&table).await? <= after {
                    self.finish_commit(f).await?;
                } else {
                    *inflight = Some(f);
                }
            }
            if stopped(stop) {
                lease::release(&self.store, &self.spec.name, &self.options.owner, token).await?;
                self.counters.without_lease();
                return Ok(());
            }
            let more = if inflight.is_some() {
                true
            } else {
                tokio::select! {
                    r = self.store.wait_for_committed_records(&table, after, tick) => r?,
                    _ = stop.changed() => continue,
                }
            };
            if !more {
                let renewed = lease::renew(
                    &self.store,
                    &self.spec.name,
                    &self.options.owner,
                    token,
                    self.lease,
                )
                .await?;
                if !renewed {
                    return Err(RelayError::LeaseLost(self.spec.name.clone()));
                }
                continue;
            }
            let records = match self
                .store
                .read_committed_stream(&table, after, self.options.max_records_per_commit)
                .await
            {
                Err(StoreError::TrimmedData(_)) => {
                    if let Some(f) = inflight.take() {
                        self.finish_commit(f).await?;
                    }
                    after = self.skip_trimmed(after, token).await?;
                    continue;
                }
                other => other?,
            };
            after = self.relay(records, after, token, inflight).await?;
        }
    }

    /// The records after `after` were removed by the stream's retention
    /// before they were relayed: they are gone and cannot even be
    /// dead-lettered. Says so loudly, counts them, and moves on to the
    /// oldest retained record rather than stopping the pipe for ever.
    async fn skip_trimmed(&self, after: u64, token: u64) -> Result<u64, RelayError> {
        let oldest = self.store.read_stream(&self.spec.table, 0, 1).await?;
        let Some(first) = oldest.first().map(|r| r.sequence_number) else {
            return Ok(after);
        };
        let lost = first.saturating_sub(after + 1);
        tracing::error!(
            pipe = %self.spec.name, lost, from = after + 1, to = first - 1,
            "records expired from the stream before they were relayed; raise the stream retention or fix the relay's lag"
        );
        let mut c = Commit::new(after);
        c.to = first - 1;
        let at = self.commit(&[], c, token).await?;
        self.counters.lost_to_retention.fetch_add(lost, Relaxed);
        Ok(at)
    }

    /// The checkpoint to start from; a LATEST pipe without one starts at the
    /// stream's head, recorded under the lease.
    async fn start_checkpoint(&self, token: u64) -> Result<u64, RelayError> {
        let reader = self.reader();
        if let Some(at) = self.store.checkpoint(&self.spec.table, &reader).await? {
            return Ok(at);
        }
        if self.spec.start == StartPosition::TrimHorizon {
            return Ok(0);
        }
        let head = self.store.stream_head(&self.spec.table).await?;
        let (pipe, owner, table, lease_for) = (
            self.spec.name.clone(),
            self.options.owner.clone(),
            self.spec.table.clone(),
            self.lease,
        );
        let held = self
            .store
            .submit(move |ctx| {
                if !lease::check_in(ctx, &pipe, &owner, token, lease_for)? {
                    return Ok(None);
                }
                Ok(Some(match ctx.checkpoint(&table, &reader)? {
                    Some(at) => at,
                    None => {
                        ctx.set_checkpoint(&table, &reader, head)?;
                        head
                    }
                }))
            })
            .await?;
        held.ok_or_else(|| RelayError::LeaseLost(self.spec.name.clone()))
    }

    /// Plans and delivers `records` (read after checkpoint `after`);
    /// returns the new checkpoint. When every batch passes its pre-check the
    /// commit is only started and left in `inflight` (the previous one is
    /// finished after it was started), so planning the next records overlaps
    /// this commit. Its checkpoint check makes it write nothing if
    /// the one before it failed.
    async fn relay(
        &self,
        records: Vec<postbox_store::api::StreamRecord>,
        after: u64,
        token: u64,
        inflight: &mut Option<InFlight>,
    ) -> Result<u64, RelayError> {
        let now = self.options.clock.now_ms();
        let mut planned = plan_records(&self.spec, &self.buses, &records, now);
        self.counters.read.fetch_add(planned.len() as u64, Relaxed);
        let mut facts = self.facts.take();
        let batches = batches(&planned, self.spec.batch_size);
        let all_pass = batches
            .iter()
            .all(|b| self.precheck(&planned, b, &mut facts).is_ok());
        if all_pass {
            self.facts.put(facts);
            let mut commit = Commit::new(after);
            for (i, p) in planned.iter_mut().enumerate() {
                let outcome = std::mem::replace(&mut p.outcome, Outcome::Filtered);
                commit.add_outcome(i, p.seq, outcome, None);
            }
            let started = self.begin_commit(&planned, commit, token).await?;
            let to = started.to;
            if let Some(previous) = inflight.replace(started) {
                self.finish_commit(previous).await?;
            }
            return Ok(to);
        }
        // The slow path runs alone: the commit in flight first.
        if let Some(previous) = inflight.take() {
            self.finish_commit(previous).await?;
        }
        self.relay_batch_by_batch(&planned, batches, after, token)
            .await
    }
}

/// Whether the relay was told to stop (or dropped without being stopped).
fn stopped(stop: &watch::Receiver<bool>) -> bool {
    *stop.borrow() || stop.has_changed().is_err()
}
