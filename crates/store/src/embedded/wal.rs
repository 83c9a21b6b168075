//! The commit log: what makes a commit durable without redb writing its
//! pages at every commit.
//!
//! A durable redb commit rewrites every B-tree page the commit touched, as
//! whole pages scattered over the file, and waits for the disk. For the small
//! commits of a busy store that costs several times the bytes of the rows
//! (see `research/write-amplification.md`). So a store with a log commits
//! this way instead:
//!
//! 1. the batch runs in a redb transaction, every change recorded in an
//!    [`OpLog`](super::logged::OpLog) as it is made;
//! 2. the changes are written to the log file as one record, numbered with
//!    the next log sequence number (LSN);
//! 3. the redb transaction commits *without* durability (its pages stay in
//!    redb's write buffer) and the writer goes on with the next batch;
//! 4. the sync thread syncs the log (`fdatasync` of a file whose length does
//!    not change: one flush for every record written since the last one)
//!    and only then answers the batch's callers. A reader whose snapshot
//!    holds a commit waits until that commit's record is synced
//!    (`gate::SyncGate`), so nobody sees a write a crash could take back.
//!
//! Every so often ([`CHECKPOINT_BYTES`] of log or [`CHECKPOINT_AGE`]) a
//! batch is committed durably by redb instead, writing the LSN of its own
//! record into the `system` table (`wal_applied`). Only durable commits
//! write it: a crash takes the file back to its last durable commit, so
//! nothing else could ever be read back.
//!
//! That commit returns before its pages are on disk: the store file's
//! backend (`deferred`) writes and syncs them on a thread of its own, while
//! the writer goes on (a checkpoint's writes and sync took 10-20 ms of the
//! writer's time before). So the
//! log has two regions, two files (`<store>-log` and `<store>-log.1`): a
//! checkpoint's record ends one region, which the writer syncs before the
//! checkpoint commits (so no later record can reach the disk before it),
//! and the records after it start the other from its beginning. The next
//! checkpoint waits until this one's sync is done, since until then a crash
//! brings back the file of the checkpoint before, which needs every record
//! of the region just left. When it switches back, that region's records
//! are all in the file.
//!
//! Each file starts with a header naming the store file it belongs to (a
//! random identity kept in the store's `system` table); recovery refuses a
//! log of another store file rather than replay its records here. The
//! header also holds an epoch drawn at each open, which every record's
//! checksum covers: the records an earlier open left in a region (after a
//! crash, some of them beyond a torn one) can never be read as this
//! open's.
//!
//! Recovery (at open): redb comes back at its last durable commit, whose
//! `wal_applied` LSN says which records it holds; the records after it are
//! replayed in one durable transaction. Each region is read from its start
//! while each record is whole (magic, length, CRC-32) and numbered one more
//! than the one before; what follows (a torn write, or records of an
//! earlier round, whose numbers are lower) is not part of it. The records
//! of both regions after the file's LSN must then run on without a hole.
//!
//! A crash leaves at most a torn last record, which was never answered;
//! any other damage may have taken acknowledged writes with it, so
//! recovery refuses it (an error naming the file, the byte offset and the
//! LSNs; nothing is replayed or changed):
//! - a region shorter than it was allocated (cut), unless the last close
//!   was clean: the header (version 3) holds the allocated length, which
//!   the grow thread rewrites only once a step's zeros and length are
//!   synced;
//! - a damaged record with a whole record of the same epoch after it,
//!   numbered above both the last one read and the file's LSN: records an
//!   earlier round of this open left further on have lower numbers (and
//!   are all in the file: a region is written over only after that), and
//!   those of earlier opens fail the checksum;
//! - records that do not start right after the file's LSN, or a hole
//!   between the regions;
//! - a region missing, or without a header, while the store's last close
//!   was not clean: the `system` table's `clean_close` is 0 from a durable
//!   commit at each open (once the regions exist, before any record) and 1
//!   from the closing checkpoint, after which the log holds nothing the
//!   file lacks (it may then be deleted).
//!
//! A power cut may also, rarely, leave a whole unsynced record after a
//! torn unsynced one (the kernel or the disk wrote their pages back out of
//! order); recovery cannot tell that from damage and refuses it too, and
//! with `recover_truncated` loses only writes that were never answered.
//!
//! `EmbeddedOptions::recover_truncated` opens such a store anyway: the
//! consecutive records after the file's LSN are replayed, and what was lost
//! is logged as warnings. Logs of versions 1 and 2, and logs without a
//! header, are read as before, without the length check (and version 1 and
//! headerless ones, without an epoch, without the search after damage).
//!
//! Architecture Invariant: a batch is answered, and readers see it, only
//! after its record is synced; the last region is synced before a record
//! goes to the other one; a region is written over only after a synced
//! durable commit whose LSN covers every record in it; and a region's
//! header never claims more length than is synced. Checked by
//! `tests/log_faults.rs` (failed writes and syncs, a power cut during a
//! checkpoint's sync), `tests/crash.rs` (SIGKILL at random moments: no
//! false alarm of damage either), `tests/log_damage.rs` (a cut or missing
//! region after a crash, refused and opened with `recover_truncated`; a
//! clean close's log deleted) and the tests below
//! (`a_region_cut_short_is_refused_naming_the_file_and_the_position`,
//! `a_damaged_record_before_the_last_is_refused_naming_the_file_and_the_position`,
//! `a_torn_last_record_after_a_crash_is_recovered_silently`,
//! `records_land_in_space_allocated_ahead_of_them_across_growth_steps`,
//! `a_checkpoint_switches_regions_and_the_next_waits_for_its_sync`).

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redb::Database;

use crate::StoreError;

use super::deferred::SyncState;
use super::logged::{self, corrupt};
use super::storage_err;
use super::tables::{CLEAN_CLOSE, STORE_ID, SYSTEM, WAL_APPLIED, system_value};

/// Log bytes after which the next batch is committed durably by redb.
///
/// A checkpoint holds the writer while redb writes every page the interval
/// dirtied (about 1.6 bytes of pages per byte of log, measured); it used to
/// hold it for their sync too (together about 2.3 ms per MB of log here),
/// which now runs beside the writer (`deferred`). For append-heavy work the
/// bytes per event barely depend on the interval, so short intervals cost little
/// throughput and keep the stalls short: with 64 MB / 2 s the stalls were
/// 50-150 ms and set the p99 of every latency bench. At 5,000 events/s the
/// age decides: 250 ms gave a median p99 of ~21 ms against ~35 ms for
/// 500 ms (six alternating runs each). With transparent huge pages off
/// (as `postbox_alloc::tune` then set), 125 ms beat 250 ms in four of four alternating
/// rounds of `POSTBOX_BENCH_ONLY=latency cargo bench -p postbox-worker
/// --bench worker` (medians of three runs each: p99 13.3/19.6/17.9/16.8 ms
/// against 15.4/23.0/26.1/30.9 ms; 80 ms 15.5/23.3 ms, 500 ms 27.9/53.0 ms),
/// with no consistent change in emit or worker throughput.
pub(crate) const CHECKPOINT_BYTES: u64 = 16 << 20;
/// Time after which the next batch is committed durably by redb.
pub(crate) const CHECKPOINT_AGE: Duration = Duration::from_millis(125);
/// The file grows by this much at a time, written with zeros and synced
/// once, so that appending a record never changes the file's length.
const GROW: u64 = 8 << 20;

