//! Tables whose changes are recorded for the commit log.
//!
//! Every write of a batch goes through a [`LoggedTable`]: it applies the
//! change to the redb table and appends the same change, as bytes, to the
//! batch's [`OpLog`]. The writer hands that log to the commit log
//! (`wal`) before it commits the redb transaction, so a commit that redb has
//! not yet written to its file can be redone from the log after a crash.
//!
//! A table is named in the log by a one-byte code. The `tables!` list below is the one list
//! of every table in the store file with its code; the store's own tables and
//! the ones other modules keep in the file (queues) are all declared in
//! `tables`, because replaying a change needs the table's key and value types.

use std::borrow::Borrow;
use std::cell::RefCell;
use std::ops::{Bound, Deref, RangeBounds};

use redb::{AccessGuard, Key, Table, TableDefinition, TableHandle, Value, WriteTransaction};

use crate::StoreError;

use super::storage_err;
use super::tables::*;

/// The changes of one batch, in the order they were made, encoded as the
/// commit log stores them. Empty and unused when the store keeps no log.
pub(crate) struct OpLog {
    on: bool,
    buf: RefCell<Vec<u8>>,
}

const PUT: u8 = 1;
const DELETE: u8 = 2;
const DELETE_RANGE: u8 = 3;

const UNBOUNDED: u8 = 0;
const INCLUDED: u8 = 1;
const EXCLUDED: u8 = 2;

impl OpLog {
    #[cfg(test)]
    pub(crate) fn new(on: bool) -> OpLog {
        OpLog::appending_to(on, Vec::new())
    }

    /// A log that appends the changes to `buf` (the commit log's record
    /// buffer, whose header it leaves alone).
    pub(crate) fn appending_to(on: bool, buf: Vec<u8>) -> OpLog {
        OpLog {
            on,
            buf: RefCell::new(buf),
        }
    }

    /// The buffer, with the encoded changes appended.
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.buf.into_inner()
    }

    fn put(&self, table: u8, key: &[u8], value: &[u8]) {
        if self.on {
            let mut buf = self.buf.borrow_mut();
            buf.extend_from_slice(&[PUT, table]);
            push_bytes(&mut buf, key);
            push_bytes(&mut buf, value);
        }
    }

    fn delete(&self, table: u8, key: &[u8]) {
        if self.on {
            let mut buf = self.buf.borrow_mut();
            buf.extend_from_slice(&[DELETE, table]);
            push_bytes(&mut buf, key);
        }
    }

    fn delete_range(&self, table: u8, lower: Bound<&[u8]>, upper: Bound<&[u8]>) {
        if self.on {
            let mut buf = self.buf.borrow_mut();
            buf.extend_from_slice(&[DELETE_RANGE, table]);
            push_bound(&mut buf, lower);
            push_bound(&mut buf, upper);
        }
    }
}

fn push_bytes(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    buf.extend_from_slice(bytes);
}

fn push_bound(buf: &mut Vec<u8>, bound: Bound<&[u8]>) {
    match bound {
        Bound::Unbounded => buf.push(UNBOUNDED),
        Bound::Included(b) => {
            buf.push(INCLUDED);
            push_bytes(buf, b);
        }
        Bound::Excluded(b) => {
            buf.push(EXCLUDED);
            push_bytes(buf, b);
        }
    }
}

/// Opens logged tables in one batch's transaction. Handed to modules that
/// keep their own tables in the store file.
#[derive(Clone, Copy)]
pub struct TableOpener<'t> {
    txn: &'t WriteTransaction,
    log: &'t OpLog,
}

impl<'t> TableOpener<'t> {
    pub(crate) fn new(txn: &'t WriteTransaction, log: &'t OpLog) -> TableOpener<'t> {
        TableOpener { txn, log }
    }

    /// Opens `def`, which must be one of the tables the `tables!` list of
    /// this module gives a code.
    pub fn open_table<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<K, V>,
    ) -> Result<LoggedTable<'t, K, V>, StoreError> {
        let code = code_of(def.name()).ok_or_else(|| {
            StoreError::Storage(format!(
                "table {} is not one the commit log knows; declare it in the store's tables",
                def.name()
            ))
        })?;
        Ok(LoggedTable {
            table: self.txn.open_table(def).map_err(storage_err)?,
            code,
            log: self.log,
        })
    }

    /// Whether the file holds table `def`, without creating it as
    /// [`TableOpener::open_table`] would.
    pub fn exists<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<K, V>,
    ) -> Result<bool, StoreError> {
        Ok(self
            .txn
            .list_tables()
            .map_err(storage_err)?
            .any(|t| t.name() == def.name()))
    }
}

