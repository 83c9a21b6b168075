//! A redb storage backend whose writes and syncs run on a thread of their
//! own. The store wraps redb's `FileBackend` in it when it has a commit log.
//!
//! redb's durable commit (a checkpoint) writes every page the commits since
//! the last one dirtied, then its header, then syncs. With this backend
//! each `write` copies its page into a queue and `sync_data` queues a sync;
//! the backend's thread applies them to the file in the order they were
//! asked for, and the commit returns while the page cache and the disk work.
//! The writer goes on with the next batch instead of spending several
//! milliseconds in `pwrite` and `fdatasync`.
//!
//! Order is kept because the thread does one thing at a time, in order: a
//! later commit's pages reach the file only after the sync before them has
//! finished, so the file never holds a later commit's bytes before an
//! earlier commit is on disk. A crash with work queued is therefore the same
//! as a crash inside redb's own commit: the file comes back at the commit
//! before, or at this one.
//!
//! The thread takes every write queued before the next sync at once, and
//! wakes only when it has nothing to do: the writer queues a checkpoint's
//! pages (thousands a second) without a wake-up, a lock hand-off or an
//! allocation per page (the thread gives the buffers back).
//!
//! A `read` of a page whose write is still queued, or in the run of writes
//! the thread is applying (a miss in redb's cache), copies it from there:
//! a checkpoint's run is thousands of pages, and a read that waited for the
//! whole run held the writer for up to 35 ms on a grown store.
//!
//! `set_len` is queued too, in order with the writes and syncs, so the file
//! sees exactly the calls, in the order, it saw when `set_len` settled the
//! queue first and then ran (which held the transaction that grew the file,
//! and every emit behind it, for up to 39 ms). Until the thread has applied
//! it, `len` answers the length asked for, and a read the queue cannot
//! answer waits for a queued `set_len` that cuts into its range, or for
//! every queued `set_len` when the range is not yet in the file.
//!
//! What still waits: a `read` that the queued writes cover only in part
//! waits for them, and a write waits while [`MAX_QUEUED`] bytes of writes
//! are queued.
//!
//! So a durable commit is durable only once [`SyncState::synced`] has
//! passed the sync it asked for; the commit log keeps every record until
//! then (see `wal`).
//!
//! The thread runs [`NICER`] steps below the process's priority (Linux,
//! where a thread has its own). Its work can wait: nothing is answered on
//! it, and a queue it lets grow holds the writer back by itself
//! ([`MAX_QUEUED`]). At the same priority it took CPU from the writer and
//! the request threads in the middle of a burst; ten steps nicer, the
//! 100-tenant HTTP emit ran 2-6% faster with a p99 10-13% lower
//! (`research/latency-path.md`).

use std::collections::VecDeque;
use std::fmt;
use std::ops::Bound;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use redb::{BackendError, StorageBackend};

/// What redb's backend I/O methods return (without its experimental API).
type BackendIoError = std::io::Error;

/// Bytes of page writes the queue holds before a `write` waits: more than
/// a checkpoint of the default 16 MB of log writes (about 1.6 bytes of
/// pages per byte of log).
pub(crate) const MAX_QUEUED: usize = 64 << 20;

/// Page buffers the thread keeps for the writer to copy pages into: about
/// the pages of one checkpoint (32 MB of 4 KB pages at most).
const SPARE_BUFFERS: usize = 8192;

/// How many steps of niceness the backend's thread adds to the process's.
const NICER: i32 = 10;

/// Progress of the writes and syncs asked of a [`DeferredSync`] backend.
#[derive(Default)]
pub(crate) struct SyncState {
    inner: Mutex<Counts>,
    changed: Condvar,
}

/// A run of page writes the thread applies at once: (offset, bytes).
type Run = Vec<(u64, Vec<u8>)>;

/// What the newest queued or in-hand call touching a read's range is.
enum Newest<'a> {
    /// A write: (offset, bytes).
    Write(u64, &'a [u8]),
    /// A `set_len` that cuts into the range.
    Cut,
}