const MAGIC: u32 = 0x5042_4c47; // "PBLG"
/// The file's header: magic, format version, the store file's identity,
/// and (from version 2) the epoch: a random number drawn at each open,
/// which every record's checksum covers, so a record an earlier open left
/// in the file never reads as part of this one's log (a new record can end
/// exactly where an old one starts). Logs of version 1 (no epoch) and logs
/// written before the header existed (starting with a record) are still
/// read, once, at the open that replays them.
///
/// Version 3 adds the length the file is allocated to (written with zeros
/// and synced): the grow thread rewrites it after each step is durable, so
/// a file found shorter than its header says was cut, and recovery refuses
/// it rather than lose the records that were there.
const FILE_MAGIC: u32 = 0x5042_4c48; // "PBLH"
const FILE_VERSION: u32 = 3;
const FILE_HEADER: u64 = 32;
const FILE_HEADER_V1: usize = 16;
const FILE_HEADER_V2: usize = 24;
/// Where a version-3 header holds the allocated length.
const ALLOCATED_AT: u64 = 24;
/// How many times its length in checksums the search for records after a
/// region's last may cost (`records_after`).
const SCAN_PASSES: usize = 16;
/// magic, payload length, LSN, CRC-32 of (the epoch, length, LSN, payload).
const HEADER: usize = 4 + 4 + 8 + 4;

/// The path of the commit log of the store file at `store`.
pub(crate) fn path_for(store: &Path) -> PathBuf {
    let mut name = store.as_os_str().to_owned();
    name.push("-log");
    PathBuf::from(name)
}

/// The files of the log at `log` (see [`path_for`]): its two regions.
pub(crate) fn region_paths(log: &Path) -> [PathBuf; 2] {
    let mut second = log.as_os_str().to_owned();
    second.push(".1");
    [log.to_owned(), PathBuf::from(second)]
}

/// The open commit log of a store.
pub(crate) struct Wal {
    /// The log's two files. Records go to one of them from its start; a
    /// checkpoint switches to the other, which is written over only once
    /// the checkpoint before is on disk (so a crash always finds every
    /// record after the store file's LSN, in one region or spread over
    /// both).
    regions: [Region; 2],
    /// The region records go to now.
    current: usize,
    /// Where the next record goes.
    pos: u64,
    /// The end of the record written for the batch being committed.
    pending_end: Option<u64>,
    next_lsn: u64,
    last_checkpoint: Instant,
    /// The record buffer, kept between batches (a fresh one per batch costs
    /// page faults on every commit).
    scratch: Vec<u8>,
    /// The store file's syncs, which run after its durable commits return.
    syncs: Arc<SyncState>,
    /// The sync (counted in `syncs`) of the last checkpoint: until it is
    /// done, the region before it still holds records a crash would need.
    checkpoint_sync: u64,
    /// This open's epoch, which every record's checksum covers.
    epoch: u64,
}

/// One file of the log.
struct Region {
    file: File,
    path: PathBuf,
    /// How far the file is known to be allocated (written with zeros and
    /// synced): records go below it. [`Grower`] moves it on.
    allocated: u64,
    grower: Grower,
}

impl Region {
    /// Opens (or creates) the region at `path` and writes its header.
    fn open(path: &Path, store_id: u64, epoch: u64) -> Result<Region, StoreError> {
        let existed = path.exists();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| log_err(path, e))?;
        if !existed {
            // The new file's name must survive a crash as well as its bytes.
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                File::open(dir)
                    .and_then(|d| d.sync_all())
                    .map_err(|e| log_err(path, e))?;
            }
        }
        // The header claims the length the file has, once that is durable
        // (a grow step a crash cut short may have left it unsynced); a new
        // file is as long as its header.
        file.sync_all().map_err(|e| log_err(path, e))?;
        let had = file.metadata().map_err(|e| log_err(path, e))?.len();
        let claimed = had.max(FILE_HEADER);
        file.write_all_at(&file_header(store_id, epoch, claimed), 0)
            .and_then(|()| file.sync_all())
            .map_err(|e| log_err(path, e))?;
        let allocated = file.metadata().map_err(|e| log_err(path, e))?.len();
        let grower = Grower::start(
            file.try_clone().map_err(|e| log_err(path, e))?,
            path,
            allocated,
        );
        // The first records need room: allocate it while the store starts.
        grower.request(GROW);
        Ok(Region {
            file,
            path: path.to_owned(),
            allocated,
            grower,
        })
    }
}

/// What recovery found and did, for the log line and the tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Recovered {
    /// Records replayed into the store file.
    pub records: u64,
    /// The LSN the store file holds changes through, after recovery.
    pub applied: u64,
    /// What a damaged log lost (file, offsets, LSNs), when recovery was
    /// told to go on without it (`recover_truncated`): empty otherwise.
    pub lost: Vec<String>,
}

/// The LSN whose changes `db` holds (0 when it never had a log).
fn applied_lsn(db: &Database) -> Result<u64, StoreError> {
    Ok(system_value(db, WAL_APPLIED)?.unwrap_or(0))
}

/// The store file's identity, created (durably) the first time.
pub(crate) fn store_id(db: &Database) -> Result<u64, StoreError> {
    if let Some(id) = store_id_if_any(db)? {
        return Ok(id);
    }
    let id = random_u64("the store's identity")?;
    let txn = db.begin_write().map_err(storage_err)?;
    txn.open_table(SYSTEM)
        .map_err(storage_err)?
        .insert(STORE_ID, id)
        .map_err(storage_err)?;
    txn.commit().map_err(storage_err)?;
    Ok(id)
}

/// A random number, for `what`.
fn random_u64(what: &str) -> Result<u64, StoreError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes)
        .map_err(|e| StoreError::Storage(format!("no random bytes for {what}: {e}")))?;
    Ok(u64::from_le_bytes(bytes))
}

/// Whether the store's last close left every record of its log in the
/// file (None: the store never recorded it, as before the flag existed).
fn clean_close(db: &Database) -> Result<Option<bool>, StoreError> {
    Ok(system_value(db, CLEAN_CLOSE)?.map(|v| v != 0))
}

/// Records in `txn` whether the store file holds every record of the log
/// (a clean close) or the log is in use.
pub(crate) fn mark_clean(txn: &redb::WriteTransaction, clean: bool) -> Result<(), StoreError> {
    txn.open_table(SYSTEM)
        .map_err(storage_err)?
        .insert(CLEAN_CLOSE, u64::from(clean))
        .map_err(storage_err)?;
    Ok(())
}

/// Records durably, if the flag says otherwise, that the store file holds
/// every record of the log: a store opened without a log, after its
/// recovery, before the log's files are removed.
pub(crate) fn closed_without_log(db: &Database) -> Result<(), StoreError> {
    if clean_close(db)? == Some(false) {
        let txn = db.begin_write().map_err(storage_err)?;
        mark_clean(&txn, true)?;
        txn.commit().map_err(storage_err)?;
    }
    Ok(())
}

/// The store file's identity, if it has one yet.
fn store_id_if_any(db: &Database) -> Result<Option<u64>, StoreError> {
    system_value(db, STORE_ID)
}

/// The log's header for the store file `store_id`, written at an open
/// whose records carry `epoch`, for a file allocated through `allocated`.
fn file_header(store_id: u64, epoch: u64, allocated: u64) -> [u8; FILE_HEADER as usize] {
    let mut header = [0u8; FILE_HEADER as usize];
    header[0..4].copy_from_slice(&FILE_MAGIC.to_le_bytes());
    header[4..8].copy_from_slice(&FILE_VERSION.to_le_bytes());
    header[8..16].copy_from_slice(&store_id.to_le_bytes());
    header[16..24].copy_from_slice(&epoch.to_le_bytes());
    header[24..32].copy_from_slice(&allocated.to_le_bytes());
    header
}

/// What a log file's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LogHeader {
    store_id: u64,
    /// The epoch its records' checksums cover (none in version 1).
    epoch: Option<u64>,
    /// How long the file was allocated (from version 3): it is never
    /// shorter unless it was cut.
    allocated: Option<u64>,
    /// Where its records start.
    len: usize,
}

