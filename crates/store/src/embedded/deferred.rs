//! A redb storage backend whose `sync_data` runs on a thread of its own.
//! The store wraps redb's `FileBackend` in it when it has a commit log.
//!
//! redb's durable commit writes the commit's pages and its header, then
//! syncs. With this backend that sync is handed to the backend's thread and
//! the commit returns while the disk works; the writer goes on with the next
//! batch instead of waiting several milliseconds. Order is kept: any later
//! `write` or `set_len` (a later commit's pages, the next header) waits until
//! the sync before it finished, so the file never holds a later commit's
//! bytes before an earlier commit is on disk. A crash while a sync is in
//! flight is therefore the same as a crash inside redb's own commit: the
//! file comes back at the commit before, or at this one.
//!
//! Commits without durability keep their pages in redb's write buffer, so
//! they do not wait, but whatever writes to the file does while a sync is
//! in flight: a transaction that grows the file (redb resizes it and syncs
//! the new length at once), redb's evictions when its write buffer is over
//! budget, and a reader that misses the cache while committed pages are
//! buffered (redb then writes some of them out first). Those wait as the
//! writer used to wait for every checkpoint; with the store within its
//! cache (1 GiB by default) the first is the only one the benchmarks hit.
//!
//! So a durable commit is durable only once [`SyncState::synced`] has
//! passed the sync it asked for; the commit log keeps every record until
//! then (see `wal`).

use std::fmt;
use std::ops::Bound;
use std::sync::{Arc, Condvar, Mutex};

use redb::{BackendError, StorageBackend};

/// What redb's backend I/O methods return (without its experimental API).
type BackendIoError = std::io::Error;

/// Progress of the syncs asked of a [`DeferredSync`] backend.
#[derive(Default)]
pub(crate) struct SyncState {
    inner: Mutex<Counts>,
    changed: Condvar,
}

#[derive(Default)]
struct Counts {
    /// Syncs asked for so far.
    requested: u64,
    /// Syncs finished: every write before the `done`-th request is on disk.
    done: u64,
    /// The failed sync; every later write and sync reports it, and no sync
    /// after it finishes.
    failed: Option<String>,
    /// The backend is closing: the thread ends once nothing is asked of it.
    stopping: bool,
}

impl SyncState {
    /// The number of syncs asked for so far: once [`SyncState::synced`]
    /// reaches it, every write made before it is on disk.
    pub(crate) fn requested(&self) -> u64 {
        self.inner.lock().unwrap().requested
    }

    /// The number of syncs finished.
    pub(crate) fn synced(&self) -> u64 {
        self.inner.lock().unwrap().done
    }

    /// Why a sync failed, if one did.
    pub(crate) fn failure(&self) -> Option<String> {
        self.inner.lock().unwrap().failed.clone()
    }