/// A redb table of the batch's transaction whose changes are logged. Reads go
/// to the table (it derefs to it); changes only through the methods below.
pub struct LoggedTable<'t, K: Key + 'static, V: Value + 'static> {
    table: Table<'t, K, V>,
    code: u8,
    log: &'t OpLog,
}

impl<'t, K: Key + 'static, V: Value + 'static> Deref for LoggedTable<'t, K, V> {
    type Target = Table<'t, K, V>;

    fn deref(&self) -> &Table<'t, K, V> {
        &self.table
    }
}

impl<K: Key + 'static, V: Value + 'static> LoggedTable<'_, K, V> {
    /// `Table::insert`, logged; returns the value it replaced, as redb does.
    pub fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<Option<AccessGuard<'_, V>>, redb::StorageError> {
        let old = self.table.insert(key.borrow(), value.borrow())?;
        self.log.put(
            self.code,
            K::as_bytes(key.borrow()).as_ref(),
            V::as_bytes(value.borrow()).as_ref(),
        );
        Ok(old)
    }

    /// `Table::remove`, logged (whether or not the key was there); returns
    /// the value it removed, as redb does.
    pub fn remove<'a>(
        &mut self,
        key: impl Borrow<K::SelfType<'a>>,
    ) -> Result<Option<AccessGuard<'_, V>>, redb::StorageError> {
        let old = self.table.remove(key.borrow())?;
        self.log
            .delete(self.code, K::as_bytes(key.borrow()).as_ref());
        Ok(old)
    }

    /// Removes every row whose key is in `range`, logged as one change.
    pub fn delete_range<'a, KR>(
        &mut self,
        range: impl RangeBounds<KR> + 'a,
    ) -> Result<(), redb::StorageError>
    where
        KR: Borrow<K::SelfType<'a>> + 'a,
    {
        fn bytes<'a, K: Key + 'a, KR: Borrow<K::SelfType<'a>>>(b: Bound<&KR>) -> Bound<Vec<u8>> {
            b.map(|k| K::as_bytes(k.borrow()).as_ref().to_vec())
        }
        let lower = bytes::<K, KR>(range.start_bound());
        let upper = bytes::<K, KR>(range.end_bound());
        self.table.retain_in(range, |_, _| false)?;
        self.log
            .delete_range(self.code, as_slice(&lower), as_slice(&upper));
        Ok(())
    }
}

fn as_slice(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    b.as_ref().map(|v| v.as_slice())
}

/// Every table of the store file, with the code the commit log names it by.
/// A code is never reused: logs written by an older build must still replay.
macro_rules! tables {
    ($($code:literal => $def:ident),* $(,)?) => {
        /// The code and name of every logged table.
        #[cfg(test)]
        fn tables() -> Vec<(u8, &'static str)> {
            vec![$(($code, $def.name())),*]
        }

        fn code_of(name: &str) -> Option<u8> {
            $(if name == $def.name() { return Some($code); })*
            None
        }

        fn replay_op(txn: &WriteTransaction, code: u8, op: &Op<'_>) -> Result<(), StoreError> {
            match code {
                $($code => apply(txn, $def, op),)*
                other => Err(corrupt(format!("it names table code {other}, which no table has"))),
            }
        }
    };
}

tables! {
    1 => META,
    2 => SYSTEM,
    3 => ITEMS,
    4 => TTL_INDEX,
    5 => STREAM,
    6 => STREAM_HEADS,
    7 => CHECKPOINTS,
    8 => STREAM_IMAGES,
    9 => CLIENT_TOKENS,
    10 => CLIENT_TOKEN_TIMES,
    16 => QUEUE_QUEUES,
    17 => QUEUE_SYSTEM,
    18 => QUEUE_PAYLOADS,
    19 => QUEUE_STATES,
    20 => QUEUE_DEDUP,
    21 => QUEUE_DEDUP_BY_EXPIRY,
}

/// One decoded change.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Op<'a> {
    Put(&'a [u8], &'a [u8]),
    Delete(&'a [u8]),
    DeleteRange(Bound<&'a [u8]>, Bound<&'a [u8]>),
}

pub(crate) fn corrupt(what: String) -> StoreError {
    StoreError::Storage(format!("the commit log is damaged: {what}"))
}