/// A log's header, if it has one.
fn header_of(bytes: &[u8]) -> Option<LogHeader> {
    let u32_at = |i: usize| Some(u32::from_le_bytes(bytes.get(i..i + 4)?.try_into().ok()?));
    let u64_at = |i: usize| Some(u64::from_le_bytes(bytes.get(i..i + 8)?.try_into().ok()?));
    if u32_at(0)? != FILE_MAGIC {
        return None;
    }
    match u32_at(4)? {
        1 => Some(LogHeader {
            store_id: u64_at(8)?,
            epoch: None,
            allocated: None,
            len: FILE_HEADER_V1,
        }),
        2 => Some(LogHeader {
            store_id: u64_at(8)?,
            epoch: Some(u64_at(16)?),
            allocated: None,
            len: FILE_HEADER_V2,
        }),
        FILE_VERSION => Some(LogHeader {
            store_id: u64_at(8)?,
            epoch: Some(u64_at(16)?),
            allocated: Some(u64_at(ALLOCATED_AT as usize)?),
            len: FILE_HEADER as usize,
        }),
        _ => None,
    }
}

/// A region's records: after its header, read with its epoch.
#[cfg(test)]
fn region_records(bytes: &[u8]) -> Vec<(u64, &[u8])> {
    match header_of(bytes) {
        Some(h) => read_records(&bytes[h.len..], h.epoch),
        None => read_records(bytes, None),
    }
}

/// Records in `txn` that the file holds every record through `lsn`. Not
/// itself logged: it is what tells recovery where the log takes over.
pub(crate) fn mark_applied(txn: &redb::WriteTransaction, lsn: u64) -> Result<(), StoreError> {
    txn.open_table(SYSTEM)
        .map_err(storage_err)?
        .insert(WAL_APPLIED, lsn)
        .map_err(storage_err)?;
    Ok(())
}

/// Replays the log at `path` (both its regions, if there is one) into
/// `db`, durably. A log whose header names another store file than `db` is
/// refused: its records are changes to that file, not this one (a file
/// restored from a backup next to a newer log, or a log copied from
/// elsewhere).
///
/// So is a log whose damage may have lost records, since the file would
/// open without acknowledged writes: a region shorter than its header says
/// it was allocated (cut), a damaged record with a whole later one of the
/// same open after it, records that do not continue the file's LSN or leave
/// a hole between the regions, and (when the store's last close was not
/// clean) a region that is missing or has lost its header. A torn last
/// record is not damage: a crash leaves one, and it was never answered.
/// With `recover_truncated` the damage is reported ([`Recovered::lost`])
/// and the consecutive records from the file's LSN on are replayed.
pub(crate) fn recover(
    db: &Database,
    path: &Path,
    recover_truncated: bool,
    tables: &logged::LogTables,
) -> Result<Recovered, StoreError> {
    let applied = applied_lsn(db)?;
    // Whether the log may hold records the file lacks: the store kept a
    // log and its last close did not leave everything in the file.
    let closed = clean_close(db)?;
    let unclean = closed == Some(false) && (applied > 0 || store_id_if_any(db)?.is_some());
    let last_close = LastClose {
        clean: closed == Some(true),
        unclean,
    };
    let paths = region_paths(path);
    let files = [read_region(db, &paths[0])?, read_region(db, &paths[1])?];
    let mut lost = Vec::new();
    let mut todo: Vec<Record<'_>> = Vec::new();
    for (region, (p, bytes)) in paths.iter().zip(&files).enumerate() {
        let Some(bytes) = bytes else {
            if unclean {
                lost.push(format!(
                    "{} is missing and the store was not closed cleanly: \
                     every record it held after record {applied} is lost",
                    p.display()
                ));
            }
            continue;
        };
        let scan = scan_region(p, bytes, region, applied, last_close);
        lost.extend(scan.lost);
        todo.extend(scan.records.into_iter().filter(|r| r.lsn > applied));
    }
    // Each region holds one run of consecutive records; the runs after the
    // file's LSN continue each other.
    todo.sort_by_key(|r| r.lsn);
    let run = todo
        .iter()
        .zip(applied + 1..)
        .take_while(|(r, want)| r.lsn == *want)
        .count();
    if let Some(first) = todo.first()
        && run == 0
    {
        lost.push(format!(
            "{} starts at record {} ({} byte {}), but the store file holds changes only through \
             record {applied}: {} lost",
            path.display(),
            first.lsn,
            paths[first.region].display(),
            first.at,
            match first.lsn - applied {
                2 => format!("record {} is", applied + 1),
                _ => format!("records {} through {} are", applied + 1, first.lsn - 1),
            },
        ));
    } else if let Some(next) = todo.get(run) {
        let before = &todo[run - 1];
        lost.push(format!(
            "{} has no record {} between records {} and {} (record {} is in {} at byte {}, \
             record {} in {} at byte {}): the {} records from record {} through {} cannot be \
             replayed",
            path.display(),
            before.lsn + 1,
            before.lsn,
            next.lsn,
            before.lsn,
            paths[before.region].display(),
            before.at,
            next.lsn,
            paths[next.region].display(),
            next.at,
            todo.len() - run,
            next.lsn,
            todo.last().map_or(next.lsn, |r| r.lsn),
        ));
    }
    if !lost.is_empty() && !recover_truncated {
        return Err(corrupt(format!(
            "{}. Nothing was replayed; to open the store with the records before the damage \
             (and lose the rest), open it with recover_truncated \
             (`postbox serve --recover-truncated`)",
            lost.join("; ")
        )));
    }
    todo.truncate(run);
    if todo.is_empty() {
        return Ok(Recovered {
            records: 0,
            applied,
            lost,
        });
    }
    let mut txn = db.begin_write().map_err(storage_err)?;
    txn.set_durability(redb::Durability::Immediate)
        .map_err(storage_err)?;
    let mut last = applied;
    for r in &todo {
        let ops = logged::decode(r.payload)?;
        tables.replay(&txn, &ops)?;
        last = r.lsn;
    }
    mark_applied(&txn, last)?;
    txn.commit().map_err(storage_err)?;
    Ok(Recovered {
        records: todo.len() as u64,
        applied: last,
        lost,
    })
}

/// A whole record recovery found.
struct Record<'a> {
    lsn: u64,
    payload: &'a [u8],
    /// The region it is in, and its offset there.
    region: usize,
    at: usize,
}

/// What recovery read in one region.
struct Scan<'a> {
    /// Its run of consecutive records.
    records: Vec<Record<'a>>,
    /// What its damage lost, if it is damaged.
    lost: Vec<String>,
}

/// What the store file says of its last close.
#[derive(Debug, Clone, Copy)]
struct LastClose {
    /// It was clean: the file holds every record the log has, and no
    /// damage to the log can lose anything.
    clean: bool,
    /// It was not (the store kept a log and has not closed it since): a
    /// region may hold the only copy of acknowledged writes. Neither, for
    /// a store from before the flag existed.
    unclean: bool,
}