    /// Waits until every sync asked for so far has finished.
    pub(crate) fn wait_all(&self) -> Result<(), String> {
        let mut counts = self.inner.lock().unwrap();
        while counts.done < counts.requested && counts.failed.is_none() {
            counts = self.changed.wait(counts).unwrap();
        }
        match &counts.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
impl SyncState {
    /// A sync is asked for, as the backend's `sync_data` does.
    pub(crate) fn ask(&self) {
        self.inner.lock().unwrap().requested += 1;
    }

    /// Every sync asked for finishes, as the backend's thread does.
    pub(crate) fn finish(&self) {
        let mut counts = self.inner.lock().unwrap();
        counts.done = counts.requested;
        self.changed.notify_all();
    }
}

/// A storage backend (redb's `FileBackend`, in a store) whose syncs run
/// on a thread of their own.
pub(crate) struct DeferredSync<B: StorageBackend> {
    file: Arc<B>,
    state: Arc<SyncState>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl<B: StorageBackend> fmt::Debug for DeferredSync<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeferredSync").finish_non_exhaustive()
    }
}

fn io_err(message: &str) -> BackendIoError {
    std::io::Error::other(message.to_owned())
}

impl<B: StorageBackend> DeferredSync<B> {
    pub(crate) fn new(file: B) -> std::io::Result<DeferredSync<B>> {
        let file = Arc::new(file);
        let state = Arc::new(SyncState::default());
        let thread = {
            let (file, state) = (file.clone(), state.clone());
            std::thread::Builder::new()
                .name("postbox-ckpt-sync".to_owned())
                .spawn(move || run(&*file, &state))?
        };
        Ok(DeferredSync {
            file,
            state,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The backend's sync progress, for the commit log.
    pub(crate) fn state(&self) -> Arc<SyncState> {
        self.state.clone()
    }

    /// Waits for the syncs asked so far, so that a write may follow them.
    fn settle(&self) -> Result<(), BackendIoError> {
        self.state.wait_all().map_err(|e| io_err(&e))
    }
}

/// The sync thread: one `fdatasync` serves every sync asked for while the
/// last one ran. After a failure it stops; the failure stays on record.
fn run(file: &impl StorageBackend, state: &SyncState) {
    let mut counts = state.inner.lock().unwrap();
    loop {
        while counts.done == counts.requested && !counts.stopping {
            counts = state.changed.wait(counts).unwrap();
        }
        if counts.done == counts.requested {
            return;
        }
        let target = counts.requested;
        drop(counts);
        let result = if crate::faults::hit(crate::faults::CHECKPOINT_SYNC) {
            Err(std::io::Error::other(
                "injected by fault point store::checkpoint_sync",
            ))
        } else {
            file.sync_data()
        };
        counts = state.inner.lock().unwrap();
        match result {
            Ok(()) => counts.done = target,
            Err(e) => counts.failed = Some(format!("store file sync: {e}")),
        }
        state.changed.notify_all();
        if counts.failed.is_some() {
            return;
        }
    }
}

impl<B: StorageBackend> StorageBackend for DeferredSync<B> {
    fn len(&self) -> Result<u64, BackendIoError> {
        self.file.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BackendIoError> {
        self.file.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), BackendIoError> {
        self.settle()?;
        self.file.set_len(len)
    }

    fn sync_data(&self) -> Result<(), BackendIoError> {
        let mut counts = self.state.inner.lock().unwrap();
        if let Some(e) = &counts.failed {
            return Err(io_err(e));
        }
        counts.requested += 1;
        self.state.changed.notify_all();
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), BackendIoError> {
        self.settle()?;
        self.file.write(offset, data)
    }

    fn close(&self) -> Result<(), BackendIoError> {
        let settled = self.settle();
        self.state.inner.lock().unwrap().stopping = true;
        self.state.changed.notify_all();
        if let Some(thread) = self.thread.lock().unwrap().take() {
            let _ = thread.join();
        }
        // Closed even after a failed sync: closing releases the file's locks.
        let closed = self.file.close();
        settled.and(closed)
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.file.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.query_lock_range(start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::backends::InMemoryBackend;
    use std::time::Duration;

    /// An in-memory backend that records its writes and syncs; a sync waits
    /// until the test lets it through, then succeeds or fails.
    #[derive(Debug, Default)]
    struct Disk {
        mem: InMemoryBackend,
        calls: Mutex<Vec<String>>,
        /// `Some(ok)` lets syncs through, each succeeding if `ok`.
        gate: Mutex<Option<bool>>,
        opened: Condvar,
    }

    impl Disk {
        fn calls(&self) -> Vec<String> {
            self.calls.lock().unwrap().clone()
        }

        fn open(&self, ok: bool) {
            *self.gate.lock().unwrap() = Some(ok);
            self.opened.notify_all();
        }
    }

    #[derive(Debug)]
    struct Shared(Arc<Disk>);

    impl StorageBackend for Shared {
        fn len(&self) -> Result<u64, BackendIoError> {
            self.0.mem.len()
        }

        fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BackendIoError> {
            self.0.mem.read(offset, out)
        }

        fn set_len(&self, len: u64) -> Result<(), BackendIoError> {
            self.0.calls.lock().unwrap().push(format!("set_len {len}"));
            self.0.mem.set_len(len)
        }

        fn sync_data(&self) -> Result<(), BackendIoError> {
            let mut gate = self.0.gate.lock().unwrap();
            while gate.is_none() {
                gate = self.0.opened.wait(gate).unwrap();
            }
            self.0.calls.lock().unwrap().push("sync".to_owned());
            match *gate {
                Some(true) => Ok(()),
                _ => Err(std::io::Error::other("the disk is gone")),
            }
        }

        fn write(&self, offset: u64, data: &[u8]) -> Result<(), BackendIoError> {
            self.0.calls.lock().unwrap().push(format!("write {offset}"));
            self.0.mem.write(offset, data)
        }
    }

    fn backend() -> (Arc<Disk>, Arc<DeferredSync<Shared>>) {
        let disk = Arc::new(Disk::default());
        let backend = DeferredSync::new(Shared(disk.clone())).unwrap();
        backend.set_len(8192).unwrap();
        backend.write(0, &[1; 16]).unwrap();
        (disk, Arc::new(backend))
    }

    #[test]
    fn a_sync_returns_at_once_and_the_next_write_waits_for_it() {
        let (disk, backend) = backend();
        let state = backend.state();
        backend.sync_data().unwrap();
        assert_eq!((state.requested(), state.synced()), (1, 0), "in flight");
        let next = {
            let backend = backend.clone();
            std::thread::spawn(move || backend.write(4096, &[2; 16]))
        };
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            disk.calls(),
            ["set_len 8192", "write 0"],
            "a write after a sync waits until the sync is done"
        );
        disk.open(true);
        next.join().unwrap().unwrap();
        assert_eq!(
            disk.calls(),
            ["set_len 8192", "write 0", "sync", "write 4096"]
        );
        assert_eq!(state.synced(), 1);
        state.wait_all().unwrap();
    }

    #[test]
    fn a_failed_sync_fails_every_later_write_and_sync() {
        let (disk, backend) = backend();
        let state = backend.state();
        backend.sync_data().unwrap();
        disk.open(false);
        let e = state.wait_all().unwrap_err();
        assert!(e.contains("the disk is gone"), "{e}");
        assert_eq!(state.synced(), 0, "the failed sync never counts as done");
        assert_eq!(state.failure(), Some(e.clone()));
        for result in [backend.write(4096, &[2; 16]), backend.sync_data()] {
            let e = result.unwrap_err().to_string();
            assert!(e.contains("the disk is gone"), "{e}");
        }
        assert_eq!(disk.calls(), ["set_len 8192", "write 0", "sync"]);
    }
}
