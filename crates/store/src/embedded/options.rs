//! How an [`EmbeddedStore`](super::EmbeddedStore) runs: its durability,
//! commit log, page cache, retention and the tables other crates keep in
//! its file.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, SystemClock};

use super::logged::TableSet;

/// Whether a commit waits for the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// An acknowledged write survives power loss: its commit was synced to
    /// disk, through the commit log when the store keeps one
    /// ([`EmbeddedOptions::commit_log`]), else by redb itself.
    #[default]
    Durable,
    /// No fsync: a crash of the process is survived, a power loss may lose
    /// recent commits. For benchmarks' baseline and throwaway stores.
    NoFsync,
}

/// [`EmbeddedOptions::cache_bytes`]'s default.
pub const DEFAULT_CACHE_BYTES: usize = 16 << 20;

/// How an [`EmbeddedStore`](super::EmbeddedStore) runs.
#[derive(Clone)]
pub struct EmbeddedOptions {
    /// Whether commits fsync.
    pub durability: Durability,
    /// Whether a durable store opened by path commits through its commit
    /// log (`<file>-log` and `<file>-log.1`, see `wal`): one sequential
    /// append and sync per commit, with redb writing its pages at
    /// checkpoints, whose syncs run beside the writer. Off, every commit is
    /// a durable redb commit. A log left by an earlier run is replayed at
    /// open either way.
    pub commit_log: bool,
    /// Bytes of the store file's pages kept in memory (redb's cache, read
    /// and write), 16 MiB by default. Pages beyond it are read from the
    /// file (the OS page cache), each through a pread into a fresh buffer.
    /// Half of it bounds the pages commits leave dirty between checkpoints:
    /// a checkpoint writes whatever is still dirty while the writer waits,
    /// so a large cache makes rarer, longer stalls (with 1 GiB, 12 ms every
    /// 125 ms under the HTTP emit load, p99 27 ms against 19 ms with
    /// 16 MiB) and costs CPU in redb's larger maps and in the kernel
    /// zeroing pages the cache touches for the first time. A larger cache
    /// serves reads of a hot set faster (event reads over HTTP 5% faster
    /// with 1 GiB; `research/latency-path.md`, "The page cache's size").
    pub cache_bytes: usize,
    /// How long stream records are kept (24 h, as DynamoDB Streams).
    pub stream_retention: Duration,
    /// How often the TTL sweeper runs (it also trims streams).
    pub ttl_sweep_interval: Duration,
    /// The source of "now" for TTL, retention and record times.
    pub clock: Arc<dyn Clock>,
    /// Whether an open whose commit log is damaged (a region cut short or
    /// missing after an unclean stop, a damaged record with whole ones
    /// after it, records missing after the file's) goes on anyway: it
    /// replays the consecutive records it has after the file's own and
    /// logs (as warnings) what was lost. Off (the default), such an open
    /// is refused with an error naming the file and the position, and
    /// changes nothing.
    pub recover_truncated: bool,
    /// The tables other crates keep in the file (the queues':
    /// `postbox_queue::tables()`), so that the commit log can replay their
    /// changes. An open is refused when the file holds a table that neither
    /// the store nor one of these sets declares. Empty by default.
    pub tables: Vec<TableSet>,
    /// Tables that, when created by this store without a stream and without
    /// a secondary index (and without the tag
    /// [`ROW_ORDER_TAG`](super::ROW_ORDER_TAG), which decides when given),
    /// keep their partitions in arrival order with an
    /// index of their partition keys in memory (about 20-40 bytes a
    /// partition, saved by a clean close and read back at open, rebuilt
    /// from the rows after a crash): a new partition is written at the
    /// table's end instead of in a random leaf, which is what a table of
    /// random keys costs a B-tree (see `arrival`). The layout is kept with
    /// the table. Empty by default; a node names its Idempotency-Key table.
    pub arrival_tables: Vec<String>,
}

impl EmbeddedOptions {
    /// These options, with `set`'s tables kept in the file too (once: a set
    /// whose owner is already kept is not added again).
    pub fn keeping(mut self, set: TableSet) -> EmbeddedOptions {
        if !self.tables.iter().any(|s| s.owner() == set.owner()) {
            self.tables.push(set);
        }
        self
    }
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        EmbeddedOptions {
            durability: Durability::Durable,
            commit_log: true,
            cache_bytes: DEFAULT_CACHE_BYTES,
            stream_retention: Duration::from_secs(24 * 3600),
            ttl_sweep_interval: Duration::from_secs(1),
            clock: Arc::new(SystemClock),
            recover_truncated: false,
            tables: Vec::new(),
            arrival_tables: Vec::new(),
        }
    }
}

impl std::fmt::Debug for EmbeddedOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedOptions")
            .field("durability", &self.durability)
            .field("commit_log", &self.commit_log)
            .field("cache_bytes", &self.cache_bytes)
            .field("stream_retention", &self.stream_retention)
            .field("ttl_sweep_interval", &self.ttl_sweep_interval)
            .field("recover_truncated", &self.recover_truncated)
            .field("tables", &self.tables)
            .field("arrival_tables", &self.arrival_tables)
            .finish_non_exhaustive()
    }
}