/// Reads region number `region` (the bytes of the file at `path`): its run
/// of records, and the damage that may have lost others (see [`recover`]).
/// `applied` is the file's LSN.
fn scan_region<'a>(
    path: &Path,
    bytes: &'a [u8],
    region: usize,
    applied: u64,
    last_close: LastClose,
) -> Scan<'a> {
    let unclean = last_close.unclean;
    let mut lost = Vec::new();
    let header = header_of(bytes);
    if header.is_none() && !bytes.starts_with(&MAGIC.to_le_bytes()) && unclean {
        // Neither a header nor a log older than headers: cut to (or
        // within) its header, or written over.
        lost.push(format!(
            "{} has no log header ({} bytes) and the store was not closed cleanly: \
             every record it held after record {applied} is lost",
            path.display(),
            bytes.len()
        ));
        return Scan {
            records: Vec::new(),
            lost,
        };
    }
    let start = header.map_or(0, |h| h.len);
    let epoch = header.and_then(|h| h.epoch);
    let mut records = Vec::new();
    let mut at = start;
    for (lsn, payload) in read_records(&bytes[start..], epoch) {
        records.push(Record {
            lsn,
            payload,
            region,
            at,
        });
        at += HEADER + payload.len();
    }
    let end = at;
    let last = records.last().map(|r| r.lsn);
    let read = match last {
        Some(lsn) => format!("its records end with record {lsn} at byte {end}"),
        None => format!("it holds no whole record after its header (byte {end})"),
    };
    // After a clean close, a cut loses nothing: the file holds it all.
    if let Some(allocated) = header.and_then(|h| h.allocated)
        && (bytes.len() as u64) < allocated
        && !last_close.clean
    {
        lost.push(format!(
            "{} was cut: it is {} bytes long but was allocated {allocated}; {read}, and every \
             record after byte {end} is lost",
            path.display(),
            bytes.len(),
        ));
    }
    // Beyond a torn last record there is nothing of this open's with a
    // higher number: records an earlier round of this open left further on
    // have lower ones, and records of earlier opens fail the checksum. So
    // one there means the record at `end` was damaged after it was written.
    if let Some(epoch) = epoch {
        let (after, complete) = records_after(bytes, end, epoch, last.unwrap_or(0).max(applied));
        if !complete {
            tracing::warn!(
                file = %path.display(),
                from = end,
                "the commit log's check for damage before its last record stopped early: \
                 too many record-like bytes to check"
            );
        }
        if let (Some(&(at, first)), Some(&(_, high))) = (after.first(), after.last()) {
            let damaged = match last {
                Some(lsn) => format!("record {}", lsn + 1),
                None => "the first record".to_owned(),
            };
            lost.push(format!(
                "{}: {damaged} (byte {end}) is damaged, but whole records follow it \
                 (record {first} at byte {at}, {} in all, up to record {high}); {read}, and \
                 every record after it is lost",
                path.display(),
                after.len(),
            ));
        }
    }
    Scan { records, lost }
}

/// The whole records of `epoch` numbered above `above` from byte `from`
/// of `bytes` on, as (offset, LSN), however they are placed; and whether
/// the search got to the end. Its checksums may cover at most
/// [`SCAN_PASSES`] times the region's bytes: the records of an earlier
/// round beyond the current ones hold items' bytes, which may look like
/// record headers anywhere (their checksums fail, since they cannot cover
/// the epoch drawn at the open, but each costs a pass over its length).
fn records_after(bytes: &[u8], from: usize, epoch: u64, above: u64) -> (Vec<(usize, u64)>, bool) {
    let magic = MAGIC.to_le_bytes();
    let mut budget = bytes.len().saturating_mul(SCAN_PASSES);
    let mut found = Vec::new();
    let mut at = from;
    while at + HEADER <= bytes.len() {
        // Most of a region past its records is zeros: find the next byte
        // that can start a record.
        let Some(skip) = bytes[at..].iter().position(|b| *b == magic[0]) else {
            break;
        };
        at += skip;
        let rest = &bytes[at..];
        let word = |i: usize| {
            rest.get(i..i + 4)
                .map(|w| u32::from_le_bytes(w.try_into().expect("4 bytes")))
        };
        let lsn = rest
            .get(8..16)
            .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")));
        let len = word(4).map_or(usize::MAX, |l| l as usize);
        // The cheap tests first: the magic, a number above `above`, a
        // length that fits.
        if word(0) == Some(MAGIC)
            && lsn.is_some_and(|lsn| lsn > above)
            && len <= rest.len() - HEADER
        {
            if len > budget {
                return (found, false);
            }
            budget -= len;
            if let Some((lsn, payload)) = whole_record(rest, Some(epoch)) {
                found.push((at, lsn));
                at += HEADER + payload.len();
                continue;
            }
        }
        at += 1;
    }
    (found, true)
}

/// The bytes of one region of the log (None if the file does not exist),
/// after checking that its header, if it has one, names `db`'s file.
fn read_region(db: &Database, path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(mut f) => {
            f.read_to_end(&mut bytes).map_err(|e| log_err(path, e))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(log_err(path, e)),
    }
    if let Some(LogHeader {
        store_id: log_id, ..
    }) = header_of(&bytes)
    {
        let this = store_id_if_any(db)?;
        if this != Some(log_id) {
            return Err(corrupt(format!(
                "{} belongs to another store file (log of store {log_id:016x}, this file is {}); \
                 if this file was restored on purpose, move the log away",
                path.display(),
                this.map_or("a store that never had a log".to_owned(), |id| format!(
                    "store {id:016x}"
                )),
            )));
        }
    }
    Ok(Some(bytes))
}

/// The log's records, from its start, while each is whole (its checksum
/// covering `epoch`, if its file has one) and numbered one more than the
/// one before.
fn read_records(mut bytes: &[u8], epoch: Option<u64>) -> Vec<(u64, &[u8])> {
    let mut out: Vec<(u64, &[u8])> = Vec::new();
    while let Some((lsn, payload)) = whole_record(bytes, epoch) {
        if out.last().is_some_and(|(prev, _)| lsn != prev + 1) {
            break;
        }
        out.push((lsn, payload));
        bytes = &bytes[HEADER + payload.len()..];
    }
    out
}

/// The record at the start of `bytes` (its LSN and payload), if it is
/// whole: its magic, a length that fits, and a checksum covering `epoch`.
fn whole_record(bytes: &[u8], epoch: Option<u64>) -> Option<(u64, &[u8])> {
    let header = bytes.get(..HEADER)?;
    let word = |i: usize| u32::from_le_bytes(header[i..i + 4].try_into().expect("4 bytes"));
    let (magic, len, crc) = (word(0), word(4) as usize, word(16));
    if magic != MAGIC {
        return None;
    }
    let lsn = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
    let payload = bytes.get(HEADER..HEADER.checked_add(len)?)?;
    (checksum(epoch, &header[4..16], payload) == crc).then_some((lsn, payload))
}

fn checksum(epoch: Option<u64>, len_and_lsn: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    if let Some(epoch) = epoch {
        h.update(&epoch.to_le_bytes());
    }
    h.update(len_and_lsn);
    h.update(payload);
    h.finalize()
}

/// Syncs a region of the log (`fdatasync`: its length does not change), at
/// the fault point [`crate::faults::LOG_SYNC`].
pub(crate) fn sync_log(file: &File) -> std::io::Result<()> {
    crate::faults::io_fault(crate::faults::LOG_SYNC)?;
    file.sync_data()
}

fn log_err(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Storage(format!("commit log {}: {e}", path.display()))
}

/// The thread that extends the log file ahead of the writer. It writes
/// zeros and syncs them (data and length), so that a record later written
/// there is made durable by an `fdatasync` that changes no metadata; doing
/// it here keeps those writes and syncs (tens of milliseconds per step on a
/// slow disk) off the writer's path. It writes only at and beyond the
/// length it has published, and the writer writes only below it, after the
/// header; then it records the new length in the header's last field
/// ([`claim`]), which nothing else writes while it runs.
struct Grower {
    state: Arc<(Mutex<GrowState>, Condvar)>,
    tx: Option<mpsc::Sender<u64>>,
    thread: Option<JoinHandle<()>>,
}

struct GrowState {
    /// Written and synced through here.
    ready: u64,
    /// The largest length asked for.
    requested: u64,
    failed: Option<String>,
}

