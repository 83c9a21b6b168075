//! What a pipe reports: its counters, kept by its task as commits are
//! made ([`Counters`]), and its lag, read from the store when asked
//! ([`PipeStats`]). The counters and the checkpoint they include are read
//! as one view.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use postbox_store::{ChangeStreams, StoreError};

use super::RelayError;
use super::runner::Runner;
use crate::plan::DeadReason;

/// Counters and lag of one pipe.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PipeStats {
    /// The pipe.
    pub pipe: String,
    /// Whether this relay holds the pipe's lease.
    pub holds_lease: bool,
    /// The checkpoint (sequence number of the last relayed record): while
    /// this relay holds the lease, the last commit its counters include
    /// (the stats are one view); otherwise the durable one in the store.
    pub checkpoint: u64,
    /// The stream's newest sequence number.
    pub head: u64,
    /// Records committed but not yet relayed (filtered ones included).
    pub records_behind: u64,
    /// Age of the oldest record not yet relayed, ms; `None` when caught up.
    pub oldest_unrelayed_age_ms: Option<u64>,
    /// Records read.
    pub read: u64,
    /// Records no filter matched.
    pub filtered: u64,
    /// Records delivered.
    pub delivered: u64,
    /// Messages enqueued (a bus record may yield several) and log lines.
    pub messages: u64,
    /// Records sent to the dead-letter queue.
    pub dead_lettered: u64,
    /// ... of which for a template error.
    pub template_errors: u64,
    /// ... of which for exceeding the maximum record age.
    pub too_old: u64,
    /// Batch retries.
    pub retries: u64,
    /// Batch bisections.
    pub bisections: u64,
    /// Delivery commits.
    pub commits: u64,
    /// Records the stream's retention removed before they were relayed
    /// (logged as errors; they cannot be dead-lettered).
    pub lost_to_retention: u64,
}

/// What one commit's records did, counted once the commit is made.
#[derive(Debug, Default)]
pub(super) struct CommitCounts {
    pub(super) filtered: u64,
    pub(super) delivered: u64,
    pub(super) logs: usize,
    pub(super) sends: usize,
    pub(super) dead: Vec<DeadReason>,
}

/// One pipe's counters.
#[derive(Default)]
pub(super) struct Counters {
    /// The checkpoint as counted: the last commit whose records the counters
    /// below include (None without the lease). Its lock is held while a
    /// commit is counted and while [`PipeStats`] are read, so the stats are
    /// one view even though the store shows a commit's checkpoint before the
    /// pipe's task has counted it.
    pub(super) counted: Mutex<Option<u64>>,
    pub(super) token: AtomicU64,
    pub(super) read: AtomicU64,
    filtered: AtomicU64,
    delivered: AtomicU64,
    messages: AtomicU64,
    dead_lettered: AtomicU64,
    template_errors: AtomicU64,
    too_old: AtomicU64,
    pub(super) retries: AtomicU64,
    pub(super) bisections: AtomicU64,
    commits: AtomicU64,
    pub(super) lost_to_retention: AtomicU64,
}

impl Counters {
    /// The pipe's lease is gone: its stats come from the store again.
    pub(super) fn without_lease(&self) {
        let mut counted = self.counted.lock().expect("relay counters");
        self.token.store(0, Relaxed);
        *counted = None;
    }

    /// Counts pipe `pipe`'s commit that moved the checkpoint to `to`, of
    /// whose sends `failed` were refused inside it and dead-lettered.
    pub(super) fn count_commit(&self, pipe: &str, to: u64, c: CommitCounts, failed: usize) {
        let mut counted = self.counted.lock().expect("relay counters");
        *counted = Some(to);
        self.commits.fetch_add(1, Relaxed);
        self.filtered.fetch_add(c.filtered, Relaxed);
        self.delivered
            .fetch_add(c.delivered.saturating_sub(failed as u64), Relaxed);
        self.messages.fetch_add(c.logs as u64, Relaxed);
        self.dead_lettered
            .fetch_add((c.dead.len() + failed) as u64, Relaxed);
        for r in &c.dead {
            match r {
                DeadReason::Template(e) => {
                    self.template_errors.fetch_add(1, Relaxed);
                    tracing::warn!(pipe = %pipe, error = %e, "record sent to the dead-letter queue");
                }
                DeadReason::TooOld { .. } => {
                    self.too_old.fetch_add(1, Relaxed);
                }
                DeadReason::Delivery(e) => {
                    tracing::warn!(pipe = %pipe, error = %e, "record sent to the dead-letter queue")
                }
            }
        }
        self.messages
            .fetch_add(c.sends.saturating_sub(failed) as u64, Relaxed);
    }

