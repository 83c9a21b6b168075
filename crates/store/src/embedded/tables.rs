//! The redb tables of the store file and what their keys and values mean.
//!
//! Every user table gets a numeric id at CreateTable; all of its rows in the
//! shared redb tables below start with that id, so DeleteTable is a few range
//! deletions and a recreated table never sees its predecessor's rows. Other
//! crates keep tables of their own in the file (the queues'), declared in a
//! `TableSet` the store is opened with (see `logged`).
//!
//! | redb table     | key                                   | value                         |
//! |----------------|---------------------------------------|-------------------------------|
//! | `meta`         | table name                            | JSON of [`TableMeta`]         |
//! | `system`       | counter name (`next_table_id`, `format`) | u64                        |
//! | `items`        | id BE ‖ partition key ‖ sort key      | the row (`row`): `encode_item` bytes |
//! | `ttl_index`    | (id, expires_at seconds, item key)    | ()                            |
//! | `stream`       | (id, first sequence of the block)     | one commit's records (`stream`) |
//! | `stream_images`| (id, sequence of a record)            | the item image the record referred to |
//! | `stream_heads` | id                                    | (last sequence, trimmed through) |
//! | `checkpoints`  | (id, reader name)                     | sequence number               |
//! | `client_tokens` | ClientRequestToken                   | (recorded at ms, SHA-256 of the request) |
//! | `client_token_times` | (recorded at ms, token)         | ()                            |
//!
//! [`TableMeta`]: super::catalog::TableMeta

use redb::{ReadOnlyTable, ReadTransaction, ReadableDatabase, TableDefinition};

use crate::StoreError;

use super::storage_err;

/// Opens `def` in a snapshot; None when the file has never had the table
/// (a brand-new file, or a table no write has created yet).
pub(crate) fn open_if_present<K: redb::Key + 'static, V: redb::Value + 'static>(
    txn: &ReadTransaction,
    def: TableDefinition<K, V>,
) -> Result<Option<ReadOnlyTable<K, V>>, StoreError> {
    match txn.open_table(def) {
        Ok(t) => Ok(Some(t)),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(storage_err(e)),
    }
}

/// The `system` table's value at `key`, if the table and the key exist.
pub(crate) fn system_value(db: &redb::Database, key: &str) -> Result<Option<u64>, StoreError> {
    let txn = db.begin_read().map_err(super::storage_err)?;
    let Some(table) = open_if_present(&txn, SYSTEM)? else {
        return Ok(None);
    };
    Ok(table
        .get(key)
        .map_err(super::storage_err)?
        .map(|g| g.value()))
}

/// Refuses a file written in a format newer than this build reads.
pub(crate) fn check_format(db: &redb::Database) -> Result<(), StoreError> {
    let format = system_value(db, FORMAT_KEY)?.unwrap_or(FORMAT_KEY_ORDER_ONLY);
    if format > FORMAT {
        return Err(StoreError::Storage(format!(
            "the store file was written by a newer Postbox: its format is {format} and this build reads formats up to {FORMAT}; open it with the build that wrote it or a newer one"
        )));
    }
    Ok(())
}

/// Table name -> JSON metadata.
pub(crate) const META: TableDefinition<&str, &str> = TableDefinition::new("meta");
/// Named counters of the store itself.
pub(crate) const SYSTEM: TableDefinition<&str, u64> = TableDefinition::new("system");
/// Encoded item key -> encoded item.
pub(crate) const ITEMS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("items");
/// (table id, expiry second, item key): the sweeper's work list, kept in the
/// same transaction as the item so it never scans whole tables.
pub(crate) const TTL_INDEX: TableDefinition<(u32, u64, &[u8]), ()> =
    TableDefinition::new("ttl_index");
