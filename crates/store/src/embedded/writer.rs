//! The single writer: one thread that owns every write transaction and
//! commits requests in groups.
//!
//! Callers queue operations; the thread takes every operation waiting (up to
//! [`MAX_BATCH`]), runs them one after another in ONE redb write transaction
//! (each sees the effects of the earlier ones), commits once (one fsync for
//! the whole group), and only then answers each caller. Group commit is what
//! makes durable writes cheap: the fsync is shared by the whole group.
//!
//! With a commit log (`wal`), "commits once" means: writes the batch's record,
//! commits redb without durability, and hands the answers to the sync thread
//! ([`Syncer`]), which answers them once the record is synced; the writer
//! meanwhile runs the next batch.
//!
//! Architecture Invariant: no caller is answered before the commit that holds
//! its write is durable (its redb commit returned and, with a log, its record
//! is synced), and answers leave in commit order. The one exception is asked
//! for by name: an operation submitted with [`Writer::submit_unsynced`] is
//! answered as soon as its batch has committed, before the record is synced
//! (see that function for when that is sound). A storage error fails every
//! operation of its batch and stops the writer for good: later writes get
//! `StoreError::Storage` instead of a store that limps on after an I/O error.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use redb::Database;
use tokio::sync::oneshot;

use crate::StoreError;

use super::arrival;
use super::catalog::CatalogChange;
use super::context::WriteContext;
use super::logged::OpLog;
use super::wal::{Wal, mark_applied, mark_clean, sync_log};
use super::{Durability, Shared, storage_err};

/// Most operations committed in one transaction.
pub(crate) const MAX_BATCH: usize = 1024;