    /// The counters of pipe `pipe` and the checkpoint they include, as one
    /// view; the lag fields are left for the store to fill.
    pub(super) fn snapshot(&self, pipe: &str) -> (Option<u64>, PipeStats) {
        let counted = self.counted.lock().expect("relay counters");
        let stats = PipeStats {
            pipe: pipe.to_owned(),
            holds_lease: self.token.load(Relaxed) != 0,
            read: self.read.load(Relaxed),
            filtered: self.filtered.load(Relaxed),
            delivered: self.delivered.load(Relaxed),
            messages: self.messages.load(Relaxed),
            dead_lettered: self.dead_lettered.load(Relaxed),
            template_errors: self.template_errors.load(Relaxed),
            too_old: self.too_old.load(Relaxed),
            retries: self.retries.load(Relaxed),
            bisections: self.bisections.load(Relaxed),
            commits: self.commits.load(Relaxed),
            lost_to_retention: self.lost_to_retention.load(Relaxed),
            ..PipeStats::default()
        };
        (*counted, stats)
    }
}

impl Runner {
    /// The pipe's counters and its lag behind the stream's head.
    pub(super) async fn stats(&self) -> Result<PipeStats, RelayError> {
        let table = &self.spec.table;
        let (checkpoint, mut stats) = self.one_view().await?;
        let head = self.store.stream_head(table).await?;
        stats.oldest_unrelayed_age_ms = match self.store.read_stream(table, checkpoint, 1).await {
            Ok(r) => r.first().map(|r| {
                self.options
                    .clock
                    .now_ms()
                    .saturating_sub(r.approximate_creation_time_ms)
            }),
            Err(StoreError::TrimmedData(_)) => None,
            Err(e) => return Err(e.into()),
        };
        stats.checkpoint = checkpoint;
        stats.head = head;
        stats.records_behind = head.saturating_sub(checkpoint);
        Ok(stats)
    }

    /// The counters and the checkpoint they include. Without the lease
    /// that is the store's, read after the counters: if the pipe's task
    /// took the lease (or counted a commit) meanwhile, the store may show a
    /// commit the counters read before it do not include, so they are read
    /// again until nothing moved in between.
    async fn one_view(&self) -> Result<(u64, PipeStats), RelayError> {
        let (mut counted, mut stats) = self.counters.snapshot(&self.spec.name);
        loop {
            if let Some(c) = counted {
                return Ok((c, stats));
            }
            postbox_store::faults::hit(super::STATS_BEFORE_STORE);
            let stored = self
                .store
                .checkpoint(&self.spec.table, &self.reader())
                .await?
                .unwrap_or(0);
            let (again, now) = self.counters.snapshot(&self.spec.name);
            if again.is_none() && now == stats {
                return Ok((stored, stats));
            }
            (counted, stats) = (again, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::TemplateError;

    #[test]
    fn a_commit_is_counted_with_its_checkpoint_in_one_view() {
        let k = Counters::default();
        k.token.store(3, Relaxed);
        k.read.fetch_add(9, Relaxed);
        let dead = vec![
            DeadReason::Template(TemplateError::Invalid("x".into())),
            DeadReason::TooOld {
                age_seconds: 9,
                max_seconds: 1,
            },
            DeadReason::Delivery("refused".into()),
        ];
        let counts = CommitCounts {
            filtered: 2,
            delivered: 4,
            logs: 3,
            sends: 0,
            dead,
        };
        // One of the four delivering records' sends was refused inside the
        // commit: it is dead-lettered, not delivered.
        k.count_commit("p", 9, counts, 1);
        let (counted, s) = k.snapshot("p");
        assert_eq!(counted, Some(9));
        assert_eq!(
            s,
            PipeStats {
                pipe: "p".into(),
                holds_lease: true,
                read: 9,
                filtered: 2,
                delivered: 3,
                messages: 3,
                dead_lettered: 4,
                template_errors: 1,
                too_old: 1,
                commits: 1,
                ..PipeStats::default()
            }
        );
    }

    #[test]
    fn sends_count_as_messages_less_the_refused_ones() {
        let k = Counters::default();
        let counts = |sends| CommitCounts {
            delivered: 1,
            sends,
            ..CommitCounts::default()
        };
        k.count_commit("p", 1, counts(5), 2);
        assert_eq!(k.snapshot("p").1.messages, 3);
        k.count_commit("p", 2, counts(1), 2);
        assert_eq!(k.snapshot("p").1.messages, 3);
        assert_eq!(k.snapshot("p").1.delivered, 0);
    }

    #[test]
    fn without_the_lease_the_checkpoint_is_not_the_counters() {
        let k = Counters::default();
        k.token.store(3, Relaxed);
        k.count_commit("p", 5, CommitCounts::default(), 0);
        k.without_lease();
        let (counted, s) = k.snapshot("p");
        assert_eq!(counted, None);
        assert!(!s.holds_lease);
        // The counts stay: they are the relay's, not the lease's.
        assert_eq!(s.commits, 1);
    }
}