impl Grower {
    fn start(file: File, path: &Path, allocated: u64) -> Grower {
        let state = Arc::new((
            Mutex::new(GrowState {
                ready: allocated,
                requested: allocated,
                failed: None,
            }),
            Condvar::new(),
        ));
        let (tx, rx) = mpsc::channel::<u64>();
        let shared = state.clone();
        let path = path.to_owned();
        let thread = std::thread::Builder::new()
            .name("postbox-log-grow".to_owned())
            .spawn(move || {
                let mut len = allocated;
                while let Ok(target) = rx.recv() {
                    let result = extend(&file, len, target).and_then(|()| claim(&file, target));
                    let (lock, changed) = &*shared;
                    let mut st = lock.lock().expect("grower state");
                    match result {
                        Ok(()) => {
                            len = target;
                            st.ready = target;
                        }
                        Err(e) => st.failed = Some(log_err(&path, e).to_string()),
                    }
                    changed.notify_all();
                    if st.failed.is_some() {
                        return;
                    }
                }
            })
            .expect("spawn the commit log's grow thread");
        Grower {
            state,
            tx: Some(tx),
            thread: Some(thread),
        }
    }

    /// Asks for the file to reach at least `end` (rounded up to a whole
    /// step), unless that was asked already.
    fn request(&self, end: u64) {
        let target = end.div_ceil(GROW) * GROW;
        let mut st = self.state.0.lock().expect("grower state");
        if target > st.requested && st.failed.is_none() {
            st.requested = target;
            if let Some(tx) = &self.tx {
                // A stopped thread has recorded why; `wait_for` reports it.
                let _ = tx.send(target);
            }
        }
    }

    /// What is allocated now.
    fn ready(&self) -> u64 {
        self.state.0.lock().expect("grower state").ready
    }

    /// Waits until the file is allocated through `end` (which must have
    /// been requested) and returns how far it is.
    fn wait_for(&self, end: u64) -> Result<u64, StoreError> {
        let (lock, changed) = &*self.state;
        let mut st = lock.lock().expect("grower state");
        loop {
            if st.ready >= end {
                return Ok(st.ready);
            }
            if let Some(e) = &st.failed {
                return Err(StoreError::Storage(e.clone()));
            }
            st = changed.wait(st).expect("grower state");
        }
    }
}

impl Drop for Grower {
    /// Stops the thread before the file can be opened again: its writes
    /// must never land under a later writer's records.
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Records in the header of `file` that it is allocated through `len`, once
/// its zeros and length are durable ([`extend`]): claimed before, a crash
/// between the two would read as a cut file. One 8-byte write and sync per
/// grow step.
fn claim(file: &File, len: u64) -> std::io::Result<()> {
    file.write_all_at(&len.to_le_bytes(), ALLOCATED_AT)?;
    file.sync_data()
}

/// Writes zeros over `[from, to)` of `file` and makes them and the new
/// length durable, a chunk at a time so that a concurrent `fdatasync` of the
/// log never has more than one chunk of them to flush.
fn extend(file: &File, from: u64, to: u64) -> std::io::Result<()> {
    const CHUNK: u64 = 1 << 20;
    let zeros = vec![0u8; CHUNK as usize];
    let mut at = from;
    while at < to {
        let n = CHUNK.min(to - at);
        file.write_all_at(&zeros[..n as usize], at)?;
        file.sync_data()?;
        at += n;
    }
    file.sync_all()
}

impl Wal {
    /// Opens the log at `path` for writing, after [`recover`] made the store
    /// file hold every record in it: writing starts again at the beginning
    /// of its first region, after a header naming the store file
    /// `store_id`. `syncs` follows the store file's syncs; the ones asked
    /// for so far (recovery's commit, the identity's) are waited for first.
    pub(crate) fn open(
        path: &Path,
        recovered: &Recovered,
        store_id: u64,
        syncs: Arc<SyncState>,
    ) -> Result<Wal, StoreError> {
        syncs.wait_all().map_err(StoreError::Storage)?;
        let epoch = random_u64("the commit log's epoch")?;
        let [first, second] = region_paths(path);
        Ok(Wal {
            regions: [
                Region::open(&first, store_id, epoch)?,
                Region::open(&second, store_id, epoch)?,
            ],
            epoch,
            current: 0,
            pos: FILE_HEADER,
            pending_end: None,
            next_lsn: recovered.applied + 1,
            last_checkpoint: Instant::now(),
            scratch: Vec::new(),
            syncs,
            checkpoint_sync: 0,
        })
    }

    /// Records durably in `db` that the log is in use (its last close not
    /// clean) before any record is written, unless the flag says so
    /// already: from now until a clean close, a region found missing at
    /// open may have held records the file lacks. The regions exist by
    /// now, so a crash before this leaves no false alarm.
    pub(crate) fn in_use(&self, db: &Database) -> Result<(), StoreError> {
        if clean_close(db)? != Some(false) {
            let txn = db.begin_write().map_err(storage_err)?;
            mark_clean(&txn, false)?;
            txn.commit().map_err(storage_err)?;
            self.syncs.wait_all().map_err(StoreError::Storage)?;
        }
        Ok(())
    }

    /// The LSN the next batch gets.
    pub(crate) fn next_lsn(&self) -> u64 {
        self.next_lsn
    }

    /// Whether the next batch should be committed durably by redb.
    /// It is once the log has [`CHECKPOINT_BYTES`] or is [`CHECKPOINT_AGE`]
    /// old, and the last checkpoint is on disk (the next one switches to
    /// the region it made free).
    pub(crate) fn checkpoint_due(&self) -> bool {
        (self.pos >= CHECKPOINT_BYTES || self.last_checkpoint.elapsed() >= CHECKPOINT_AGE)
            && self.syncs.synced() >= self.checkpoint_sync
    }

    /// Why the store file's last sync failed, if it did: the store must stop,
    /// since no checkpoint can complete.
    pub(crate) fn sync_failure(&self) -> Option<String> {
        self.syncs.failure()
    }

    /// The region the next record goes to.
    pub(crate) fn region(&self) -> usize {
        self.current
    }

    /// A buffer for the next record: room for its header, then the
    /// batch's changes are appended to it (see `OpLog::appending_to`).
    pub(crate) fn record_buffer(&mut self) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        buf.resize(HEADER, 0);
        buf
    }

    /// Takes back a record buffer that was not appended.
    pub(crate) fn recycle(&mut self, buf: Vec<u8>) {
        if buf.capacity() > self.scratch.capacity() {
            self.scratch = buf;
        }
    }