/// One thing asked of the backend's thread.
enum Op {
    Write(u64, Vec<u8>),
    /// The `n`-th sync asked for.
    Sync(u64),
    /// The file's new length.
    SetLen(u64),
}

#[derive(Default)]
struct Counts {
    /// Syncs asked for so far.
    requested: u64,
    /// Syncs finished: every write before the `done`-th request is on disk.
    done: u64,
    /// What the thread has still to do, in order.
    queue: VecDeque<Op>,
    /// Bytes of the writes in `queue`.
    queued_bytes: usize,
    /// The thread is working on something it took from the queue.
    busy: bool,
    /// The writes the thread is applying (the run it took at once): until
    /// the last of them is in the file, a read copies their pages from
    /// here rather than waiting for the run.
    in_hand: Option<Arc<Run>>,
    /// The `set_len` the thread is applying.
    len_in_hand: Option<u64>,
    /// `set_len` calls queued or in hand.
    lens_pending: usize,
    /// The length the newest of them asked for: what `len` answers while
    /// any is pending.
    pending_len: u64,
    /// The thread waits for something to do: a `write` wakes it.
    idle_wait: bool,
    /// Buffers of applied writes, for the next ones.
    spare: Vec<Vec<u8>>,
    /// The failed write or sync; every later write and sync reports it, and
    /// nothing after it reaches the file.
    failed: Option<String>,
    /// The backend is closing: the thread ends once nothing is asked of it.
    stopping: bool,
}

impl Counts {
    /// Nothing queued or in hand, and every sync asked for finished.
    fn idle(&self) -> bool {
        self.queue.is_empty() && !self.busy && self.done == self.requested
    }

    /// Records the first failure and drops what is queued: none of it may
    /// reach the file after a write or sync before it failed.
    fn fail(&mut self, error: String) {
        self.failed.get_or_insert(error);
        self.queue.clear();
        self.queued_bytes = 0;
        self.busy = false;
        self.in_hand = None;
        self.len_in_hand = None;
        self.lens_pending = 0;
    }
}

impl SyncState {
    /// The number of syncs asked for so far: once [`SyncState::synced`]
    /// reaches it, every write made before it is on disk.
    pub(crate) fn requested(&self) -> u64 {
        self.lock().requested
    }

    /// The number of syncs finished.
    pub(crate) fn synced(&self) -> u64 {
        self.lock().done
    }

    /// Why a write or sync failed, if one did.
    pub(crate) fn failure(&self) -> Option<String> {
        self.lock().failed.clone()
    }

    /// Waits until everything asked so far has reached the file (and every
    /// sync asked for has finished).
    pub(crate) fn wait_all(&self) -> Result<(), String> {
        let mut counts = self.lock();
        while !counts.idle() && counts.failed.is_none() {
            counts = self.wait(counts);
        }
        match &counts.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Counts> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for the next change of the counts.
    fn wait<'a>(&self, counts: MutexGuard<'a, Counts>) -> MutexGuard<'a, Counts> {
        self.changed.wait(counts).unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
impl SyncState {
    /// A sync is asked for, as the backend's `sync_data` does.
    pub(crate) fn ask(&self) {
        self.lock().requested += 1;
    }

    /// Every sync asked for finishes, as the backend's thread does.
    pub(crate) fn finish(&self) {
        let mut counts = self.lock();
        counts.done = counts.requested;
        self.changed.notify_all();
    }
}

/// A storage backend (redb's `FileBackend`, in a store) whose writes and
/// syncs run on a thread of their own.
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

    /// Waits until the thread has done everything asked so far, so that the
    /// file is as the calls so far left it.
    fn settle(&self) -> Result<(), BackendIoError> {
        self.state.wait_all().map_err(|e| io_err(&e))
    }
}

