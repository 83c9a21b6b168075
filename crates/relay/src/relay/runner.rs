//! One pipe's task ([`Runner`]): hold the pipe's lease, wait for stream
//! records (woken by the store's commits, no polling), read them after the
//! checkpoint, and relay each round — plan the records, pre-check their
//! batches, and when all pass begin one commit for the round and keep it
//! in flight while the next records are planned; otherwise go batch by
//! batch ([`super::retry`]). It also owns the rounds' edges: where a pipe
//! starts without a checkpoint, records the stream's retention removed
//! before they were relayed, and a session that ends in an error, which is
//! started over.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use postbox_item::Item;
use postbox_queue::Queues;
use postbox_store::api::StreamRecord;
use postbox_store::embedded::EmbeddedStore;
use postbox_store::{ChangeStreams, StoreError};
use tokio::sync::watch;

use super::batch::{batches, plan_records};
use super::commit::Commit;
use super::inflight::InFlight;
use super::precheck::FactsCache;
use super::stats::Counters;
use super::{RelayError, RelayOptions};
use crate::config::{PipeSpec, Rule, StartPosition};
use crate::lease::{self, Decision};

/// One pipe's task state.
pub(super) struct Runner {
    pub(super) spec: PipeSpec,
    pub(super) buses: Arc<BTreeMap<String, Vec<Rule>>>,
    pub(super) store: EmbeddedStore,
    pub(super) queues: Queues,
    pub(super) options: RelayOptions,
    /// How long the pipe's lease lasts without renewal.
    pub(super) lease: Duration,
    pub(super) counters: Counters,
    /// Queue facts for pre-checks.
    pub(super) facts: FactsCache,
}

impl Runner {
    /// The state of pipe `spec`'s task, before it runs.
    pub(super) fn new(
        spec: PipeSpec,
        buses: Arc<BTreeMap<String, Vec<Rule>>>,
        store: EmbeddedStore,
        queues: Queues,
        options: RelayOptions,
        lease: Duration,
    ) -> Runner {
        Runner {
            spec,
            buses,
            store,
            queues,
            options,
            lease,
            counters: Counters::default(),
            facts: FactsCache::new(),
        }
    }

    /// The pipe's checkpoint reader in the store.
    pub(super) fn reader(&self) -> String {
        format!("pipe:{}", self.spec.name)
    }

    /// The pipe's task: sessions until stopped, each one started over after
    /// a failure, after a pause that grows with the failures.
    pub(super) async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
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
                    let pause = pause_after(failures);
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
            // Records the pipe's filters refuse on their keys are read
            // without their images.
            let mut refused = Vec::new();
            let spec = &self.spec;
            let read = if spec.filters_on_keys() {
                let mut wanted = |seq: u64, keys: &Item| {
                    let allowed = spec.keys_allow(keys);
                    if !allowed {
                        refused.push(seq);
                    }
                    allowed
                };
                self.store
                    .read_committed_stream_where(
                        &table,
                        after,
                        self.options.max_records_per_commit,
                        &mut wanted,
                    )
                    .await
            } else {
                self.store
                    .read_committed_stream(&table, after, self.options.max_records_per_commit)
                    .await
            };
            let records = match read {
                Err(StoreError::TrimmedData(_)) => {
                    if let Some(f) = inflight.take() {
                        self.finish_commit(f).await?;
                    }
                    after = self.skip_trimmed(after, token).await?;
                    continue;
                }
                other => other?,
            };
            after = self
                .relay(records, &refused, after, token, inflight)
                .await?;
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
        records: Vec<StreamRecord>,
        refused: &[u64],
        after: u64,
        token: u64,
        inflight: &mut Option<InFlight>,
    ) -> Result<u64, RelayError> {
        let now = self.options.clock.now_ms();
        let mut planned = plan_records(&self.spec, &self.buses, records, refused, now);
        self.counters.read.fetch_add(planned.len() as u64, Relaxed);
        let mut facts = self.facts.take();
        let batches = batches(&planned, self.spec.batch_size);
        let all_pass = batches
            .iter()
            .all(|b| self.precheck(&planned, b, &mut facts).is_ok());
        if all_pass {
            self.facts.put(facts);
            let commit = Commit::taking_all(&mut planned, after);
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

/// The pause before session `failures` (from 1) starts over: 50 ms more
/// for each failure in a row, at most a second.
fn pause_after(failures: u32) -> Duration {
    Duration::from_millis(50 * u64::from(failures.min(20)))
}

/// Whether the relay was told to stop (or dropped without being stopped).
fn stopped(stop: &watch::Receiver<bool>) -> bool {
    *stop.borrow() || stop.has_changed().is_err()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_session_starts_over_after_a_pause_growing_to_a_second() {
        let pauses: Vec<u128> = [1, 2, 3, 20, 21, 1000]
            .into_iter()
            .map(|f| pause_after(f).as_millis())
            .collect();
        assert_eq!(pauses, [50, 100, 150, 1000, 1000, 1000]);
    }
}