    /// Writes the next batch's record (a [`Wal::record_buffer`] holding
    /// its changes) after the last one, numbered [`Wal::next_lsn`]. It is
    /// not synced here (the syncer thread does that), and it counts only
    /// once its transaction committed ([`Wal::appended`]).
    pub(crate) fn append(&mut self, mut record: Vec<u8>) -> Result<(), StoreError> {
        let lsn = self.next_lsn;
        let len = u32::try_from(record.len() - HEADER)
            .map_err(|_| StoreError::Storage("a batch's changes exceed 4 GiB".to_owned()))?;
        record[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        record[4..8].copy_from_slice(&len.to_le_bytes());
        record[8..16].copy_from_slice(&lsn.to_le_bytes());
        let crc = checksum(Some(self.epoch), &record[4..16], &record[HEADER..]);
        record[16..20].copy_from_slice(&crc.to_le_bytes());
        let end = self.pos + record.len() as u64;
        let region = &mut self.regions[self.current];
        if end + GROW / 2 > region.allocated {
            // Less than half a step left: have the next step allocated in
            // the background, and wait only if this record needs it now.
            region.grower.request(end + GROW / 2);
            region.allocated = if end > region.allocated {
                region.grower.wait_for(end)?
            } else {
                region.grower.ready()
            };
        }
        let written = crate::faults::io_fault(crate::faults::LOG_APPEND)
            .and_then(|()| region.file.write_all_at(&record, self.pos));
        self.scratch = record;
        written.map_err(|e| log_err(&region.path, e))?;
        self.pending_end = Some(end);
        Ok(())
    }

    /// The transaction of the record just appended committed: the next
    /// record follows it.
    pub(crate) fn appended(&mut self) {
        if let Some(end) = self.pending_end.take() {
            self.pos = end;
            self.next_lsn += 1;
        }
    }

    /// Second handles on the regions' files, for the thread that syncs them.
    pub(crate) fn sync_handles(&self) -> Result<[File; 2], StoreError> {
        let handle = |r: &Region| r.file.try_clone().map_err(|e| log_err(&r.path, e));
        Ok([handle(&self.regions[0])?, handle(&self.regions[1])?])
    }

    /// Takes back the record just appended (if one was), whose transaction
    /// then failed to commit: its header is overwritten with zeros, so
    /// recovery ends the log before it.
    pub(crate) fn retract(&mut self) -> Result<(), StoreError> {
        if self.pending_end.take().is_none() {
            return Ok(());
        }
        let region = &self.regions[self.current];
        region
            .file
            .write_all_at(&[0u8; HEADER], self.pos)
            .and_then(|()| region.file.sync_data())
            .map_err(|e| log_err(&region.path, e))
    }

    /// Syncs the region records go to now, on the caller's thread. A
    /// checkpoint does this before its commit, with its own record
    /// appended: the records after it go to the other region, and none of
    /// them may reach the disk before every record of this one (the sync
    /// thread syncs a group's regions one after the other, and the kernel
    /// writes pages back in any order), or a crash could leave a hole
    /// between the regions. The store file is not being synced then (the
    /// last checkpoint's sync is done), so this sync is a short one.
    pub(crate) fn seal(&self) -> Result<(), StoreError> {
        let region = &self.regions[self.current];
        sync_log(&region.file).map_err(|e| log_err(&region.path, e))
    }

    /// The batch whose record was just appended was committed durably by
    /// redb (its LSN marked applied): once that commit's sync is done, every
    /// record so far is in the store file. Records go to the other region
    /// from now on; the next checkpoint waits for this one's sync, since the
    /// records in this region are needed until then.
    pub(crate) fn checkpointed(&mut self) {
        self.checkpoint_sync = self.syncs.requested();
        self.current ^= 1;
        self.pos = FILE_HEADER;
        self.last_checkpoint = Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedded::logged::LogTables;
    use redb::ReadableDatabase;

    /// [`super::recover`] with the store's own tables only.
    fn recover(db: &Database, path: &Path, truncated: bool) -> Result<Recovered, StoreError> {
        super::recover(db, path, truncated, &LogTables::default())
    }

    /// A record of a log without an epoch (headerless or version 1).
    fn record(lsn: u64, payload: &[u8]) -> Vec<u8> {
        record_in(None, lsn, payload)
    }

    fn record_in(epoch: Option<u64>, lsn: u64, payload: &[u8]) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&MAGIC.to_le_bytes());
        r.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        r.extend_from_slice(&lsn.to_le_bytes());
        let crc = checksum(epoch, &r[4..16], payload);
        r.extend_from_slice(&crc.to_le_bytes());
        r.extend_from_slice(payload);
        r
    }

    /// A log record putting `key` -> 1 in the store's `system` table.
    fn put_record(lsn: u64, key: &str) -> Vec<u8> {
        put_record_in(None, lsn, key)
    }

    fn put_record_in(epoch: Option<u64>, lsn: u64, key: &str) -> Vec<u8> {
        // The encoding of `OpLog`: PUT, table code 2 (`system`), key, value.
        let mut payload = vec![1u8, 2];
        payload.extend_from_slice(&(key.len() as u32).to_le_bytes());
        payload.extend_from_slice(key.as_bytes());
        payload.extend_from_slice(&8u32.to_le_bytes());
        payload.extend_from_slice(&1u64.to_le_bytes());
        record_in(epoch, lsn, &payload)
    }

    fn system_keys(db: &Database) -> Vec<String> {
        let txn = db.begin_read().unwrap();
        let table = txn.open_table(SYSTEM).unwrap();
        redb::ReadableTable::iter(&table)
            .unwrap()
            .map(|r| r.unwrap().0.value().to_owned())
            .collect()
    }

