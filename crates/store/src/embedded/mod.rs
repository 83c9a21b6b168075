//! The embedded backend: DynamoDB's item model and change streams on one
//! local redb file.
//!
//! Code map:
//! - `tables`: the redb tables of the file and their byte layout;
//! - `catalog`: table metadata and CreateTable's rules;
//! - `keys`: where an item lives in the file, key validation;
//! - `index`: secondary indexes, their rules and their rows;
//! - `validate`: request rules that need no stored data;
//! - `writer`: the single writer thread and its group commit;
//! - `context`: [`WriteContext`], what an operation inside a commit can do
//!   (`context/control`: creating, changing and dropping tables);
//! - `write_ops` / `read_ops` / `range_ops`: the item operations (writes,
//!   point reads, Query and Scan);
//! - `stream`: change-stream records and their blocks; `ttl`: expiry and
//!   the sweeper; `idempotency`: ClientRequestToken of transactions.
//!
//! # Reads and writes
//!
//! Reads run on the calling task in a redb read transaction (a snapshot of
//! the last commit; readers never wait for the writer). Writes are compiled
//! on the calling task (expressions parsed, keys and sizes validated, a
//! put's item encoded: the writer thread is the store's one serial
//! resource, so whatever can be done before it is) and
//! queued to ONE writer thread, which commits whatever is queued in one
//! transaction with one fsync (group commit) and answers each caller only
//! after that commit.
//!
//! # The writer hook for other modules
//!
//! [`EmbeddedStore::submit`] runs any closure
//! `FnOnce(&mut WriteContext) -> StoreResult<T>` inside the same group-commit
//! transaction as item writes, e.g. a queue's "enqueue + advance the relay
//! checkpoint". Contract:
//! - the closure runs on the writer thread, after the operations queued
//!   before it in the same batch, and sees their effects;
//! - item changes made through the context (`put_item`, `delete_item`) are
//!   staged: they keep the TTL index and the change stream in step and are
//!   applied only if the closure returns `Ok`; on `Err` nothing it staged is
//!   written and the rest of the batch commits normally;
//! - `set_checkpoint` and raw writes through [`WriteContext::transaction`]
//!   are NOT staged: validate first, write last, never fail after writing;
//! - returning `StoreError::Storage` (or panicking) fails the whole batch
//!   and stops the store;
//! - [`WriteContext::on_commit`] leaves a callback that runs on the writer
//!   once the batch has committed (before the log's sync), whatever the
//!   closure returned, and never if the batch fails;
//! - the closure must be quick and must not block: the whole batch waits.
//!
//! Architecture Invariant: a write is acknowledged only after the commit
//! that holds it, with its stream record, returned (fsync'd in `Durable`).
//! A batch that changed nothing is not committed at all: its answers rest
//! on state earlier commits already made durable. The exception is asked
//! for by name ([`EmbeddedStore::submit_unsynced`],
//! `ItemStore::update_item_unsynced`, `ItemStore::put_item_unsynced`):
//! answered at the commit, before the commit log's fsync, for writes that a
//! later synced write makes durable and whose loss in a crash only makes
//! work happen again (an in-process worker's receive and claim, and the
//! relay's delivery into this store's queues).
//!
//! # Known differences from DynamoDB
//!
//! - Reads never return an item whose TTL has passed, even before the
//!   sweeper deleted it (DynamoDB may return it for a while).
//! - ItemCount in DescribeTable is exact (counted from a snapshot, on a
//!   blocking thread), where DynamoDB updates it about every six hours. No
//!   request check counts: they read the key schema from the catalog.
//! - Secondary index reads are exact (an index row changes in its item's
//!   commit), where DynamoDB's global indexes are eventually consistent; a
//!   deleted index is gone at once rather than DELETING for a while.

mod arrival;
mod catalog;
mod context;
mod deferred;
mod gate;
mod idempotency;
mod index;
mod keys;
mod logged;
mod options;
mod range_ops;
mod read_ops;
mod recent;
mod row;
mod stream;
mod tables;
mod traits;
mod ttl;
mod validate;
mod wal;
mod write_ops;
mod writer;

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use redb::{Database, ReadTransaction, ReadableDatabase, ReadableTable};
use tokio::sync::watch;