/// The backend's thread: takes what is queued, in order, and applies it:
/// the run of writes before the next sync at once, then the sync. A run of
/// syncs with no write between them is one `fdatasync`. After a failure it
/// stops; the failure stays on record and nothing queued after it reaches
/// the file.
fn run(file: &impl StorageBackend, state: &SyncState) {
    let _watch = Watch(state);
    lower_priority();
    let mut counts = state.lock();
    loop {
        while counts.queue.is_empty() && !counts.stopping {
            counts.idle_wait = true;
            counts = state.wait(counts);
        }
        counts.idle_wait = false;
        let mut synced = None;
        let result = match counts.queue.pop_front() {
            None => return,
            Some(Op::Write(offset, data)) => {
                let mut writes = vec![(offset, data)];
                while let Some(Op::Write(..)) = counts.queue.front() {
                    let Some(Op::Write(at, data)) = counts.queue.pop_front() else {
                        unreachable!("a write is at the front");
                    };
                    writes.push((at, data));
                }
                let bytes: usize = writes.iter().map(|(_, data)| data.len()).sum();
                let writes = Arc::new(writes);
                counts.in_hand = Some(writes.clone());
                counts.busy = true;
                drop(counts);
                let r = writes
                    .iter()
                    .try_for_each(|(at, data)| file.write(*at, data));
                counts = state.lock();
                counts.in_hand = None;
                counts.queued_bytes -= bytes;
                // Readers copy from the run under the lock and keep no
                // reference to it: the thread holds the only one now.
                if let Ok(writes) = Arc::try_unwrap(writes) {
                    for (_, mut data) in writes {
                        if counts.spare.len() < SPARE_BUFFERS {
                            data.clear();
                            counts.spare.push(data);
                        }
                    }
                }
                r.map_err(|e| format!("store file write: {e}"))
            }
            Some(Op::Sync(mut n)) => {
                while let Some(Op::Sync(next)) = counts.queue.front() {
                    n = *next;
                    counts.queue.pop_front();
                }
                counts.busy = true;
                drop(counts);
                let r = crate::faults::io_fault(crate::faults::CHECKPOINT_SYNC)
                    .and_then(|()| file.sync_data());
                counts = state.lock();
                synced = Some(n);
                r.map_err(|e| format!("store file sync: {e}"))
            }
            Some(Op::SetLen(len)) => {
                counts.len_in_hand = Some(len);
                counts.busy = true;
                drop(counts);
                let r = file.set_len(len);
                counts = state.lock();
                counts.len_in_hand = None;
                counts.lens_pending -= 1;
                r.map_err(|e| format!("store file set_len: {e}"))
            }
        };
        counts.busy = false;
        match result {
            Ok(()) => {
                if let Some(n) = synced {
                    counts.done = n;
                }
            }
            Err(e) => counts.fail(e),
        }
        state.changed.notify_all();
        if counts.failed.is_some() {
            return;
        }
    }
}

/// Makes the calling thread [`NICER`] steps nicer than it is (at most 19),
/// on Linux; elsewhere niceness is the whole process's and stays.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{getpriority_process, setpriority_process};
        let me = Some(rustix::thread::gettid());
        let lowered = getpriority_process(me)
            .and_then(|nice| setpriority_process(me, (nice + NICER).min(19)));
        if let Err(e) = lowered {
            tracing::debug!(error = %e, "the checkpoint thread keeps the process's priority");
        }
    }
}

/// Records a panic of the backend's thread as a failure, so that nothing
/// waits for it for ever.
struct Watch<'a>(&'a SyncState);

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0
                .lock()
                .fail("the store file's write thread panicked".to_owned());
            self.0.changed.notify_all();
        }
    }
}