/// (table id, first sequence number) -> a block of one commit's records.
pub(crate) const STREAM: TableDefinition<(u32, u64), &[u8]> = TableDefinition::new("stream");
/// (table id, sequence number) -> the image (`encode_item` bytes) of the
/// item an insert record referred to, saved when that item changed, so the
/// record still reads as the item was (see `row`).
pub(crate) const STREAM_IMAGES: TableDefinition<(u32, u64), &[u8]> =
    TableDefinition::new("stream_images");
/// Table id -> (last assigned sequence number, sequence trimmed through).
/// Kept apart from the records so sequence numbers never restart, even when
/// retention has trimmed every record.
pub(crate) const STREAM_HEADS: TableDefinition<u32, (u64, u64)> =
    TableDefinition::new("stream_heads");
/// (table id, reader name) -> checkpointed sequence number.
pub(crate) const CHECKPOINTS: TableDefinition<(u32, &str), u64> =
    TableDefinition::new("checkpoints");

/// ClientRequestToken -> (when it was recorded, ms; SHA-256 of its
/// TransactWriteItems request): see `idempotency`.
pub(crate) const CLIENT_TOKENS: TableDefinition<&str, (u64, &[u8])> =
    TableDefinition::new("client_tokens");
/// (when a token was recorded, ms; the token): the order in which tokens
/// are forgotten once their ten minutes have passed.
pub(crate) const CLIENT_TOKEN_TIMES: TableDefinition<(u64, &str), ()> =
    TableDefinition::new("client_token_times");

/// (table id, part) -> the index of a table kept in arrival order as the
/// last clean close left it (`arrival::save_snapshots`): present only from
/// a clean close to the next open, which reads and removes it.
pub(crate) const ARRIVAL_SNAPSHOTS: TableDefinition<(u32, u32), &[u8]> =
    TableDefinition::new("arrival_snapshots");

/// Key of the table-id counter in [`SYSTEM`].
pub(crate) const NEXT_TABLE_ID: &str = "next_table_id";
/// Key in [`SYSTEM`] of the file's format: what a build must understand to
/// read its rows. Absent means [`FORMAT_KEY_ORDER_ONLY`]. 2: a table may
/// keep its rows in arrival order (`arrival`), written by the commit that
/// creates the first such table. 3: such a table's expiries are not in
/// `ttl_index` (its newer items have no row there), written by that commit
/// or, for a file of format 2, by the first commit of a build that reads 3.
/// A build refuses to open a file of a newer format than [`FORMAT`] rather
/// than misread its rows (or, here, never expire them).
pub(crate) const FORMAT_KEY: &str = "format";
/// The format of a file without [`FORMAT_KEY`]: every table in key order.
pub(crate) const FORMAT_KEY_ORDER_ONLY: u64 = 1;
/// The newest format this build reads and writes.
pub(crate) const FORMAT: u64 = 3;
/// The format a file that keeps a table in arrival order was given by a
/// build before [`FORMAT_ARRIVAL`].
pub(crate) const FORMAT_ARRIVAL_TTL_ROWS: u64 = 2;
/// The format of a file that may keep a table in arrival order.
pub(crate) const FORMAT_ARRIVAL: u64 = 3;
/// Key in [`SYSTEM`] of the last commit-log sequence number whose changes
/// the file holds (written by every commit of a store that keeps a log).
pub(crate) const WAL_APPLIED: &str = "wal_applied";
/// `system` key: 1 when the store's last close left every record of its
/// commit log in the file (its closing checkpoint), 0 from the first
/// durable commit of an open with a log on. A region of the log missing
/// at open while it is 0 may have held acknowledged writes.
pub(crate) const CLEAN_CLOSE: &str = "clean_close";
/// `system` key: the [`WAL_APPLIED`] value (0 if none) of the closing
/// commit that wrote [`ARRIVAL_SNAPSHOTS`].
pub(crate) const ARRIVAL_SNAPSHOT_AT: &str = "arrival_snapshot_at";
/// `system` key: the store file's random identity, which its commit log
/// carries in its header.
pub(crate) const STORE_ID: &str = "store_id";