use crate::api::*;
use crate::{ChangeStreams, ItemStore, StoreError, StoreResult};

use crate::clock::Clock;
pub use arrival::TAG as ROW_ORDER_TAG;
use catalog::{Catalog, TableMeta as Meta};
pub use catalog::{Counts, KeyAttribute, TableMeta};
pub use context::WriteContext;
pub use index::IndexMeta;
use logged::LogTables;
pub use logged::{FIRST_SET_CODE, LoggedTable, TableOpener, TableSet};
pub use options::{DEFAULT_CACHE_BYTES, Durability, EmbeddedOptions};
use writer::Writer;

/// State shared by the store handle, the writer and the sweeper.
pub(crate) struct Shared {
    pub(crate) catalog: Catalog,
    /// The tables the commit log can name.
    pub(crate) log_tables: LogTables,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) options: EmbeddedOptions,
    /// Bumped after every commit that wrote a stream record, once it is
    /// durable (with a commit log, once its record is synced).
    pub(crate) commits: watch::Sender<u64>,
    /// Bumped as soon as redb publishes such a commit, before its sync: it
    /// wakes [`EmbeddedStore::wait_for_committed_records`].
    pub(crate) committed: watch::Sender<u64>,
    failure: Mutex<Option<String>>,
    /// Counters of the writer, for [`EmbeddedStore::writer_stats`].
    pub(crate) stats: WriterCounters,
    /// Keeps readers from seeing commits whose log record is not synced.
    pub(crate) gate: gate::SyncGate,
    /// When each table last changed, for [`EmbeddedStore::change_count`].
    pub(crate) changes: TableChanges,
    /// The images of the records the last batches wrote by reference.
    pub(crate) recent: recent::RecentImages,
}

/// The commit at which each table's items or metadata last changed: the
/// writer marks the tables a commit changed as soon as redb publishes it
/// (before its sync, as [`ItemStore::get_item_committed`] sees it).
#[derive(Debug, Default)]
pub(crate) struct TableChanges(std::sync::RwLock<Marks>);

#[derive(Debug, Default)]
struct Marks {
    /// Commits that changed a table, numbered from 1.
    commits: u64,
    /// Table id -> the number of the last commit that changed it.
    last: std::collections::HashMap<u32, u64>,
}

impl TableChanges {
    /// Marks `tables` changed by a commit redb has just published.
    pub(crate) fn committed(&self, tables: &[u32]) {
        if tables.is_empty() {
            return;
        }
        let mut marks = self.0.write().expect("table changes lock");
        marks.commits += 1;
        let n = marks.commits;
        for id in tables {
            marks.last.insert(*id, n);
        }
    }

    /// The number of the last commit that changed table `id` (0: none
    /// since the store was opened).
    fn of(&self, id: u32) -> u64 {
        let marks = self.0.read().expect("table changes lock");
        marks.last.get(&id).copied().unwrap_or(0)
    }
}

/// Counters the writer bumps after each commit.
#[derive(Debug, Default)]
pub(crate) struct WriterCounters {
    pub(crate) commits: std::sync::atomic::AtomicU64,
    pub(crate) operations: std::sync::atomic::AtomicU64,
    pub(crate) run_us: std::sync::atomic::AtomicU64,
    pub(crate) commit_us: std::sync::atomic::AtomicU64,
}

/// What the writer has done since the store was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Transactions committed (with a commit log, each one a log record;
    /// without one, each one fsync when durable).
    pub commits: u64,
    /// Operations (requests and submitted closures) in those commits.
    pub operations: u64,
    /// Microseconds the writer spent running operations (reading, checking
    /// conditions, encoding, inserting into the B-trees) of those commits.
    pub run_us: u64,
    /// Microseconds the writer spent committing them: the log record's
    /// write and redb's commit (a checkpoint's: writing the dirty pages; the
    /// fsync, without a commit log). What is left of the wall time, the
    /// writer was waiting for work.
    pub commit_us: u64,
}

impl Shared {
    pub(crate) fn failure(&self) -> Option<String> {
        self.failure.lock().expect("failure lock").clone()
    }

