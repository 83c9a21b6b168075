//! The read gate of a store with a commit log: no reader sees a commit
//! before its log record is synced.
//!
//! With a commit log the writer commits a batch in redb (readers can see it
//! from then on) before the sync thread has synced the batch's record, so
//! that it can run the next batch meanwhile. A reader therefore takes its
//! snapshot first and then waits until every commit it might hold is
//! synced: the writer announces a commit's LSN ([`SyncGate::committing`])
//! before redb publishes it, so a snapshot holds no commit newer than what
//! the reader reads from the gate afterwards ([`SyncGate::visible`]). The
//! wait is at most one sync, none when the log is idle, and asynchronous:
//! a waiting reader holds no runtime thread.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::StoreError;

/// See the module documentation.
pub(crate) struct SyncGate {
    logged: bool,
    /// The LSN of the newest commit redb publishes or has published.
    visible: AtomicU64,
    /// Every record up to this LSN is synced.
    synced: AtomicU64,
    failed: AtomicBool,
    /// `synced`, for waiters ([`SyncGate::wait_for`]); also bumped when the
    /// log fails, so they wake to the failure.
    synced_watch: tokio::sync::watch::Sender<u64>,
}

impl SyncGate {
    pub(crate) fn new(logged: bool) -> SyncGate {
        SyncGate {
            logged,
            visible: AtomicU64::new(0),
            synced: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            synced_watch: tokio::sync::watch::channel(0).0,
        }
    }

    /// Whether the store commits through a log (else the gate never waits).
    pub(crate) fn logged(&self) -> bool {
        self.logged
    }

    /// The writer is about to commit the batch with record `lsn`.
    pub(crate) fn committing(&self, lsn: u64) {
        self.visible.store(lsn, Ordering::Release);
    }

    /// Every record through `lsn` is on disk.
    pub(crate) fn synced(&self, lsn: u64) {
        self.synced.fetch_max(lsn, Ordering::AcqRel);
        self.synced_watch.send_if_modified(|at| {
            let moved = lsn > *at;
            *at = (*at).max(lsn);
            moved
        });
    }

    /// The log can no longer be synced: waiting readers get an error.
    pub(crate) fn fail(&self) {
        self.failed.store(true, Ordering::Release);
        self.synced_watch.send_modify(|_| {});
    }

    /// The LSN of the newest commit redb publishes or has published: every
    /// commit a snapshot taken before this call holds is at or below it.
    /// While the writer runs a batch, the batch before it.
    pub(crate) fn visible(&self) -> u64 {
        self.visible.load(Ordering::Acquire)
    }

    /// Waits until every record through `lsn` is synced.
    pub(crate) async fn wait_for(&self, lsn: u64) -> Result<(), StoreError> {
        if self.synced.load(Ordering::Acquire) >= lsn {
            return Ok(());
        }
        let mut synced = self.synced_watch.subscribe();
        loop {
            // What was waited for is durable even if a later sync failed.
            if *synced.borrow_and_update() >= lsn {
                return Ok(());
            }
            if self.failed.load(Ordering::Acquire) {
                return Err(failed());
            }
            if synced.changed().await.is_err() {
                return Err(failed());
            }
        }
    }
}

fn failed() -> StoreError {
    StoreError::Storage("the store stopped after its commit log could not be synced".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn a_reader_waits_for_the_sync_of_what_it_can_see() {
        let gate = Arc::new(SyncGate::new(true));
        gate.wait_for(gate.visible()).await.unwrap();
        gate.committing(3);
        let reader = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.wait_for(gate.visible()).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!reader.is_finished(), "read before record 3 was synced");
        gate.synced(2);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!reader.is_finished(), "read before record 3 was synced");
        gate.synced(3);
        reader.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_failed_sync_ends_the_wait_with_an_error() {
        let gate = Arc::new(SyncGate::new(true));
        gate.committing(1);
        let reader = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.wait_for(1).await })
        };
        tokio::task::yield_now().await;
        gate.fail();
        assert!(reader.await.unwrap().is_err());
    }

    #[tokio::test]
    async fn what_was_synced_before_a_failure_stays_readable() {
        let gate = SyncGate::new(true);
        gate.committing(2);
        gate.synced(1);
        gate.fail();
        gate.wait_for(1).await.unwrap();
        assert!(gate.wait_for(2).await.is_err());
    }
}