    #[test]
    fn recovery_replays_the_records_after_the_files_lsn_and_refuses_a_gap() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path().join("s.redb")).unwrap();
        let log = dir.path().join("s.redb-log");
        // Records 1-3, then one of an earlier round.
        let bytes = [
            put_record(1, "a"),
            put_record(2, "b"),
            put_record(3, "c"),
            put_record(1, "old"),
        ]
        .concat();
        std::fs::write(&log, &bytes).unwrap();
        let r = recover(&db, &log, false).unwrap();
        assert_eq!(
            r,
            Recovered {
                records: 3,
                applied: 3,
                lost: Vec::new()
            }
        );
        assert_eq!(system_keys(&db), ["a", "b", "c", WAL_APPLIED]);
        // Again: nothing left to do.
        assert_eq!(
            recover(&db, &log, false).unwrap(),
            Recovered {
                records: 0,
                applied: 3,
                lost: Vec::new()
            }
        );
        // A log that starts after record 4 cannot bring the file up to date.
        std::fs::write(&log, [put_record(5, "e"), put_record(6, "f")].concat()).unwrap();
        let e = recover(&db, &log, false).unwrap_err().to_string();
        assert!(
            e.contains("starts at record 5")
                && e.contains(&format!("({} byte 0)", log.display()))
                && e.contains("only through record 3")
                && e.contains("record 4 is lost"),
            "{e}"
        );
        assert_eq!(system_keys(&db), ["a", "b", "c", WAL_APPLIED]);
    }

    #[test]
    fn recovery_reads_both_regions_in_order_and_refuses_a_hole_between_them() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path().join("s.redb")).unwrap();
        let log = dir.path().join("s.redb-log");
        let [first, second] = region_paths(&log);
        // Records 1-3 in the second region, then a checkpoint whose sync
        // did not finish (the file holds nothing), then 4-5 in the first,
        // written over a record of an earlier round.
        std::fs::write(
            &second,
            [put_record(1, "a"), put_record(2, "b"), put_record(3, "c")].concat(),
        )
        .unwrap();
        std::fs::write(
            &first,
            [put_record(4, "d"), put_record(5, "e"), put_record(1, "old")].concat(),
        )
        .unwrap();
        assert_eq!(
            recover(&db, &log, false).unwrap(),
            Recovered {
                records: 5,
                applied: 5,
                lost: Vec::new()
            }
        );
        assert_eq!(system_keys(&db), ["a", "b", "c", "d", "e", WAL_APPLIED]);

        // A record missing between the regions: nothing is replayed.
        let db = Database::create(dir.path().join("t.redb")).unwrap();
        let log = dir.path().join("t.redb-log");
        let [first, second] = region_paths(&log);
        std::fs::write(&second, [put_record(1, "a"), put_record(2, "b")].concat()).unwrap();
        std::fs::write(&first, put_record(4, "d")).unwrap();
        let e = recover(&db, &log, false).unwrap_err().to_string();
        assert!(e.contains("has no record 3 between records 2 and 4"), "{e}");
        // Naming where the records on either side of the hole are.
        assert!(
            e.contains(&format!("record 2 is in {} at byte 39", second.display()))
                && e.contains(&format!("record 4 in {} at byte 0", first.display())),
            "{e}"
        );
        assert!(
            system_value(&db, WAL_APPLIED).unwrap().is_none(),
            "nothing replayed"
        );
    }

    #[test]
    fn a_record_an_earlier_open_left_behind_is_not_read_as_part_of_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let db = Database::create(&path).unwrap();
        let id = store_id(&db).unwrap();
        let log = dir.path().join("s.redb-log");
        // This open (epoch 2) wrote record 1; an earlier one (epoch 1) left
        // a whole record 2 right after where the new record 1 ends.
        std::fs::write(
            &log,
            [
                file_header(id, 2, 0).to_vec(),
                put_record_in(Some(2), 1, "a"),
                put_record_in(Some(1), 2, "stale"),
            ]
            .concat(),
        )
        .unwrap();
        assert_eq!(recover(&db, &log, false).unwrap().records, 1);
        assert_eq!(system_keys(&db), ["a", STORE_ID, WAL_APPLIED]);

        // A log of version 1 (no epoch) is still read.
        let db = Database::create(dir.path().join("t.redb")).unwrap();
        let id = store_id(&db).unwrap();
        let log = dir.path().join("t.redb-log");
        let mut v1 = file_header(id, 0, 0)[..FILE_HEADER_V1].to_vec();
        v1[4..8].copy_from_slice(&1u32.to_le_bytes());
        std::fs::write(&log, [v1, put_record(1, "a"), put_record(2, "b")].concat()).unwrap();
        assert_eq!(recover(&db, &log, false).unwrap().records, 2);
    }

    #[test]
    fn reads_whole_consecutive_records_and_stops_at_the_first_that_is_not() {
        let mut log = [record(7, b"a"), record(8, b"bb"), record(9, b"")].concat();
        let whole = log.clone();
        assert_eq!(
            read_records(&whole, None),
            vec![(7, &b"a"[..]), (8, &b"bb"[..]), (9, &b""[..])]
        );
        // A torn last record.
        log.extend_from_slice(&record(10, b"cc")[..HEADER + 1]);
        assert_eq!(read_records(&log, None).len(), 3);
        // A flipped payload byte ends the log there.
        let mut flipped = whole.clone();
        flipped[HEADER] ^= 1;
        assert!(read_records(&flipped, None).is_empty());
        // A record of an earlier round after the current ones.
        let stale = [record(7, b"a"), record(8, b"b"), record(3, b"old")].concat();
        assert_eq!(read_records(&stale, None).len(), 2);
        // Zeros (the preallocated tail) are not a record.
        let zeros = [record(1, b"x"), vec![0; 64]].concat();
        assert_eq!(read_records(&zeros, None).len(), 1);
    }

    #[test]
    fn records_land_in_space_allocated_ahead_of_them_across_growth_steps() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb-log");
        let mut wal = Wal::open(&path, &Recovered::default(), 7, Arc::default()).unwrap();
        // 2.5 growth steps of records, each one a different byte.
        let n = (GROW * 5 / 2 / 65_536) as usize;
        for i in 0..n {
            let mut rec = wal.record_buffer();
            rec.extend(std::iter::repeat_n(i as u8, 65_536 - HEADER));
            wal.append(rec).unwrap();
            wal.appended();
        }
        let end = wal.pos;
        drop(wal);
        let bytes = std::fs::read(&path).unwrap();
        // The file is allocated in whole steps ahead of the last record.
        assert_eq!(bytes.len() as u64 % GROW, 0);
        assert!(
            bytes.len() as u64 >= end + GROW / 2,
            "{} {end}",
            bytes.len()
        );
        assert_eq!(header_of(&bytes).map(|h| h.store_id), Some(7));
        // Its header says how far: the grow thread claimed each step.
        assert_eq!(
            header_of(&bytes).and_then(|h| h.allocated),
            Some(bytes.len() as u64)
        );
        let records = region_records(&bytes);
        assert_eq!(records.len(), n);
        for (i, (lsn, payload)) in records.iter().enumerate() {
            assert_eq!(*lsn, i as u64 + 1);
            assert!(payload.iter().all(|b| *b == i as u8), "record {lsn}");
        }
    }

    #[test]
    fn a_checkpoint_switches_regions_and_the_next_waits_for_its_sync() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb-log");
        let syncs = Arc::new(SyncState::default());
        let mut wal = Wal::open(&path, &Recovered::default(), 7, syncs.clone()).unwrap();
        let append = |wal: &mut Wal| {
            let mut rec = wal.record_buffer();
            rec.extend_from_slice(b"changes");
            wal.append(rec).unwrap();
            wal.appended();
        };
        append(&mut wal);
        assert!(!wal.checkpoint_due(), "young and small");
        std::thread::sleep(CHECKPOINT_AGE);
        assert!(wal.checkpoint_due());
        // The checkpoint's record, then its durable commit asks for a sync.
        append(&mut wal);
        syncs.ask();
        wal.checkpointed();
        assert_eq!(wal.region(), 1);
        append(&mut wal);
        std::thread::sleep(CHECKPOINT_AGE);
        assert!(
            !wal.checkpoint_due(),
            "the first region holds records a crash needs until the sync is done"
        );
        syncs.finish();
        assert!(wal.checkpoint_due());
        drop(wal);
        let [first, second] = region_paths(&path).map(|p| std::fs::read(p).unwrap());
        let lsns = |bytes: &[u8]| -> Vec<u64> {
            assert_eq!(header_of(bytes).map(|h| h.store_id), Some(7));
            region_records(bytes).iter().map(|(lsn, _)| *lsn).collect()
        };
        assert_eq!((lsns(&first), lsns(&second)), (vec![1, 2], vec![3]));
    }

    #[test]
    fn a_failed_growth_is_reported_to_whoever_waits_for_the_room() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb-log");
        std::fs::write(&path, b"").unwrap();
        // A read-only handle: the grow thread's writes fail.
        let file = File::open(&path).unwrap();
        let grower = Grower::start(file, &path, 0);
        grower.request(1);
        let e = grower.wait_for(1).unwrap_err().to_string();
        assert!(e.contains("commit log") && e.contains("s.redb-log"), "{e}");
        // Later requests are not sent to a stopped thread; the error stays.
        grower.request(GROW * 4);
        assert!(grower.wait_for(GROW * 3).is_err());
    }

    #[test]
    fn a_log_of_another_store_file_is_refused_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mine = Database::create(dir.path().join("mine.redb")).unwrap();
        let other = Database::create(dir.path().join("other.redb")).unwrap();
        let (mine_id, other_id) = (store_id(&mine).unwrap(), store_id(&other).unwrap());
        assert_ne!(mine_id, other_id);
        assert_eq!(store_id(&mine).unwrap(), mine_id, "created once");
        let log = dir.path().join("other.redb-log");
        // The other store's log: its header, then record 1.
        std::fs::write(
            &log,
            [
                file_header(other_id, 9, 0).to_vec(),
                put_record_in(Some(9), 1, "a"),
            ]
            .concat(),
        )
        .unwrap();
        let e = recover(&mine, &log, false).unwrap_err().to_string();
        assert!(
            e.contains("belongs to another store file")
                && e.contains(&format!("{other_id:016x}"))
                && e.contains(&format!("{mine_id:016x}")),
            "{e}"
        );
        assert_eq!(system_keys(&mine), [STORE_ID], "nothing replayed");
        // A file that never had a log refuses it too.
        let fresh = Database::create(dir.path().join("fresh.redb")).unwrap();
        let e = recover(&fresh, &log, false).unwrap_err().to_string();
        assert!(e.contains("a store that never had a log"), "{e}");
        // Its own store replays it.
        assert_eq!(recover(&other, &log, false).unwrap().records, 1);
        assert_eq!(system_keys(&other), ["a", STORE_ID, WAL_APPLIED]);
    }

    /// The payload of a record putting `key` -> 1 in the `system` table.
    fn put_payload(key: &str) -> Vec<u8> {
        put_record(0, key)[HEADER..].to_vec()
    }

    /// A store file with an identity and its log, holding records 1..=n
    /// (putting `r1`, `r2`, ...) written by [`Wal`] into its first region
    /// (allocated one grow step ahead), none of them in the file yet; and
    /// where each record starts.
    fn logged(dir: &Path, n: u64) -> (Database, PathBuf, Vec<u64>) {
        let db = Database::create(dir.join("s.redb")).unwrap();
        let id = store_id(&db).unwrap();
        let log = dir.join("s.redb-log");
        let mut wal = Wal::open(&log, &Recovered::default(), id, Arc::default()).unwrap();
        let mut starts = Vec::new();
        for i in 1..=n {
            starts.push(wal.pos);
            let mut rec = wal.record_buffer();
            rec.extend_from_slice(&put_payload(&format!("r{i}")));
            wal.append(rec).unwrap();
            wal.appended();
        }
        starts.push(wal.pos);
        drop(wal);
        (db, log, starts)
    }

    fn applied(db: &Database) -> Option<u64> {
        system_value(db, WAL_APPLIED).unwrap()
    }

    #[test]
    fn a_region_cut_short_is_refused_naming_the_file_and_the_position() {
        let dir = tempfile::tempdir().unwrap();
        let (db, log, starts) = logged(dir.path(), 3);
        assert_eq!(std::fs::metadata(&log).unwrap().len(), GROW);
        // Cut inside the last record's data, as a lost write-back of the
        // file's end would: the file was allocated further.
        let cut = starts[3] - 5;
        File::options()
            .write(true)
            .open(&log)
            .unwrap()
            .set_len(cut)
            .unwrap();
        let e = recover(&db, &log, false).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{} was cut", log.display()))
                && e.contains(&format!("{cut} bytes long but was allocated {GROW}"))
                && e.contains(&format!("record 2 at byte {}", starts[2])),
            "{e}"
        );
        assert_eq!(applied(&db), None, "nothing replayed");
        assert_eq!(
            std::fs::metadata(&log).unwrap().len(),
            cut,
            "the log as it was"
        );

        // Cut back to its header: every record is gone.
        File::options()
            .write(true)
            .open(&log)
            .unwrap()
            .set_len(FILE_HEADER)
            .unwrap();
        let e = recover(&db, &log, false).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{} was cut", log.display()))
                && e.contains("it is 32 bytes long")
                && e.contains("no whole record after its header"),
            "{e}"
        );

        // Told to go on, recovery replays what is left and says what was lost.
        let (db, log, starts) = logged(&dir.path().join("again").tap_mkdir(), 3);
        File::options()
            .write(true)
            .open(&log)
            .unwrap()
            .set_len(starts[3] - 5)
            .unwrap();
        let r = recover(&db, &log, true).unwrap();
        assert_eq!((r.records, r.applied), (2, 2));
        assert_eq!(r.lost.len(), 1, "{:?}", r.lost);
        assert!(
            r.lost[0].contains(&log.display().to_string()) && r.lost[0].contains("was cut"),
            "{:?}",
            r.lost
        );
        assert_eq!(system_keys(&db), ["r1", "r2", STORE_ID, WAL_APPLIED]);
    }

    #[test]
    fn a_damaged_record_before_the_last_is_refused_naming_the_file_and_the_position() {
        let dir = tempfile::tempdir().unwrap();
        let (db, log, starts) = logged(dir.path(), 4);
        // One flipped byte in record 2's payload.
        let mut bytes = std::fs::read(&log).unwrap();
        bytes[starts[1] as usize + HEADER + 2] ^= 0x10;
        std::fs::write(&log, &bytes).unwrap();
        let e = recover(&db, &log, false).unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "{}: record 2 (byte {}) is damaged, but whole records follow it (record 3 at \
                 byte {}, 2 in all, up to record 4)",
                log.display(),
                starts[1],
                starts[2]
            )),
            "{e}"
        );
        assert_eq!(applied(&db), None, "nothing replayed");
        assert_eq!(std::fs::read(&log).unwrap(), bytes, "the log as it was");

        let r = recover(&db, &log, true).unwrap();
        assert_eq!((r.records, r.applied), (1, 1));
        assert!(
            r.lost.len() == 1 && r.lost[0].contains("record 2 (byte"),
            "{:?}",
            r.lost
        );
        assert_eq!(system_keys(&db), ["r1", STORE_ID, WAL_APPLIED]);
    }

    #[test]
    fn a_torn_last_record_after_a_crash_is_recovered_silently() {
        let dir = tempfile::tempdir().unwrap();
        let (db, log, starts) = logged(dir.path(), 3);
        // The last record's write was torn: its second half never reached
        // the disk (the preallocated zeros are still there).
        let mut bytes = std::fs::read(&log).unwrap();
        let half = (starts[2] + starts[3]) as usize / 2;
        bytes[half..starts[3] as usize].fill(0);
        std::fs::write(&log, &bytes).unwrap();
        assert_eq!(
            recover(&db, &log, false).unwrap(),
            Recovered {
                records: 2,
                applied: 2,
                lost: Vec::new()
            }
        );

        // Records of an earlier round of the same open, beyond a torn
        // record, are all in the file already: not a sign of damage, even
        // when the torn record is the round's first (no record read to
        // compare with, only the file's LSN).
        let db = Database::create(dir.path().join("t.redb")).unwrap();
        let id = store_id(&db).unwrap();
        let log = dir.path().join("t.redb-log");
        let round = |records: Vec<Vec<u8>>| {
            let mut b = file_header(id, 5, 0).to_vec();
            b.extend(records.concat());
            b
        };
        std::fs::write(
            &log,
            round((1..=4).map(|i| put_record_in(Some(5), i, "old")).collect()),
        )
        .unwrap();
        assert_eq!(recover(&db, &log, false).unwrap().applied, 4);
        let torn = put_record_in(Some(5), 5, "torn");
        let mut second = round(vec![torn[..HEADER + 2].to_vec()]);
        // What is left of the first round after where the second ends.
        let first = round((1..=4).map(|i| put_record_in(Some(5), i, "old")).collect());
        let from = second.len();
        second.extend_from_slice(&first[from..]);
        std::fs::write(&log, &second).unwrap();
        let r = recover(&db, &log, false).unwrap();
        assert_eq!((r.records, r.applied, r.lost.len()), (0, 4, 0), "{r:?}");
        assert_eq!(
            records_after(&second, FILE_HEADER as usize, 5, 0).0.len(),
            3,
            "the earlier round's records 2 to 4 are there, whole"
        );
    }

    #[test]
    fn the_search_for_records_after_damage_has_a_bounded_cost() {
        // Item bytes that look like record headers every 20 bytes, each
        // claiming a long payload: every one fails its checksum, and
        // checking them all would cost a pass over the region each.
        let fake = |lsn: u64| {
            let mut h = MAGIC.to_le_bytes().to_vec();
            h.extend_from_slice(&(400_000u32).to_le_bytes());
            h.extend_from_slice(&lsn.to_le_bytes());
            h.extend_from_slice(&0u32.to_le_bytes());
            h
        };
        let region: Vec<u8> = (0..50_000).flat_map(|_| fake(99)).collect();
        let (found, complete) = records_after(&region, 0, 1, 0);
        assert!(found.is_empty() && !complete, "{found:?} {complete}");
        // A few of them cost little, and a whole record among them is found.
        let mut region = [fake(99), fake(99)].concat();
        region.extend(put_record_in(Some(1), 7, "x"));
        region.extend(vec![0; 1_000_000]);
        let (found, complete) = records_after(&region, 0, 1, 0);
        assert_eq!((found, complete), (vec![(2 * HEADER, 7)], true));
    }

    /// `Path::join` then create the directory.
    trait TapMkdir {
        fn tap_mkdir(self) -> PathBuf;
    }

    impl TapMkdir for PathBuf {
        fn tap_mkdir(self) -> PathBuf {
            std::fs::create_dir_all(&self).unwrap();
            self
        }
    }
}