    /// The store stops accepting writes for good, and readers waiting for a
    /// commit to be synced get an error: nothing will sync it now.
    pub(crate) fn fail(&self, reason: String) {
        self.failure
            .lock()
            .expect("failure lock")
            .get_or_insert(reason);
        self.gate.fail();
    }
}

pub(crate) struct Inner {
    pub(crate) db: Arc<Database>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) writer: Writer,
    /// Dropped after the fields above, so after the database closed (when
    /// this held its last handle): see [`EmbeddedStore::closed`].
    closed: tokio::sync::watch::Sender<()>,
}

/// Owns the background threads; stopping them when the last handle goes.
struct Running {
    inner: Arc<Inner>,
    /// Item rows visited by range reads (Query, Scan, DescribeTable's
    /// count): see [`EmbeddedStore::rows_ranged`].
    rows_ranged: std::sync::atomic::AtomicU64,
    sweeper_stop: Mutex<Option<mpsc::Sender<()>>>,
    sweeper: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        drop(self.sweeper_stop.lock().expect("sweeper lock").take());
        if let Some(t) = self.sweeper.lock().expect("sweeper lock").take() {
            let _ = t.join();
        }
        self.inner.writer.stop();
    }
}

/// The embedded item store: one redb file, cheap to clone.
#[derive(Clone)]
pub struct EmbeddedStore {
    running: Arc<Running>,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore").finish_non_exhaustive()
    }
}

/// A redb error as the store's storage error.
pub(crate) fn storage_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Storage(e.to_string())
}

fn log_recovery(recovered: &wal::Recovered) {
    for lost in &recovered.lost {
        tracing::warn!(
            damage = %lost,
            "opened with a damaged commit log (recover_truncated): acknowledged writes may be lost"
        );
    }
    if recovered.records > 0 {
        tracing::info!(
            records = recovered.records,
            through = recovered.applied,
            "replayed the commit log"
        );
    }
}

impl EmbeddedStore {
    /// Opens (or creates) the store file at `path`, recovering it after a
    /// crash, and starts the writer and the TTL sweeper.
    pub fn open(
        path: impl AsRef<std::path::Path>,
        options: EmbeddedOptions,
    ) -> StoreResult<EmbeddedStore> {
        Self::open_wrapped(path.as_ref(), options, |file| file)
    }

    /// [`EmbeddedStore::open`], with the file's redb backend wrapped by
    /// `wrap`: for tests that lose the writes a machine had not synced when
    /// its power went.
    #[cfg(any(test, feature = "faults"))]
    pub fn open_with_file_wrapper<B: redb::StorageBackend>(
        path: impl AsRef<std::path::Path>,
        options: EmbeddedOptions,
        wrap: impl FnOnce(redb::backends::FileBackend) -> B,
    ) -> StoreResult<EmbeddedStore> {
        Self::open_wrapped(path.as_ref(), options, wrap)
    }

