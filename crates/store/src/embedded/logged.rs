//! Tables whose changes are recorded for the commit log.
//!
//! Every write of a batch goes through a [`LoggedTable`]: it applies the
//! change to the redb table and appends the same change, as bytes, to the
//! batch's [`OpLog`]. The writer hands that log to the commit log
//! (`wal`) before it commits the redb transaction, so a commit that redb has
//! not yet written to its file can be redone from the log after a crash.
//!
//! A table is named in the log by a one-byte code. The `tables!` list below
//! gives the store's own tables theirs; a crate that keeps tables of its own
//! in the file (the queues) declares them with their codes in a [`TableSet`]
//! that the store is opened with, because replaying a change needs the
//! table's key and value types. A store refuses to open a file that holds a
//! table neither it nor one of its sets declares ([`LogTables::check_file`]),
//! so an opener that forgot a set fails at once, not at the first replay.

use std::borrow::Borrow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::{Bound, Deref, RangeBounds};

use redb::{
    AccessGuard, Database, Key, ReadableDatabase, Table, TableDefinition, TableHandle, Value,
    WriteTransaction,
};

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
    tables: &'t LogTables,
}

impl<'t> TableOpener<'t> {
    pub(crate) fn new(
        txn: &'t WriteTransaction,
        log: &'t OpLog,
        tables: &'t LogTables,
    ) -> TableOpener<'t> {
        TableOpener { txn, log, tables }
    }

    /// Opens `def`, which must be one of the store's tables or of the
    /// [`TableSet`]s it was opened with.
    pub fn open_table<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<K, V>,
    ) -> Result<LoggedTable<'t, K, V>, StoreError> {
        let code = self.tables.code_of(def.name()).ok_or_else(|| {
            StoreError::Storage(format!(
                "table {} is in no table set this store was opened with \
                 (EmbeddedOptions::tables), so its commit log could not replay it",
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

/// The store's own tables, with the codes the commit log names them by.
/// A code is never reused: logs written by an older build must still replay.
macro_rules! tables {
    ($($code:literal => $def:ident),* $(,)?) => {
        /// The code and name of every table of the store's own.
        fn own_tables() -> Vec<(u8, &'static str)> {
            vec![$(($code, $def.name())),*]
        }

        fn own_code_of(name: &str) -> Option<u8> {
            $(if name == $def.name() { return Some($code); })*
            None
        }

        /// Applies `op` if `code` is one of the store's own tables.
        fn replay_own(txn: &WriteTransaction, code: u8, op: &Op<'_>) -> Option<Result<(), StoreError>> {
            match code {
                $($code => Some(apply(txn, $def, op)),)*
                _ => None,
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
    // Never in the log (written by the closing commit, removed at open);
    // named so that the file check knows it.
    11 => ARRIVAL_SNAPSHOTS,
}

/// The first code a [`TableSet`] may give a table; the codes below are the
/// store's own.
pub const FIRST_SET_CODE: u8 = 16;

/// Tables a crate above the store keeps in the store file, each with the
/// one-byte code the commit log names it by. The store is opened with the
/// sets of every crate that keeps tables in its file
/// ([`EmbeddedOptions::tables`](super::EmbeddedOptions::tables)), so that
/// it can replay their changes after a crash. Codes are at least
/// [`FIRST_SET_CODE`], unique across the sets, and never reused: a log
/// written by an older build must still replay.
#[derive(Clone, Debug)]
pub struct TableSet {
    owner: &'static str,
    tables: Vec<SetTable>,
}

#[derive(Clone)]
struct SetTable {
    code: u8,
    name: String,
    apply: fn(&WriteTransaction, &str, &Op<'_>) -> Result<(), StoreError>,
}

impl std::fmt::Debug for SetTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} => {}", self.code, self.name)
    }
}

impl TableSet {
    /// An empty set kept by `owner` (a crate's name, for messages).
    pub fn new(owner: &'static str) -> TableSet {
        TableSet {
            owner,
            tables: Vec::new(),
        }
    }

    /// Declares `def` under `code`.
    pub fn table<K: Key + 'static, V: Value + 'static>(
        mut self,
        code: u8,
        def: TableDefinition<'static, K, V>,
    ) -> TableSet {
        fn apply_named<K: Key + 'static, V: Value + 'static>(
            txn: &WriteTransaction,
            name: &str,
            op: &Op<'_>,
        ) -> Result<(), StoreError> {
            apply(txn, TableDefinition::<K, V>::new(name), op)
        }
        self.tables.push(SetTable {
            code,
            name: def.name().to_owned(),
            apply: apply_named::<K, V>,
        });
        self
    }

    /// The crate that keeps these tables.
    pub fn owner(&self) -> &'static str {
        self.owner
    }
}

/// Every table one store's commit log can name: the store's own and those
/// of the [`TableSet`]s it was opened with.
#[derive(Clone, Debug, Default)]
pub(crate) struct LogTables {
    sets: Vec<TableSet>,
}

impl LogTables {
    /// The store's own tables and `sets`'; an error when a set's code is
    /// below [`FIRST_SET_CODE`] or a code or name is declared twice.
    pub(crate) fn new(sets: &[TableSet]) -> Result<LogTables, StoreError> {
        let mut codes: HashMap<u8, String> = HashMap::new();
        let mut names: HashMap<String, String> = HashMap::new();
        for (code, name) in own_tables() {
            codes.insert(code, "the store".to_owned());
            names.insert(name.to_owned(), "the store".to_owned());
        }
        for set in sets {
            let owner = set.owner.to_owned();
            for t in &set.tables {
                let invalid = |what: String| {
                    Err(StoreError::Storage(format!(
                        "the table set of {} declares {what}",
                        set.owner
                    )))
                };
                if t.code < FIRST_SET_CODE {
                    return invalid(format!(
                        "table {} with code {}, below {FIRST_SET_CODE} (the store's own codes)",
                        t.name, t.code
                    ));
                }
                if let Some(other) = codes.insert(t.code, owner.clone()) {
                    return invalid(format!(
                        "code {} for table {}, which {other} already gives a table",
                        t.code, t.name
                    ));
                }
                if let Some(other) = names.insert(t.name.clone(), owner.clone()) {
                    return invalid(format!("table {}, which {other} declares too", t.name));
                }
            }
        }
        Ok(LogTables {
            sets: sets.to_vec(),
        })
    }

    fn set_tables(&self) -> impl Iterator<Item = &SetTable> {
        self.sets.iter().flat_map(|s| &s.tables)
    }

    /// Whether the store was opened with the set `owner` keeps.
    pub(crate) fn keeps(&self, owner: &str) -> bool {
        self.sets.iter().any(|s| s.owner == owner)
    }

    fn code_of(&self, name: &str) -> Option<u8> {
        own_code_of(name).or_else(|| self.set_tables().find(|t| t.name == name).map(|t| t.code))
    }

    fn replay_op(&self, txn: &WriteTransaction, code: u8, op: &Op<'_>) -> Result<(), StoreError> {
        if let Some(done) = replay_own(txn, code, op) {
            return done;
        }
        match self.set_tables().find(|t| t.code == code) {
            Some(t) => (t.apply)(txn, &t.name, op),
            None => Err(corrupt(format!(
                "it names table code {code}, which no table of the store or of its table sets \
                 has"
            ))),
        }
    }

    /// Applies a batch's changes (as [`decode`] returns them) to `txn`.
    pub(crate) fn replay(
        &self,
        txn: &WriteTransaction,
        ops: &[(u8, Op<'_>)],
    ) -> Result<(), StoreError> {
        for (code, op) in ops {
            self.replay_op(txn, *code, op)?;
        }
        Ok(())
    }

    /// [`LogTables::new`] for a store opening `db`, which it then checks
    /// with [`LogTables::check_file`]: the tables of `db` the store may
    /// replay, or why it must not open it.
    pub(crate) fn for_file(sets: &[TableSet], db: &Database) -> Result<LogTables, StoreError> {
        let tables = LogTables::new(sets)?;
        tables.check_file(db)?;
        Ok(tables)
    }

    /// Refuses a file that holds a table neither the store nor one of its
    /// sets declares: its commit log could hold changes to it that this
    /// store cannot replay, and whoever keeps it expects it to be replayed.
    pub(crate) fn check_file(&self, db: &Database) -> Result<(), StoreError> {
        let txn = db.begin_read().map_err(storage_err)?;
        for table in txn.list_tables().map_err(storage_err)? {
            if self.code_of(table.name()).is_none() {
                return Err(StoreError::Storage(format!(
                    "the store file holds table {}, which the store was not opened to keep: \
                     open it with the table set of the crate that keeps it \
                     (EmbeddedOptions::tables)",
                    table.name()
                )));
            }
        }
        Ok(())
    }
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
    fn the_stores_own_codes_are_unique_and_below_the_sets() {
        let tables = own_tables();
        let codes: std::collections::HashSet<_> = tables.iter().map(|t| t.0).collect();
        let names: std::collections::HashSet<_> = tables.iter().map(|t| t.1).collect();
        assert_eq!(codes.len(), tables.len());
        assert_eq!(names.len(), tables.len());
        let none = LogTables::new(&[]).unwrap();
        for (code, name) in tables {
            assert!(code < FIRST_SET_CODE, "{name} has code {code}");
            assert_eq!(none.code_of(name), Some(code));
        }
    }

    const EXTRA: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("extra");

    fn extra() -> TableSet {
        TableSet::new("extra").table(16, EXTRA)
    }

    fn err(sets: &[TableSet]) -> String {
        LogTables::new(sets).unwrap_err().to_string()
    }

    #[test]
    fn a_set_is_checked_against_the_stores_tables_and_the_other_sets() {
        assert_eq!(
            LogTables::new(&[extra()]).unwrap().code_of("extra"),
            Some(16)
        );
        let low = TableSet::new("low").table(3, TableDefinition::<&str, u64>::new("low"));
        assert!(err(&[low]).contains("code 3, below 16"), "{}", err(&[]));
        let same_code = TableSet::new("other").table(16, TableDefinition::<&str, u64>::new("o"));
        let e = err(&[extra(), same_code]);
        assert!(
            e.contains("code 16 for table o, which extra already"),
            "{e}"
        );
        let same_name =
            TableSet::new("other").table(17, TableDefinition::<&str, &str>::new("meta"));
        let e = err(&[same_name]);
        assert!(
            e.contains("table meta, which the store declares too"),
            "{e}"
        );
        let twice = TableSet::new("other").table(17, TableDefinition::<&str, u64>::new("extra"));
        let e = err(&[extra(), twice]);
        assert!(e.contains("table extra, which extra declares too"), "{e}");
    }

    #[test]
    fn a_sets_changes_are_logged_and_replay_only_in_a_store_that_keeps_the_set() {
        let db = redb::Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .unwrap();
        let kept = LogTables::new(&[extra()]).unwrap();
        let bare = LogTables::default();
        let txn = db.begin_write().unwrap();
        let log = OpLog::new(true);
        let e = TableOpener::new(&txn, &log, &bare)
            .open_table(EXTRA)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("table extra is in no table set"), "{e}");
        {
            let mut t = TableOpener::new(&txn, &log, &kept)
                .open_table(EXTRA)
                .unwrap();
            t.insert((1, 2), b"x".as_slice()).unwrap();
        }
        txn.abort().unwrap();
        let bytes = log.into_bytes();
        let ops = decode(&bytes).unwrap();
        assert!(matches!(ops[..], [(16, Op::Put(_, b"x"))]), "{ops:?}");

        let txn = db.begin_write().unwrap();
        let e = bare.replay(&txn, &ops).unwrap_err().to_string();
        assert!(e.contains("table code 16"), "{e}");
        txn.abort().unwrap();
        assert!(bare.check_file(&db).is_ok(), "nothing was written");

        let txn = db.begin_write().unwrap();
        kept.replay(&txn, &ops).unwrap();
        txn.commit().unwrap();
        let read = db.begin_read().unwrap();
        let t = read.open_table(EXTRA).unwrap();
        assert_eq!(t.get((1, 2)).unwrap().unwrap().value(), b"x");
        assert!(kept.check_file(&db).is_ok());
        let e = bare.check_file(&db).unwrap_err().to_string();
        assert!(
            e.contains("holds table extra, which the store was not opened to keep"),
            "{e}"
        );
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