/// An operation queued for the writer, type-erased.
trait Job: Send {
    /// Runs the operation; the reply is held until the commit outcome is known.
    fn run(self: Box<Self>, ctx: &mut WriteContext<'_>) -> Box<dyn Reply>;
    /// Answers without running (the store has stopped).
    fn refuse(self: Box<Self>, err: StoreError);
}

/// A computed answer waiting for its batch's commit.
trait Reply: Send {
    /// The storage error the operation met, if any: the batch must not commit.
    fn storage_failure(&self) -> Option<String>;
    /// True when the operation succeeded, so its staged changes are kept.
    fn succeeded(&self) -> bool;
    /// Delivers the answer, or `failure` when the commit did not happen.
    fn send(self: Box<Self>, failure: Option<StoreError>);
    /// True when the answer may leave once the batch has committed, before
    /// its commit-log record is synced.
    fn unsynced(&self) -> bool;
}

struct Submitted<F, T> {
    op: F,
    tx: oneshot::Sender<Result<T, StoreError>>,
    unsynced: bool,
}

struct Answer<T> {
    result: Result<T, StoreError>,
    tx: oneshot::Sender<Result<T, StoreError>>,
    unsynced: bool,
}

impl<F, T> Job for Submitted<F, T>
where
    F: FnOnce(&mut WriteContext<'_>) -> Result<T, StoreError> + Send + 'static,
    T: Send + 'static,
{
    fn run(self: Box<Self>, ctx: &mut WriteContext<'_>) -> Box<dyn Reply> {
        let Submitted { op, tx, unsynced } = *self;
        let result = match catch_unwind(AssertUnwindSafe(|| op(ctx))) {
            Ok(r) => r,
            Err(_) => Err(StoreError::Storage("a write operation panicked".to_owned())),
        };
        Box::new(Answer {
            result,
            tx,
            unsynced,
        })
    }

    fn refuse(self: Box<Self>, err: StoreError) {
        let _ = self.tx.send(Err(err));
    }
}

impl<T: Send + 'static> Reply for Answer<T> {
    fn storage_failure(&self) -> Option<String> {
        match &self.result {
            Err(StoreError::Storage(message)) => Some(message.clone()),
            _ => None,
        }
    }

    fn succeeded(&self) -> bool {
        self.result.is_ok()
    }

    fn send(self: Box<Self>, failure: Option<StoreError>) {
        let _ = self.tx.send(match failure {
            Some(e) => Err(e),
            None => self.result,
        });
    }

    fn unsynced(&self) -> bool {
        self.unsynced
    }
}

enum Message {
    Job(Box<dyn Job>),
    Stop,
}

/// The handle callers submit operations through.
pub(crate) struct Writer {
    tx: Mutex<Sender<Message>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Writer {
    /// Starts the writer thread.
    /// With `wal`, commits are made durable by the commit log (see `wal`).
    pub(crate) fn start(db: Arc<Database>, shared: Arc<Shared>, wal: Option<Wal>) -> Writer {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("postbox-store-writer".to_owned())
            .spawn(move || run(&db, &shared, wal, rx))
            .expect("spawn the writer thread");
        Writer {
            tx: Mutex::new(tx),
            thread: Mutex::new(Some(thread)),
        }
    }

    fn enqueue<F, T>(
        &self,
        op: F,
        unsynced: bool,
    ) -> Result<oneshot::Receiver<Result<T, StoreError>>, StoreError>
    where
        F: FnOnce(&mut WriteContext<'_>) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let sender = self.tx.lock().expect("writer queue lock").clone();
        sender
            .send(Message::Job(Box::new(Submitted { op, tx, unsynced })))
            .map_err(|_| stopped())?;
        Ok(rx)
    }

    /// Queues `op` and waits for its committed result.
    pub(crate) async fn submit<F, T>(&self, op: F) -> Result<T, StoreError>
    where
        F: FnOnce(&mut WriteContext<'_>) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        self.enqueue(op, false)?.await.map_err(|_| stopped())?
    }

    /// [`Writer::submit`], answered once `op`'s batch has committed rather
    /// than once its commit-log record is synced (without a log the two are
    /// the same). A crash before the sync loses the write even though its
    /// caller saw it succeed; every later write is in a later record, so
    /// whatever a later write made durable, this one is durable too. Sound
    /// only for an operation whose effects outside the store are allowed
    /// to happen again (an in-process receive: the message comes back, and
    /// its holder died in the same crash), never for one whose caller
    /// reports success to anyone.
    pub(crate) async fn submit_unsynced<F, T>(&self, op: F) -> Result<T, StoreError>
    where
        F: FnOnce(&mut WriteContext<'_>) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        self.enqueue(op, true)?.await.map_err(|_| stopped())?
    }

    /// [`Writer::submit`] for threads outside the async runtime.
    pub(crate) fn submit_blocking<F, T>(&self, op: F) -> Result<T, StoreError>
    where
        F: FnOnce(&mut WriteContext<'_>) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        self.enqueue(op, false)?
            .blocking_recv()
            .map_err(|_| stopped())?
    }

    /// Queues `op` without waiting for it: it runs before anything queued
    /// later. A failure is logged.
    pub(crate) fn submit_detached<F>(&self, what: &'static str, op: F) -> Result<(), StoreError>
    where
        F: FnOnce(&mut WriteContext<'_>) -> Result<(), StoreError> + Send + 'static,
    {
        self.enqueue(
            move |ctx| {
                let done = op(ctx);
                if let Err(e) = &done {
                    tracing::error!(error = %e, "{what} failed");
                }
                done
            },
            false,
        )
        .map(drop)
    }

    /// Stops the thread after the operations already queued.
    pub(crate) fn stop(&self) {
        let _ = self
            .tx
            .lock()
            .expect("writer queue lock")
            .send(Message::Stop);
        if let Some(thread) = self.thread.lock().expect("writer thread lock").take() {
            let _ = thread.join();
        }
    }
}

fn stopped() -> StoreError {
    StoreError::Storage("the store's writer has stopped".to_owned())
}

fn run(db: &Database, shared: &Arc<Shared>, mut wal: Option<Wal>, rx: Receiver<Message>) {
    let syncer = match wal.as_ref().map(Wal::sync_handles) {
        Some(Ok(files)) => Some(Syncer::start(files, shared.clone())),
        Some(Err(e)) => {
            shared.fail(e.to_string());
            None
        }
        None => None,
    };
    let mut stopping = false;
    let mut last_batch = 0;
    while !stopping {
        let Ok(first) = rx.recv() else { return };
        let (batch, stop) = gather(first, &rx, gather_target(shared, last_batch));
        stopping = stop;
        last_batch = batch.len();
        if batch.is_empty() {
            continue;
        }
        if let Some(reason) = shared.failure() {
            batch
                .into_iter()
                .for_each(|job| job.refuse(refused(&reason)));
            continue;
        }
        if let Err(reason) = commit_batch(db, shared, wal.as_mut(), syncer.as_ref(), batch) {
            tracing::error!(error = %reason, "the store stopped accepting writes after a storage failure");
            shared.fail(reason);
        }
    }
    if let Some(syncer) = syncer {
        syncer.stop();
    }
    if shared.failure().is_some() {
        return;
    }
    match wal.as_mut() {
        Some(wal) => {
            if let Err(e) = checkpoint(db, shared, wal) {
                tracing::warn!(error = %e, "the closing checkpoint failed; the commit log will be replayed at the next open");
            }
        }
        None => {
            if let Err(e) = save_arrival_indexes(db, shared) {
                tracing::warn!(error = %e, "the arrival indexes were not saved; the next open rebuilds them from the rows");
            }
        }
    }
}

/// Commits a transaction durably, so that the store file holds every
/// record of the commit log (once its sync, which closing the database
/// waits for, is done), and says so: the log's files are not needed at the
/// next open. It also holds the arrival indexes' snapshots, so that the
/// next open need not read every row of those tables.
fn checkpoint(db: &Database, shared: &Shared, wal: &Wal) -> Result<(), StoreError> {
    let commit = |save: bool| -> Result<u64, StoreError> {
        let txn = db.begin_write().map_err(storage_err)?;
        mark_applied(&txn, wal.next_lsn() - 1)?;
        mark_clean(&txn, true)?;
        let places = match save {
            true => arrival::save_snapshots(&txn, &shared.catalog.all())?,
            false => 0,
        };
        txn.commit().map_err(storage_err)?;
        Ok(places)
    };
    // The snapshots only spare the next open some reading: without them
    // the checkpoint still closes the log.
    let places = commit(true).or_else(|e| {
        tracing::warn!(error = %e, "the arrival indexes were not saved; the next open rebuilds them from the rows");
        commit(false)
    })?;
    if places > 0 {
        tracing::info!(places, "saved the arrival indexes for the next open");
    }
    Ok(())
}

/// The arrival indexes' snapshots in a closing commit of their own (a store
/// without a commit log), if a table has one.
fn save_arrival_indexes(db: &Database, shared: &Shared) -> Result<(), StoreError> {
    let tables = shared.catalog.all();
    if tables.iter().all(|t| t.arrival.is_none()) {
        return Ok(());
    }
    let mut txn = db.begin_write().map_err(storage_err)?;
    // As durable as the store's commits: a store that does not sync them
    // leaves the sync to closing the database.
    if shared.options.durability != Durability::Durable {
        txn.set_durability(redb::Durability::None)
            .map_err(storage_err)?;
    }
    let places = arrival::save_snapshots(&txn, &tables)?;
    txn.commit().map_err(storage_err)?;
    tracing::debug!(places, "saved the arrival indexes for the next open");
    Ok(())
}

/// How many operations are worth a short wait before committing. The callers
/// answered by the last commit usually come straight back; waiting a few
/// tens of microseconds for them lets one fsync serve all of them instead of
/// splitting them over two. Only durable commits are worth waiting for.
fn gather_target(shared: &Shared, last_batch: usize) -> usize {
    match shared.options.durability {
        // With a commit log the writer does not wait for the disk: the
        // callers come back while it runs the next batch.
        Durability::Durable if last_batch > 1 && !shared.gate.logged() => last_batch,
        _ => 0,
    }
}

/// Longest wait for the callers of the previous batch to come back.
const GATHER_MAX: std::time::Duration = std::time::Duration::from_micros(1000);
/// The wait ends early once no request arrived for this long: the callers
/// that were coming are in.
const GATHER_IDLE: std::time::Duration = std::time::Duration::from_micros(100);

/// Takes `first` and whatever else is queued (up to [`MAX_BATCH`]). While
/// fewer than `target` have arrived it keeps waiting as long as requests
/// keep coming (each within [`GATHER_IDLE`]), up to [`GATHER_MAX`]. Returns
/// the batch and whether a stop was requested.
fn gather(first: Message, rx: &Receiver<Message>, target: usize) -> (Vec<Box<dyn Job>>, bool) {
    let deadline = std::time::Instant::now() + GATHER_MAX;
    let mut batch = Vec::new();
    let mut next = Some(first);
    while let Some(message) = next.take() {
        match message {
            Message::Job(job) => batch.push(job),
            Message::Stop => return (batch, true),
        }
        if batch.len() == MAX_BATCH {
            break;
        }
        next = match rx.try_recv() {
            Ok(m) => Some(m),
            Err(_) if batch.len() < target => {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                rx.recv_timeout(left.min(GATHER_IDLE)).ok()
            }
            Err(_) => None,
        };
    }
    (batch, false)
}

fn refused(reason: &str) -> StoreError {
    StoreError::Storage(format!(
        "the store stopped accepting writes after a storage failure: {reason}"
    ))
}

/// Runs and commits one batch. On a storage failure every operation of the
/// batch is answered with it and the reason is returned.
fn commit_batch(
    db: &Database,
    shared: &Shared,
    mut wal: Option<&mut Wal>,
    syncer: Option<&Syncer>,
    batch: Vec<Box<dyn Job>>,
) -> Result<(), String> {
    if let Some(reason) = wal.as_ref().and_then(|w| w.sync_failure()) {
        return Err(fail_all(batch, StoreError::Storage(reason)));
    }
    let mut txn = match db.begin_write() {
        Ok(t) => t,
        Err(e) => return Err(fail_all(batch, storage_err(e))),
    };
    // With a log, a batch is durable once its record is synced; redb
    // writes its pages at the next checkpoint.
    let checkpoint = wal.as_ref().is_some_and(|w| w.checkpoint_due());
    let redb_durable = match &wal {
        Some(_) => checkpoint,
        None => shared.options.durability == Durability::Durable,
    };
    if !redb_durable && let Err(e) = txn.set_durability(redb::Durability::None) {
        return Err(fail_all(batch, storage_err(e)));
    }
    let log = match wal.as_deref_mut() {
        Some(wal) => OpLog::appending_to(true, wal.record_buffer()),
        None => OpLog::appending_to(false, Vec::new()),
    };
    let mut replies = Vec::with_capacity(batch.len());
    let n = batch.len();
    let t0 = std::time::Instant::now();
    let published = run_jobs(&txn, &log, shared, batch, &mut replies);
    let finished = match published {
        Ok(v) => v,
        Err(e) => {
            drop(txn);
            return Err(fail_replies(replies, e));
        }
    };
    let t1 = std::time::Instant::now();
    if !finished.touched {
        // Nothing changed (failed conditions, identical puts): every answer
        // rests on state that earlier commits already made durable.
        if let Some(wal) = wal {
            wal.recycle(log.into_bytes());
        }
        if let Err(e) = txn.abort() {
            return Err(fail_replies(replies, storage_err(e)));
        }
        // Answered after the batches before it are durable: its answers
        // may rest on their writes.
        let done = Done {
            replies,
            catalog: Vec::new(),
            stream_written: false,
            lsn: None,
            on_commit: finished.on_commit,
            on_durable: finished.on_durable,
        };
        done.finish(shared, syncer);
        return Ok(());
    }
    let mut lsn = None;
    if let Some(wal) = wal.as_deref_mut() {
        let logged = (|| {
            if checkpoint {
                // Only a durable commit needs the LSN: a crash takes the
                // file back to its last durable commit, so the value a
                // commit without durability wrote is never read. The
                // checkpoint's batch is logged like any other: its commit
                // is on disk only once its sync, which runs beside the
                // writer, is done.
                mark_applied(&txn, wal.next_lsn())?;
            }
            wal.append(log.into_bytes())?;
            if checkpoint {
                wal.seal()?;
            }
            Ok::<_, StoreError>(())
        })();
        if let Err(e) = logged {
            drop(txn);
            if let Err(retract) = wal.retract() {
                tracing::error!(error = %retract, "a checkpoint whose log sync failed could not be taken out of the commit log; it will be replayed at the next open");
            }
            return Err(fail_replies(replies, e));
        }
        // Readers that see this commit wait until its record is synced.
        lsn = Some((wal.next_lsn(), wal.region()));
        shared.gate.committing(wal.next_lsn());
    }
    if let Err(e) = txn.commit() {
        if let Some(wal) = wal
            && let Err(retract) = wal.retract()
        {
            tracing::error!(error = %retract, "a batch whose commit failed could not be taken out of the commit log; it will be replayed at the next open");
        }
        return Err(fail_replies(replies, storage_err(e)));
    }
    if let Some(wal) = wal {
        wal.appended();
        if checkpoint {
            wal.checkpointed();
        }
    }
    // Before the readers are woken: the relay reads these records next.
    shared.recent.keep(finished.referred);
    shared.changes.committed(&finished.changed);
    if finished.stream_written {
        shared.committed.send_modify(|n| *n += 1);
    }
    let (run_us, commit_us) = (
        (t1 - t0).as_micros() as u64,
        t1.elapsed().as_micros() as u64,
    );
    tracing::trace!(operations = n, run_us, commit_us, "group commit");
    let stats = &shared.stats;
    let relaxed = std::sync::atomic::Ordering::Relaxed;
    stats.commits.fetch_add(1, relaxed);
    stats.operations.fetch_add(n as u64, relaxed);
    stats.run_us.fetch_add(run_us, relaxed);
    stats.commit_us.fetch_add(commit_us, relaxed);
    let done = Done {
        replies,
        catalog: finished.catalog,
        stream_written: finished.stream_written,
        lsn,
        on_commit: finished.on_commit,
        on_durable: finished.on_durable,
    };
    done.finish(shared, syncer);
    Ok(())
}

/// A batch the writer has finished: what is left to do once it is durable.
struct Done {
    replies: Vec<Box<dyn Reply>>,
    catalog: Vec<CatalogChange>,
    stream_written: bool,
    /// The batch's commit-log record, if it wrote one: its LSN and the
    /// log region it is in.
    lsn: Option<(u64, usize)>,
    /// Run as soon as the batch has committed (`WriteContext::on_commit`).
    on_commit: Vec<super::context::CommitHook>,
    /// Run once the batch is durable, before its callers are answered.
    on_durable: Vec<super::context::CommitHook>,
}

impl Done {
    /// Publishes the batch now, or, with a commit log, hands it to the sync
    /// thread, which publishes it once its record (and every earlier one)
    /// is synced.
    /// The answers of operations submitted unsynced leave now (the batch
    /// has committed), and its commit hooks run.
    fn finish(mut self, shared: &Shared, syncer: Option<&Syncer>) {
        std::mem::take(&mut self.on_commit)
            .into_iter()
            .for_each(|hook| hook());
        match syncer {
            Some(syncer) => {
                if self.replies.iter().any(|r| r.unsynced()) {
                    let (now, later) = std::mem::take(&mut self.replies)
                        .into_iter()
                        .partition::<Vec<_>, _>(|r| r.unsynced());
                    now.into_iter().for_each(|r| r.send(None));
                    self.replies = later;
                }
                syncer.hand_over(shared, self)
            }
            None => self.publish(shared),
        }
    }

    /// Publishes the batch's catalog changes and stream records and answers
    /// its callers.
    fn publish(self, shared: &Shared) {
        self.on_durable.into_iter().for_each(|hook| hook());
        for change in self.catalog {
            shared.catalog.apply(change);
        }
        if self.stream_written {
            shared.commits.send_modify(|n| *n += 1);
        }
        self.replies.into_iter().for_each(|r| r.send(None));
    }

    fn fail(self, e: &StoreError) {
        self.replies
            .into_iter()
            .for_each(|r| r.send(Some(e.clone())));
    }
}

/// The thread that syncs the commit log and answers the batches it holds,
/// in commit order, while the writer runs the next batches. One
/// `fdatasync` serves every batch that finished while the last one ran.
struct Syncer {
    tx: Sender<Done>,
    thread: JoinHandle<()>,
}

impl Syncer {
    fn start(files: [std::fs::File; 2], shared: Arc<Shared>) -> Syncer {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("postbox-store-sync".to_owned())
            .spawn(move || sync_loop(&files, &shared, &rx))
            .expect("spawn the commit log's sync thread");
        Syncer { tx, thread }
    }

    fn hand_over(&self, shared: &Shared, done: Done) {
        if let Err(mpsc::SendError(done)) = self.tx.send(done) {
            let reason = "the commit log's sync thread has stopped".to_owned();
            shared.fail(reason.clone());
            done.fail(&StoreError::Storage(reason));
        }
    }

    /// Waits until every batch handed over is answered.
    fn stop(self) {
        drop(self.tx);
        let _ = self.thread.join();
    }
}

/// `files` are the log's regions: a group whose records span a checkpoint
/// has some in each, and both are synced.
fn sync_loop(files: &[std::fs::File; 2], shared: &Shared, rx: &Receiver<Done>) {
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        group.extend(rx.try_iter());
        let newest = group.iter().filter_map(|d| d.lsn).map(|(lsn, _)| lsn).max();
        let mut regions = [false; 2];
        group
            .iter()
            .filter_map(|d| d.lsn)
            .for_each(|(_, region)| regions[region] = true);
        let synced = match (shared.failure(), newest) {
            (Some(reason), _) => Err(refused(&reason)),
            (None, None) => Ok(()),
            (None, Some(lsn)) => files
                .iter()
                .zip(regions)
                .filter(|(_, written)| *written)
                .try_for_each(|(file, _)| {
                    crate::faults::io_fault(crate::faults::GROUP_SYNC)?;
                    sync_log(file)
                })
                .map(|()| shared.gate.synced(lsn))
                .map_err(|e| StoreError::Storage(format!("commit log sync: {e}"))),
        };
        match synced {
            Ok(()) => group.into_iter().for_each(|d| d.publish(shared)),
            Err(e) => {
                if shared.failure().is_none() {
                    tracing::error!(error = %e, "the store stopped accepting writes after a storage failure");
                }
                shared.fail(e.to_string());
                group.into_iter().for_each(|d| d.fail(&e));
            }
        }
    }
}

/// Runs every job of a batch in `txn`, collecting their answers. A storage
/// failure stops the batch: the jobs not yet run are refused, and the error
/// is returned so the caller fails the ones that ran.
fn run_jobs(
    txn: &redb::WriteTransaction,
    log: &OpLog,
    shared: &Shared,
    batch: Vec<Box<dyn Job>>,
    replies: &mut Vec<Box<dyn Reply>>,
) -> Result<super::context::Finished, StoreError> {
    let mut jobs = batch.into_iter();
    let result = (|| {
        let mut ctx = WriteContext::open(
            txn,
            log,
            &shared.log_tables,
            &shared.catalog,
            shared.clock.now_ms(),
        )?;
        for job in jobs.by_ref() {
            let reply = job.run(&mut ctx);
            let (storage_failure, succeeded) = (reply.storage_failure(), reply.succeeded());
            replies.push(reply);
            if let Some(message) = storage_failure {
                return Err(StoreError::Storage(format!(
                    "an operation of the batch failed: {message}"
                )));
            }
            ctx.end_op(succeeded)?;
        }
        ctx.finish()
    })();
    if let Err(e) = &result {
        jobs.for_each(|job| job.refuse(e.clone()));
    }
    result
}

fn fail_all(batch: Vec<Box<dyn Job>>, e: StoreError) -> String {
    let reason = e.to_string();
    batch.into_iter().for_each(|job| job.refuse(e.clone()));
    reason
}

fn fail_replies(replies: Vec<Box<dyn Reply>>, e: StoreError) -> String {
    let reason = e.to_string();
    replies.into_iter().for_each(|r| r.send(Some(e.clone())));
    reason
}