/// Decodes a batch's changes, in order, as (table code, change).
pub(crate) fn decode(mut bytes: &[u8]) -> Result<Vec<(u8, Op<'_>)>, StoreError> {
    let mut out = Vec::new();
    while let [kind, code, rest @ ..] = bytes {
        bytes = rest;
        let op = match *kind {
            PUT => {
                let key = take_bytes(&mut bytes)?;
                Op::Put(key, take_bytes(&mut bytes)?)
            }
            DELETE => Op::Delete(take_bytes(&mut bytes)?),
            DELETE_RANGE => {
                let lower = take_bound(&mut bytes)?;
                Op::DeleteRange(lower, take_bound(&mut bytes)?)
            }
            other => return Err(corrupt(format!("unknown change kind {other}"))),
        };
        out.push((*code, op));
    }
    if !bytes.is_empty() {
        return Err(corrupt("a change is cut short".to_owned()));
    }
    Ok(out)
}

fn take_bytes<'a>(bytes: &mut &'a [u8]) -> Result<&'a [u8], StoreError> {
    let short = || corrupt("a change is cut short".to_owned());
    let (len, rest) = bytes.split_first_chunk::<4>().ok_or_else(short)?;
    let len = u32::from_le_bytes(*len) as usize;
    if rest.len() < len {
        return Err(short());
    }
    let (value, rest) = rest.split_at(len);
    *bytes = rest;
    Ok(value)
}

fn take_bound<'a>(bytes: &mut &'a [u8]) -> Result<Bound<&'a [u8]>, StoreError> {
    let (kind, rest) = bytes
        .split_first()
        .ok_or_else(|| corrupt("a change is cut short".to_owned()))?;
    *bytes = rest;
    Ok(match *kind {
        UNBOUNDED => Bound::Unbounded,
        INCLUDED => Bound::Included(take_bytes(bytes)?),
        EXCLUDED => Bound::Excluded(take_bytes(bytes)?),
        other => return Err(corrupt(format!("unknown range bound {other}"))),
    })
}

/// Applies a batch's changes (as [`decode`] returns them) to `txn`.
pub(crate) fn replay(txn: &WriteTransaction, ops: &[(u8, Op<'_>)]) -> Result<(), StoreError> {
    for (code, op) in ops {
        replay_op(txn, *code, op)?;
    }
    Ok(())
}

fn apply<K: Key + 'static, V: Value + 'static>(
    txn: &WriteTransaction,
    def: TableDefinition<K, V>,
    op: &Op<'_>,
) -> Result<(), StoreError> {
    let mut table = txn.open_table(def).map_err(storage_err)?;
    match op {
        Op::Put(k, v) => {
            table
                .insert(K::from_bytes(k), V::from_bytes(v))
                .map_err(storage_err)?;
        }
        Op::Delete(k) => {
            table.remove(K::from_bytes(k)).map_err(storage_err)?;
        }
        Op::DeleteRange(lower, upper) => {
            let range = (lower.map(K::from_bytes), upper.map(K::from_bytes));
            table.retain_in(range, |_, _| false).map_err(storage_err)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_are_unique() {
        let tables = tables();
        let codes: std::collections::HashSet<_> = tables.iter().map(|t| t.0).collect();
        let names: std::collections::HashSet<_> = tables.iter().map(|t| t.1).collect();
        assert_eq!(codes.len(), tables.len());
        assert_eq!(names.len(), tables.len());
        for (code, name) in tables {
            assert_eq!(code_of(name), Some(code));
        }
    }

    #[test]
    fn changes_decode_as_they_were_logged() {
        let log = OpLog::new(true);
        log.put(3, b"k", b"value");
        log.delete(5, b"");
        log.delete_range(4, Bound::Included(b"a"), Bound::Excluded(b"b"));
        log.delete_range(19, Bound::Unbounded, Bound::Included(b"z"));
        let bytes = log.into_bytes();
        assert_eq!(
            decode(&bytes).unwrap(),
            vec![
                (3, Op::Put(b"k", b"value")),
                (5, Op::Delete(b"")),
                (
                    4,
                    Op::DeleteRange(Bound::Included(b"a"), Bound::Excluded(b"b"))
                ),
                (19, Op::DeleteRange(Bound::Unbounded, Bound::Included(b"z"))),
            ]
        );
        for cut in [1, 2, 6, 12, bytes.len() - 1] {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut} decoded");
        }
        let off = OpLog::new(false);
        off.put(3, b"k", b"v");
        assert!(off.into_bytes().is_empty());
    }
}