    fn open_wrapped<B: redb::StorageBackend>(
        path: &std::path::Path,
        options: EmbeddedOptions,
        wrap: impl FnOnce(redb::backends::FileBackend) -> B,
    ) -> StoreResult<EmbeddedStore> {
        let logged = options.durability == Durability::Durable && options.commit_log;
        let mut builder = Database::builder();
        builder.set_cache_size(options.cache_bytes);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| storage_err(format!("{}: {e}", path.display())))?;
        let file = wrap(redb::backends::FileBackend::new(file).map_err(storage_err)?);
        let log_path = wal::path_for(path);
        if !logged {
            let db = builder.create_with_backend(file).map_err(storage_err)?;
            let log_tables = LogTables::for_file(&options.tables, &db)?;
            let recovered = recover(&db, &log_path, &options, &log_tables)?;
            log_recovery(&recovered);
            let snapshots = arrival::take_snapshots(&db, recovered.records == 0)?;
            // Everything the log held is in the file now.
            wal::closed_without_log(&db)?;
            for region in wal::region_paths(&log_path) {
                match std::fs::remove_file(&region) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(storage_err(format!("{}: {e}", region.display()))),
                }
            }
            return EmbeddedStore::start(db, options, log_tables, None, snapshots);
        }
        // With a log, the store file's syncs run beside the writer: a
        // checkpoint's commit returns before its pages are on disk, and the
        // log keeps its records until they are (see `wal` and `deferred`).
        let backend = deferred::DeferredSync::new(file).map_err(storage_err)?;
        let syncs = backend.state();
        let db = builder.create_with_backend(backend).map_err(storage_err)?;
        let log_tables = LogTables::for_file(&options.tables, &db)?;
        let recovered = recover(&db, &log_path, &options, &log_tables)?;
        log_recovery(&recovered);
        let snapshots = arrival::take_snapshots(&db, recovered.records == 0)?;
        let wal = wal::Wal::open(&log_path, &recovered, wal::store_id(&db)?, syncs)?;
        wal.in_use(&db)?;
        EmbeddedStore::start(db, options, log_tables, Some(wal), snapshots)
    }

    /// Opens a store on any redb storage backend: `redb::backends::InMemoryBackend`
    /// for throwaway stores in tests, or a backend that injects I/O faults.
    pub fn open_with_backend(
        backend: impl redb::StorageBackend,
        options: EmbeddedOptions,
    ) -> StoreResult<EmbeddedStore> {
        let db = Database::builder()
            .set_cache_size(options.cache_bytes)
            .create_with_backend(backend)
            .map_err(storage_err)?;
        tables::check_format(&db)?;
        let log_tables = LogTables::for_file(&options.tables, &db)?;
        let snapshots = arrival::take_snapshots(&db, true)?;
        EmbeddedStore::start(db, options, log_tables, None, snapshots)
    }

    fn start(
        db: Database,
        options: EmbeddedOptions,
        log_tables: LogTables,
        wal: Option<wal::Wal>,
        snapshots: arrival::Saved,
    ) -> StoreResult<EmbeddedStore> {
        let tables = load_tables(&db, snapshots)?;
        let (commits, _) = watch::channel(0);
        let (committed, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            catalog: Catalog::new(tables).with_arrival_tables(options.arrival_tables.clone()),
            log_tables,
            clock: options.clock.clone(),
            options: options.clone(),
            commits,
            committed,
            failure: Mutex::new(None),
            stats: WriterCounters::default(),
            gate: gate::SyncGate::new(wal.is_some()),
            changes: TableChanges::default(),
            recent: recent::RecentImages::default(),
        });
        let format = tables::system_value(&db, tables::FORMAT_KEY)?;
        let db = Arc::new(db);
        let writer = Writer::start(db.clone(), shared.clone(), wal);
        if format == Some(tables::FORMAT_ARRIVAL_TTL_ROWS) {
            // This build notes the expiries of tables in arrival order
            // without `ttl_index` rows, which a build reading format 2 would
            // never sweep: the file says so before anything is written.
            writer.submit_detached("raising the store file's format", |ctx| {
                ctx.raise_format(tables::FORMAT_ARRIVAL)
            })?;
        }
        let inner = Arc::new(Inner {
            db,
            shared,
            writer,
            closed: tokio::sync::watch::Sender::new(()),
        });
        let (stop_tx, stop_rx) = mpsc::channel();
        let sweeper_inner = inner.clone();
        let interval = options.ttl_sweep_interval;
        let sweeper = std::thread::Builder::new()
            .name("postbox-store-ttl".to_owned())
            .spawn(move || ttl::run_sweeper(sweeper_inner, interval, stop_rx))
            .map_err(storage_err)?;
        Ok(EmbeddedStore {
            running: Arc::new(Running {
                inner,
                rows_ranged: std::sync::atomic::AtomicU64::new(0),
                sweeper_stop: Mutex::new(Some(stop_tx)),
                sweeper: Mutex::new(Some(sweeper)),
            }),
        })
    }

    fn inner(&self) -> &Inner {
        &self.running.inner
    }

    /// Resolves once the store has closed: the last handle dropped, the
    /// writer ran its closing checkpoint (which saves the arrival indexes)
    /// and the file was closed. A server awaits it before saying it shut
    /// down, so that its last line follows the store's last write.
    pub fn closed(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut watch = self.inner().closed.subscribe();
        async move { while watch.changed().await.is_ok() {} }
    }

    /// Whether the store was opened with the [`TableSet`] that `owner` keeps
    /// ([`EmbeddedOptions::tables`]).
    pub fn keeps(&self, owner: &str) -> bool {
        self.inner().shared.log_tables.keeps(owner)
    }

    /// How many item rows range reads have visited since the store opened:
    /// every row a Query or Scan page examined and every row DescribeTable
    /// or DeleteTable counted. Point reads (GetItem, the writer's condition
    /// checks) do not count. Tests use it to show that a request's cost
    /// does not grow with a table (an HTTP emit visits no row of the tables
    /// it writes).
    pub fn rows_ranged(&self) -> u64 {
        self.running
            .rows_ranged
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the open read the index of `table` (kept in arrival order)
    /// from the snapshot its last clean close left (true) or built it from
    /// the table's rows (false); None for a table not kept in arrival order
    /// or not found.
    pub fn arrival_index_restored(&self, table: &str) -> Option<bool> {
        let meta = self.inner().shared.catalog.get(table).ok()?;
        meta.arrival.as_ref().map(|index| index.restored())
    }

    fn count_ranged(&self, rows: u64) {
        self.running
            .rows_ranged
            .fetch_add(rows, std::sync::atomic::Ordering::Relaxed);
    }

    /// Runs `op` inside the writer's next group commit and returns its result
    /// once that commit is durable. See the module documentation for the
    /// contract.
    pub async fn submit<T, F>(&self, op: F) -> StoreResult<T>
    where
        F: FnOnce(&mut WriteContext<'_>) -> StoreResult<T> + Send + 'static,
        T: Send + 'static,
    {
        self.inner().writer.submit(op).await
    }

    /// [`EmbeddedStore::submit`], answered as soon as the writer's commit
    /// holding `op` is made, before the commit log has synced it. A crash in
    /// between (about one fsync long) loses the write although its caller
    /// saw it succeed. Every later commit is logged after it, so a later
    /// write that waited for its sync makes this one durable too. For
    /// operations nothing outside the store acts on until such a later
    /// write, or whose effects may happen again: a receive by a consumer in
    /// this process (the message comes back, and its holder died in the
    /// same crash). A store without a commit log answers at its durable
    /// commit, as `submit` does.
    pub async fn submit_unsynced<T, F>(&self, op: F) -> StoreResult<T>
    where
        F: FnOnce(&mut WriteContext<'_>) -> StoreResult<T> + Send + 'static,
        T: Send + 'static,
    {
        self.inner().writer.submit_unsynced(op).await
    }

    /// [`ChangeStreams::read_stream`] as of the last commit, whether or not
    /// the commit log has synced it yet: the reader does not wait out the
    /// sync of what it reads. A crash before that sync loses the records it
    /// read. Only for a reader whose every effect is a later write to this
    /// store (the relay enqueuing into this store's queues and moving its
    /// checkpoint): the log orders that write after the records, so a crash
    /// loses both or neither. Anything done outside the store on what was
    /// read waits for its sync first ([`EmbeddedStore::wait_synced`]; the
    /// queues' early receive waits for the commits a send was made after).
    pub async fn read_committed_stream(
        &self,
        table_name: &str,
        after: u64,
        limit: usize,
    ) -> StoreResult<Vec<StreamRecord>> {
        self.read_committed_stream_where(table_name, after, limit, &mut stream::every)
            .await
    }

    /// [`EmbeddedStore::read_committed_stream`] for a reader that needs a
    /// record's images only if its keys pass `wanted`, called with each
    /// record's sequence number and keys in order: the records it refuses
    /// come without images, which are neither looked up nor decoded. A
    /// relay whose filters refuse a record on its keys alone reads it so.
    pub async fn read_committed_stream_where(
        &self,
        table_name: &str,
        after: u64,
        limit: usize,
        wanted: &mut (dyn FnMut(u64, &postbox_item::Item) -> bool + Send),
    ) -> StoreResult<Vec<StreamRecord>> {
        let meta = self.stream_meta(table_name)?;
        stream::read(
            &self.committed_snapshot()?,
            &meta,
            after,
            limit,
            wanted,
            Some(&self.inner().shared.recent),
        )
    }

    /// [`ChangeStreams::stream_head`] as of the last commit, synced or not
    /// (see [`EmbeddedStore::read_committed_stream`]).
    pub async fn committed_stream_head(&self, table_name: &str) -> StoreResult<u64> {
        let meta = self.stream_meta(table_name)?;
        Ok(stream::head(&self.committed_snapshot()?, meta.id)?.0)
    }

    /// [`ChangeStreams::wait_for_records`], woken by a commit rather than
    /// by its sync (see [`EmbeddedStore::read_committed_stream`]).
    pub async fn wait_for_committed_records(
        &self,
        table_name: &str,
        after: u64,
        timeout: Duration,
    ) -> StoreResult<bool> {
        self.wait_for_head(table_name, after, timeout, false).await
    }

    /// Waits until every commit made so far is durable: what a reader of
    /// [`EmbeddedStore::read_committed_stream`] does before acting outside
    /// the store on what it read.
    pub async fn wait_synced(&self) -> StoreResult<()> {
        self.wait_synced_to(self.committed_mark()).await
    }

    /// A mark of every commit made so far, for
    /// [`EmbeddedStore::wait_synced_to`]. Inside an operation (on the
    /// writer), every commit before the operation's own.
    pub fn committed_mark(&self) -> u64 {
        self.inner().shared.gate.visible()
    }

    /// Waits until the commits `mark` covers are durable (at once without
    /// a commit log, whose commits are durable when made).
    pub async fn wait_synced_to(&self, mark: u64) -> StoreResult<()> {
        self.inner().shared.gate.wait_for(mark).await
    }

    /// A number that differs after every commit that changed an item of
    /// `table_name` (a put, update or delete, the TTL sweeper's too): a
    /// caller that reads it before it reads the table may keep what it read
    /// for as long as the number stays the same. None if there is no such
    /// table. It moves when the commit is published, before its sync, as
    /// [`ItemStore::get_item_committed`] sees it. A table deleted and
    /// created again never repeats a number its earlier self gave.
    pub fn change_count(&self, table_name: &str) -> Option<u64> {
        let shared = &self.inner().shared;
        let meta = shared.catalog.get(table_name).ok()?;
        Some(shared.changes.of(meta.id))
    }

    /// How many commits and operations the writer has done: operations per
    /// commit is the group-commit factor.
    pub fn writer_stats(&self) -> WriterStats {
        use std::sync::atomic::Ordering::Relaxed;
        let stats = &self.inner().shared.stats;
        WriterStats {
            commits: stats.commits.load(Relaxed),
            operations: stats.operations.load(Relaxed),
            run_us: stats.run_us.load(Relaxed),
            commit_us: stats.commit_us.load(Relaxed),
        }
    }

    /// Runs one TTL sweep and stream trim now (the background sweeper does
    /// this every `ttl_sweep_interval`); for tests and tools.
    pub async fn sweep_now(&self) -> StoreResult<()> {
        let running = self.running.clone();
        tokio::task::spawn_blocking(move || ttl::sweep_once(&running.inner))
            .await
            .map_err(|e| StoreError::Storage(format!("the sweep task failed: {e}")))?
    }

    /// A read snapshot of the last commit, once that commit is durable. The
    /// wait for the sync is asynchronous: no runtime thread stands still.
    async fn snapshot(&self) -> StoreResult<ReadTransaction> {
        let txn = self.inner().db.begin_read().map_err(storage_err)?;
        self.wait_synced().await?;
        Ok(txn)
    }

    /// [`EmbeddedStore::snapshot`], or with `synced` false
    /// [`EmbeddedStore::committed_snapshot`].
    async fn snapshot_of(&self, synced: bool) -> StoreResult<ReadTransaction> {
        if synced {
            self.snapshot().await
        } else {
            self.committed_snapshot()
        }
    }

    /// A read snapshot of the last commit, durable or not (see
    /// [`EmbeddedStore::read_committed_stream`]).
    fn committed_snapshot(&self) -> StoreResult<ReadTransaction> {
        if let Some(reason) = self.inner().shared.failure() {
            return Err(StoreError::Storage(format!(
                "the store stopped after a storage failure: {reason}"
            )));
        }
        self.inner().db.begin_read().map_err(storage_err)
    }

    /// Waits (without polling) until `table_name`'s stream has a record
    /// after `after`, synced (woken by `commits`) or only committed (woken by
    /// `committed`), or until `timeout` passes; returns whether one is
    /// there. The wake-ups are subscribed before the first look, so a commit
    /// between the look and the wait still wakes it.
    async fn wait_for_head(
        &self,
        table_name: &str,
        after: u64,
        timeout: Duration,
        synced: bool,
    ) -> StoreResult<bool> {
        let meta = self.stream_meta(table_name)?;
        let shared = &self.inner().shared;
        let mut commits = if synced {
            shared.commits.subscribe()
        } else {
            shared.committed.subscribe()
        };
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if stream::head(&self.snapshot_of(synced).await?, meta.id)?.0 > after {
                return Ok(true);
            }
            match tokio::time::timeout_at(deadline, commits.changed()).await {
                Ok(Ok(())) => continue,
                Ok(Err(_)) => return Err(StoreError::Storage("the store is closing".to_owned())),
                Err(_) => return Ok(false),
            }
        }
    }

    fn now_ms(&self) -> u64 {
        self.inner().shared.clock.now_ms()
    }

    fn catalog(&self) -> &Catalog {
        &self.inner().shared.catalog
    }

    fn stream_meta(&self, table_name: &str) -> StoreResult<Arc<Meta>> {
        let meta = self.catalog().get(table_name)?;
        if meta.stream_view_type.is_none() {
            return Err(StoreError::validation(format!(
                "Table {table_name} has no stream; enable one with StreamSpecification"
            )));
        }
        Ok(meta)
    }
}

/// Replays the commit log into a file of a format this build reads: checked
/// before the replay, and again after it (the replay may bring the commit
/// that raised it) and before the open writes anything of its own.
fn recover(
    db: &Database,
    log_path: &std::path::Path,
    options: &EmbeddedOptions,
    log_tables: &LogTables,
) -> StoreResult<wal::Recovered> {
    tables::check_format(db)?;
    let recovered = wal::recover(db, log_path, options.recover_truncated, log_tables)?;
    tables::check_format(db)?;
    Ok(recovered)
}

/// Reads every table's metadata from the file, and takes the index of each
/// table kept in arrival order from `snapshots` (read from the last clean
/// close's, by table id) or, without a usable one, builds it from its rows.
fn load_tables(db: &Database, mut snapshots: arrival::Saved) -> StoreResult<Vec<Meta>> {
    let txn = db.begin_read().map_err(storage_err)?;
    let Some(meta) = tables::open_if_present(&txn, tables::META)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for row in meta.iter().map_err(storage_err)? {
        let (name, json) = row.map_err(storage_err)?;
        let mut parsed: Meta = serde_json::from_str(json.value()).map_err(|e| {
            StoreError::Storage(format!("corrupt metadata of table {}: {e}", name.value()))
        })?;
        if parsed.arrival_order {
            let started = std::time::Instant::now();
            let mut took = std::time::Duration::ZERO;
            let restored = match snapshots.remove(&parsed.id) {
                Some((read, read_in)) => read
                    .inspect(|_| took = read_in)
                    .inspect_err(|e| {
                        tracing::warn!(table = %parsed.name, problem = %e, "the snapshot of a table's arrival index is damaged: rebuilding it from the rows");
                    })
                    .ok(),
                None => None,
            };
            let index = match (restored, tables::open_if_present(&txn, tables::ITEMS)?) {
                (Some(index), _) => index,
                (None, Some(items)) => arrival::ArrivalIndex::build(&items, &parsed)?,
                (None, None) => arrival::ArrivalIndex::new(),
            };
            tracing::info!(
                table = %parsed.name,
                places = index.len(),
                from = if index.restored() { "snapshot" } else { "rows" },
                ms = (started.elapsed() + took).as_millis() as u64,
                "indexed a table kept in arrival order"
            );
            parsed.arrival = Some(Arc::new(index));
        }
        out.push(parsed);
    }
    Ok(out)
}