impl<B: StorageBackend> StorageBackend for DeferredSync<B> {
    fn len(&self) -> Result<u64, BackendIoError> {
        let counts = self.state.lock();
        if counts.lens_pending > 0 {
            return Ok(counts.pending_len);
        }
        self.file.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BackendIoError> {
        // A page redb reads back may still be queued, or in the run of
        // writes the thread is applying. The newest write that overlaps it
        // (queued writes are newer than those in hand) holds its bytes when
        // it covers the whole range (it supersedes every write before it);
        // otherwise the read waits for the writes that overlap it (not for
        // the rest, nor for a sync). A write queued after this look is a
        // later commit's, to pages no reader sees yet.
        //
        // A queued `set_len` newer than any write of the range that cuts
        // into it (the bytes past it are gone, or zeros once the file grows
        // again) makes the read wait for it; one that leaves the range alone
        // is passed over. With no queued write of the range the file holds
        // its bytes, unless the range lies past the file's end until a
        // queued `set_len` grows it: then the read waits for the queue's
        // `set_len` calls and looks again.
        let end = offset + out.len() as u64;
        let overlaps = |at: u64, len: usize| at < end && offset < at + len as u64;
        let mut counts = self.state.lock();
        loop {
            if let Some(e) = &counts.failed {
                return Err(io_err(e));
            }
            let queued = counts.queue.iter().rev().find_map(|op| match op {
                Op::Write(at, data) if overlaps(*at, data.len()) => Some(Newest::Write(*at, data)),
                Op::SetLen(len) if *len < end => Some(Newest::Cut),
                _ => None,
            });
            let newest = queued.or_else(|| {
                if counts.len_in_hand.is_some_and(|len| len < end) {
                    return Some(Newest::Cut);
                }
                let in_hand = counts.in_hand.as_deref()?;
                in_hand
                    .iter()
                    .rev()
                    .find(|(at, data)| overlaps(*at, data.len()))
                    .map(|(at, data)| Newest::Write(*at, data))
            });
            match newest {
                Some(Newest::Write(at, data)) if at <= offset && end <= at + data.len() as u64 => {
                    let from = (offset - at) as usize;
                    out.copy_from_slice(&data[from..from + out.len()]);
                    return Ok(());
                }
                // A write that covers the range in part, or a cut: wait.
                Some(_) => {}
                None => {
                    let growing = counts.lens_pending > 0;
                    drop(counts);
                    let read = self.file.read(offset, out);
                    if read.is_ok() || !growing {
                        return read;
                    }
                    counts = self.state.lock();
                    while counts.lens_pending > 0 && counts.failed.is_none() {
                        counts = self.state.wait(counts);
                    }
                    continue;
                }
            }
            counts = self.state.wait(counts);
        }
    }

    fn set_len(&self, len: u64) -> Result<(), BackendIoError> {
        let mut counts = self.state.lock();
        if let Some(e) = &counts.failed {
            return Err(io_err(e));
        }
        counts.queue.push_back(Op::SetLen(len));
        counts.lens_pending += 1;
        counts.pending_len = len;
        self.state.changed.notify_all();
        Ok(())
    }

    fn sync_data(&self) -> Result<(), BackendIoError> {
        let mut counts = self.state.lock();
        if let Some(e) = &counts.failed {
            return Err(io_err(e));
        }
        counts.requested += 1;
        let n = counts.requested;
        counts.queue.push_back(Op::Sync(n));
        self.state.changed.notify_all();
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), BackendIoError> {
        let mut counts = self.state.lock();
        while counts.failed.is_none()
            && counts.queued_bytes > 0
            && counts.queued_bytes + data.len() > MAX_QUEUED
        {
            counts = self.state.wait(counts);
        }
        if let Some(e) = &counts.failed {
            return Err(io_err(e));
        }
        let mut page = counts
            .spare
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(data.len()));
        page.extend_from_slice(data);
        counts.queued_bytes += page.len();
        counts.queue.push_back(Op::Write(offset, page));
        // The thread, once awake, takes whatever is queued before it sleeps.
        if counts.idle_wait {
            self.state.changed.notify_all();
        }
        Ok(())
    }

    fn close(&self) -> Result<(), BackendIoError> {
        let settled = self.settle();
        self.state.lock().stopping = true;
        self.state.changed.notify_all();
        if let Some(thread) = self.thread.lock().unwrap().take() {
            let _ = thread.join();
        }
        // Closed even after a failure: closing releases the file's locks.
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
        /// Writes wait while this is set.
        writes_held: Mutex<bool>,
        /// `set_len` fails while this is set.
        set_len_fails: Mutex<bool>,
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

        fn hold_writes(&self, held: bool) {
            *self.writes_held.lock().unwrap() = held;
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
            if *self.0.set_len_fails.lock().unwrap() {
                return Err(std::io::Error::other("no space left"));
            }
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
            let mut held = self.0.writes_held.lock().unwrap();
            while *held {
                held = self.0.opened.wait(held).unwrap();
            }
            self.0.mem.write(offset, data)
        }
    }

    fn backend() -> (Arc<Disk>, Arc<DeferredSync<Shared>>) {
        let disk = Arc::new(Disk::default());
        let backend = DeferredSync::new(Shared(disk.clone())).unwrap();
        backend.set_len(8192).unwrap();
        backend.write(0, &[1; 16]).unwrap();
        backend.state().wait_all().unwrap();
        (disk, Arc::new(backend))
    }

    /// [`backend`] with a sync held at the disk and a write of page 4096
    /// queued behind it.
    fn held() -> (Arc<Disk>, Arc<DeferredSync<Shared>>) {
        let (disk, backend) = backend();
        backend.sync_data().unwrap();
        backend.write(4096, &[2; 16]).unwrap();
        (disk, backend)
    }

    /// Reads 16 bytes at `at` on a thread of its own, into a buffer that
    /// starts as `fill`.
    fn read_apart(
        backend: &Arc<DeferredSync<Shared>>,
        at: u64,
        fill: u8,
    ) -> std::thread::JoinHandle<Result<[u8; 16], BackendIoError>> {
        let backend = backend.clone();
        std::thread::spawn(move || {
            let mut out = [fill; 16];
            backend.read(at, &mut out).map(|()| out)
        })
    }

    /// Checks that `read` still waits 50 ms on, lets the held sync
    /// through, and returns what the read got.
    fn waits_until_opened(
        disk: &Disk,
        read: std::thread::JoinHandle<Result<[u8; 16], BackendIoError>>,
        what: &str,
    ) -> [u8; 16] {
        std::thread::sleep(Duration::from_millis(50));
        assert!(!read.is_finished(), "{what}");
        disk.open(true);
        read.join().unwrap().unwrap()
    }

    #[test]
    fn writes_and_syncs_return_at_once_and_reach_the_file_in_order() {
        let (disk, backend) = held();
        let state = backend.state();
        assert_eq!((state.requested(), state.synced()), (1, 0), "in flight");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            disk.calls(),
            ["set_len 8192", "write 0"],
            "a write after a sync stays queued until the sync is done"
        );
        disk.open(true);
        state.wait_all().unwrap();
        assert_eq!(
            disk.calls(),
            ["set_len 8192", "write 0", "sync", "write 4096"]
        );
        assert_eq!(state.synced(), 1);
    }

    #[test]
    fn queued_writes_keep_their_order_and_their_bytes_and_a_write_wakes_an_idle_thread() {
        let (disk, backend) = held();
        let state = backend.state();
        backend.write(0, &[5; 16]).unwrap();
        backend.write(4096, &[6; 16]).unwrap();
        backend.sync_data().unwrap();
        backend.write(0, &[7; 16]).unwrap();
        disk.open(true);
        state.wait_all().unwrap();
        assert_eq!(
            disk.calls(),
            [
                "set_len 8192",
                "write 0",
                "sync",
                "write 4096",
                "write 0",
                "write 4096",
                "sync",
                "write 0"
            ]
        );
        // The thread sleeps now; a write alone (no sync) must wake it.
        backend.write(0, &[8; 16]).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(state.wait_all()));
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the write reached the file")
            .unwrap();
        // Buffers are reused: each write carries its own bytes only.
        let mut out = [9; 32];
        disk.mem.read(0, &mut out).unwrap();
        assert_eq!(out[..16], [8; 16]);
        assert_eq!(out[16..], [0; 16]);
        let mut out = [9; 16];
        disk.mem.read(4096, &mut out).unwrap();
        assert_eq!(out, [6; 16]);
    }

    #[test]
    fn a_read_waits_only_for_a_queued_write_of_its_own_page_that_it_cannot_copy() {
        let (disk, backend) = held();
        let mut out = [0; 16];
        backend.read(0, &mut out).unwrap();
        assert_eq!(out, [1; 16], "a page with no queued write is read at once");
        // The queued write covers the range: its bytes, at once, while the
        // sync before it still holds the thread.
        backend.write(4096, &[3; 8]).unwrap();
        let mut out = [0; 8];
        backend.read(4096, &mut out).unwrap();
        assert_eq!(out, [3; 8], "the newest queued write of the range");
        let mut out = [0; 4];
        backend.read(4104, &mut out).unwrap();
        assert_eq!(out, [2; 4], "the older write, where the newer one ends");
        // A read the queued writes cover only in part waits for them.
        let read = read_apart(&backend, 4104, 0);
        let got = waits_until_opened(&disk, read, "the read waits for the queued writes");
        let mut expected = [0; 16];
        expected[..8].copy_from_slice(&[2; 8]);
        assert_eq!(got, expected);
    }

    #[test]
    fn a_read_copies_a_page_the_thread_is_writing_instead_of_waiting_for_it() {
        let (disk, backend) = backend();
        disk.hold_writes(true);
        backend.write(4096, &[4; 16]).unwrap();
        for _ in 0..1000 {
            if disk.calls().iter().any(|c| c == "write 4096") {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(disk.calls().last().unwrap(), "write 4096", "in hand");
        let read = |at: u64| {
            let backend = backend.clone();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut out = [0; 16];
                tx.send(backend.read(at, &mut out).map(|()| out))
            });
            rx
        };
        // The write is in the thread's hands, held at the disk: a read of
        // its page copies it.
        let copied = read(4096)
            .recv_timeout(Duration::from_secs(5))
            .expect("the read did not wait for the write in hand");
        assert_eq!(copied.unwrap(), [4; 16]);
        // A read it covers only in part waits for it.
        let partial = read(4104);
        assert!(
            partial.recv_timeout(Duration::from_millis(50)).is_err(),
            "a read the write in hand covers in part waits for it"
        );
        disk.hold_writes(false);
        let mut expected = [0; 16];
        expected[..8].copy_from_slice(&[4; 8]);
        assert_eq!(partial.recv().unwrap().unwrap(), expected);
        backend.state().wait_all().unwrap();
    }

    #[test]
    fn a_failed_sync_fails_every_later_call_and_drops_the_writes_behind_it() {
        let (disk, backend) = held();
        let state = backend.state();
        disk.open(false);
        let e = state.wait_all().unwrap_err();
        assert!(e.contains("the disk is gone"), "{e}");
        assert_eq!(state.synced(), 0, "the failed sync never counts as done");
        assert_eq!(state.failure(), Some(e.clone()));
        let mut out = [0; 16];
        for result in [
            backend.write(4096, &[3; 16]),
            backend.sync_data(),
            backend.read(0, &mut out),
        ] {
            let e = result.unwrap_err().to_string();
            assert!(e.contains("the disk is gone"), "{e}");
        }
        assert_eq!(
            disk.calls(),
            ["set_len 8192", "write 0", "sync"],
            "nothing queued after the failure reaches the file"
        );
    }

    /// `set_len` on a thread of its own, which must answer within 5 s
    /// (a sync before it is held at the disk).
    fn set_len_at_once(
        backend: &Arc<DeferredSync<Shared>>,
        len: u64,
    ) -> Result<(), BackendIoError> {
        let backend = backend.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(backend.set_len(len)));
        rx.recv_timeout(Duration::from_secs(5))
            .expect("set_len returned while a sync before it is held")
    }

    #[test]
    fn set_len_is_queued_in_order_and_len_answers_the_length_asked_for() {
        let (disk, backend) = held();
        set_len_at_once(&backend, 16384).unwrap();
        assert_eq!(backend.len().unwrap(), 16384, "the length asked for");
        assert_eq!(disk.mem.len().unwrap(), 8192, "not applied yet");
        backend.write(12288, &[5; 16]).unwrap();
        let mut out = [0; 16];
        backend.read(12288, &mut out).unwrap();
        assert_eq!(out, [5; 16], "a queued write past the file's end is copied");
        // A read past the file's end that no write covers waits for the
        // growth, then reads its zeros.
        let zeros = read_apart(&backend, 9000, 9);
        let got = waits_until_opened(&disk, zeros, "the read waits for the growth");
        assert_eq!(got, [0; 16]);
        backend.state().wait_all().unwrap();
        assert_eq!(
            disk.calls(),
            [
                "set_len 8192",
                "write 0",
                "sync",
                "write 4096",
                "set_len 16384",
                "write 12288"
            ]
        );
        assert_eq!(backend.len().unwrap(), 16384);
    }

    #[test]
    fn a_read_waits_for_a_queued_set_len_that_cuts_into_its_range() {
        let (disk, backend) = held();
        for len in [4100, 8192] {
            set_len_at_once(&backend, len).unwrap();
        }
        assert_eq!(backend.len().unwrap(), 8192, "the newest length asked for");
        let mut out = [0; 16];
        backend.read(0, &mut out).unwrap();
        assert_eq!(
            out, [1; 16],
            "a range both lengths leave alone is read at once"
        );
        // The write of 4096 is older than the cut to 4100: the read must
        // not copy it, but wait and read what the file holds after both.
        let cut = read_apart(&backend, 4096, 9);
        let got = waits_until_opened(&disk, cut, "the read waits for the cut");
        let mut expected = [0; 16];
        expected[..4].copy_from_slice(&[2; 4]);
        assert_eq!(got, expected);
    }

    #[test]
    fn a_failed_set_len_fails_every_later_call() {
        let (disk, backend) = held();
        *disk.set_len_fails.lock().unwrap() = true;
        set_len_at_once(&backend, 16384).unwrap();
        backend.write(12288, &[5; 16]).unwrap();
        disk.open(true);
        let e = backend.state().wait_all().unwrap_err();
        assert!(e.contains("set_len") && e.contains("no space left"), "{e}");
        assert_eq!(backend.len().unwrap(), 8192, "the file's own length");
        for result in [backend.write(0, &[3; 16]), backend.set_len(4096)] {
            let e = result.unwrap_err().to_string();
            assert!(e.contains("no space left"), "{e}");
        }
        assert_eq!(
            disk.calls(),
            [
                "set_len 8192",
                "write 0",
                "sync",
                "write 4096",
                "set_len 16384"
            ],
            "nothing queued after the failure reaches the file"
        );
    }

    /// A backend whose writes panic.
    #[derive(Debug, Default)]
    struct Panicky(InMemoryBackend);

    impl StorageBackend for Panicky {
        fn len(&self) -> Result<u64, BackendIoError> {
            self.0.len()
        }
        fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BackendIoError> {
            self.0.read(offset, out)
        }
        fn set_len(&self, len: u64) -> Result<(), BackendIoError> {
            self.0.set_len(len)
        }
        fn sync_data(&self) -> Result<(), BackendIoError> {
            Ok(())
        }
        fn write(&self, _: u64, _: &[u8]) -> Result<(), BackendIoError> {
            panic!("a write that panics");
        }
    }

    #[test]
    fn a_panic_of_the_thread_is_a_failure_nothing_waits_for_for_ever() {
        let backend = DeferredSync::new(Panicky::default()).unwrap();
        backend.write(0, &[1; 16]).unwrap();
        let state = backend.state();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(state.wait_all()));
        let e = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("wait_all returned")
            .unwrap_err();
        assert!(e.contains("panicked"), "{e}");
        assert!(backend.sync_data().is_err());
    }
}
