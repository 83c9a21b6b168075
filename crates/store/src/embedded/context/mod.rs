//! The write context: what an operation running inside the writer's
//! group-commit transaction can see and do.
//!
//! Every write of the store, built-in or submitted by another module through
//! [`EmbeddedStore::submit`](super::EmbeddedStore::submit), runs as one
//! operation against a `WriteContext`. Item changes are *staged*: they become
//! visible to the same operation's reads at once, and are applied to the
//! redb tables (item, TTL index entry, stream record) only when the operation
//! returns `Ok`. An operation that returns `Err` therefore writes nothing,
//! and the other operations of the batch are not disturbed.

mod control;

use std::cell::OnceCell;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use postbox_item::{Item, encode_item, item_size};
use redb::{Key, ReadableTable, TableDefinition, Value, WriteTransaction};

use crate::StoreError;
use crate::api::StreamRecord;

use super::catalog::{Catalog, CatalogChange, TableMeta, not_found};
use super::logged::{LogTables, LoggedTable as Table, OpLog, TableOpener};
use super::tables::{
    CHECKPOINTS, ITEMS, META, STREAM, STREAM_HEADS, STREAM_IMAGES, SYSTEM, TTL_INDEX,
};
use super::{arrival, index, keys, read_ops, row, storage_err, stream, ttl, validate};

/// The table in `cell`, opened from `def` if this is its first use.
fn opened<'c, 't, K: Key + 'static, V: Value + 'static>(
    cell: &'c OnceCell<Table<'t, K, V>>,
    opener: TableOpener<'t>,
    def: TableDefinition<'static, K, V>,
) -> Result<&'c Table<'t, K, V>, StoreError> {
    if let Some(table) = cell.get() {
        return Ok(table);
    }
    let table = opener.open_table(def)?;
    Ok(cell.get_or_init(|| table))
}

/// [`opened`], for writing.
fn opened_mut<'c, 't, K: Key + 'static, V: Value + 'static>(
    cell: &'c mut OnceCell<Table<'t, K, V>>,
    opener: TableOpener<'t>,
    def: TableDefinition<'static, K, V>,
) -> Result<&'c mut Table<'t, K, V>, StoreError> {
    if cell.get().is_none() {
        let _ = cell.set(opener.open_table(def)?);
    }
    Ok(cell.get_mut().expect("opened above"))
}

/// `Tables::$name()` reads the table, `Tables::$name_mut()` writes it.
macro_rules! lazy_tables {
    ($($name:ident, $name_mut:ident, $def:ident, $k:ty, $v:ty;)*) => {
        /// The store's redb tables in a batch's transaction, each opened
        /// the first time the batch uses it: most batches touch two or
        /// three of the seven (a claim: the items and the TTL index), and
        /// opening them all was 2.4% of the writer's time in a profile of
        /// the worker benchmark.
        struct Tables<'t> {
            opener: TableOpener<'t>,
            $($name: OnceCell<Table<'t, $k, $v>>,)*
        }

        impl<'t> Tables<'t> {
            fn new(opener: TableOpener<'t>) -> Self {
                Tables { opener, $($name: OnceCell::new(),)* }
            }
            $(
                // Some tables are only ever written.
                #[allow(dead_code)]
                fn $name(&self) -> Result<&Table<'t, $k, $v>, StoreError> {
                    opened(&self.$name, self.opener, $def)
                }
                fn $name_mut(&mut self) -> Result<&mut Table<'t, $k, $v>, StoreError> {
                    opened_mut(&mut self.$name, self.opener, $def)
                }
            )*
        }
    };
}

lazy_tables! {
    items, items_mut, ITEMS, &'static [u8], &'static [u8];
    ttl_index, ttl_index_mut, TTL_INDEX, (u32, u64, &'static [u8]), ();
    stream, stream_mut, STREAM, (u32, u64), &'static [u8];
    stream_images, stream_images_mut, STREAM_IMAGES, (u32, u64), &'static [u8];
    heads, heads_mut, STREAM_HEADS, u32, (u64, u64);
    checkpoints, checkpoints_mut, CHECKPOINTS, (u32, &'static str), u64;
    meta, meta_mut, META, &'static str, &'static str;
    system, system_mut, SYSTEM, &'static str, u64;
}

/// One staged change of one item.
struct Change {
    meta: Arc<TableMeta>,
    key: Vec<u8>,
    old: Option<Item>,
    new: Option<Item>,
    /// `new` encoded, when the caller already did it.
    new_bytes: Option<Vec<u8>>,
    ttl_removal: bool,
}

/// The item stored under a key, and whether it is live (not expired).
#[derive(Clone, Debug, Default)]
pub(crate) struct Current {
    /// What the file holds, expired or not.
    pub stored: Option<Item>,
    /// The stored item has expired (TTL): requests see no item.
    pub expired: bool,
}

impl Current {
    /// The item if it has not expired: what requests see.
    pub fn live(&self) -> Option<&Item> {
        self.stored.as_ref().filter(|_| !self.expired)
    }

    /// [`Current::live`], owned.
    pub fn into_live(self) -> Option<Item> {
        self.stored.filter(|_| !self.expired)
    }
}

/// The state an operation inside a group commit works on. See the module
/// documentation of `embedded` for the hook contract.
pub struct WriteContext<'t> {
    opener: TableOpener<'t>,
    tables: Tables<'t>,
    catalog: &'t Catalog,
    now_ms: u64,
    staged: Vec<Change>,
    op_catalog: Vec<CatalogChange>,
    batch_catalog: Vec<CatalogChange>,
    heads: HashMap<u32, (u64, u64)>,
    /// Stream records of this batch not yet written, per table: the first
    /// sequence number and the block (see `stream`).
    pending: HashMap<u32, (u64, Vec<u8>)>,
    stream_written: bool,
    /// Whether anything was written: a batch that wrote nothing is not
    /// committed, so it costs no fsync. A `Cell` because handing out the raw
    /// transaction (`&self`) counts as writing.
    touched: std::cell::Cell<bool>,
    /// What runs once the batch has committed ([`WriteContext::on_commit`]).
    on_commit: Vec<CommitHook>,
    /// What runs once the batch is durable (arrival places of deleted rows
    /// are forgotten then).
    on_durable: Vec<CommitHook>,
    /// The tables whose items the batch changed.
    changed: Vec<u32>,
    /// The new images of the records written by reference:
    /// `(table id, sequence number, item)` (see `recent`).
    referred: Vec<(u32, u64, Item)>,
    /// Expiries of items written in arrival order, noted in their tables'
    /// indexes once the batch commits: (index, place, second).
    expiries: Vec<(Arc<arrival::ArrivalIndex>, u64, u64)>,
}

/// A callback run on the writer thread once its batch has committed.
pub(crate) type CommitHook = Box<dyn FnOnce() + Send>;

/// What a finished batch hands back to the writer.
pub(crate) struct Finished {
    /// Catalog changes to publish after the commit.
    pub catalog: Vec<CatalogChange>,
    /// Whether a stream record was written (readers are woken).
    pub stream_written: bool,
    /// Whether anything at all was written (else the commit is skipped).
    pub touched: bool,
    /// The callbacks registered with [`WriteContext::on_commit`].
    pub on_commit: Vec<CommitHook>,
    /// What runs once the batch is durable.
    pub on_durable: Vec<CommitHook>,
    /// The tables whose items changed or whose metadata was put
    /// (`TableChanges`).
    pub changed: Vec<u32>,
    /// The new images of the records written by reference.
    pub referred: Vec<(u32, u64, Item)>,
}

impl<'t> WriteContext<'t> {
    pub(crate) fn open(
        txn: &'t WriteTransaction,
        log: &'t OpLog,
        log_tables: &'t LogTables,
        catalog: &'t Catalog,
        now_ms: u64,
    ) -> Result<Self, StoreError> {
        let opener = TableOpener::new(txn, log, log_tables);
        Ok(WriteContext {
            opener,
            tables: Tables::new(opener),
            catalog,
            now_ms,
            staged: Vec::new(),
            op_catalog: Vec::new(),
            batch_catalog: Vec::new(),
            heads: HashMap::new(),
            pending: HashMap::new(),
            stream_written: false,
            touched: std::cell::Cell::new(false),
            on_commit: Vec::new(),
            on_durable: Vec::new(),
            changed: Vec::new(),
            referred: Vec::new(),
            expiries: Vec::new(),
        })
    }

    // ---- the hook API for other modules ----

    /// The commit time of this batch, in milliseconds since the epoch; stream
    /// records written by this batch carry it.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// The table called `name` as this batch sees it (including tables
    /// created or dropped by earlier operations of the batch).
    pub fn table(&self, name: &str) -> Result<Arc<TableMeta>, StoreError> {
        validate::table_name(name)?;
        let pending = self
            .op_catalog
            .iter()
            .rev()
            .chain(self.batch_catalog.iter().rev());
        for change in pending {
            match change {
                CatalogChange::Put(meta) if meta.name == name => return Ok(meta.clone()),
                CatalogChange::Remove(removed) if removed == name => return Err(not_found()),
                _ => {}
            }
        }
        self.catalog.get(name)
    }

    /// The live item with this key (`key` holds exactly the key attributes),
    /// including changes staged by this operation.
    pub fn get_item(&self, table: &str, key: &Item) -> Result<Option<Item>, StoreError> {
        let meta = self.table(table)?;
        let key = keys::key_param(&meta, key)?;
        Ok(self.current(&meta, &key)?.into_live())
    }

    /// [`WriteContext::get_item`] as the store's codec encodes the item
    /// (`postbox_item::decode_item` reads it): a reader that only writes the
    /// item out, off the writer thread, need not build it here. The row's
    /// bytes are copied as stored unless the item has a change staged in
    /// this operation, or its table keeps TTL or arrival order.
    pub fn get_item_encoded(&self, table: &str, key: &Item) -> Result<Option<Vec<u8>>, StoreError> {
        let meta = self.table(table)?;
        let key = keys::key_param(&meta, key)?;
        let as_stored = meta.arrival.is_none()
            && meta.ttl_attribute.is_none()
            && self.staged_change(&meta, &key).is_none();
        if !as_stored {
            return Ok(self
                .current(&meta, &key)?
                .into_live()
                .map(|i| encode_item(&i)));
        }
        let items = self.tables.items()?;
        let row = items.get(key.as_slice()).map_err(storage_err)?;
        Ok(row.map(|r| row::item_bytes(r.value()).to_vec()))
    }

    /// Stages a put of `item`, validated like PutItem; returns the live item
    /// it replaces.
    pub fn put_item(&mut self, table: &str, item: Item) -> Result<Option<Item>, StoreError> {
        let meta = self.table(table)?;
        let key = keys::item_key(&meta, &item)?;
        if item_size(&item) > validate::MAX_ITEM_SIZE {
            return Err(validate::item_too_large());
        }
        validate::item_shape(&item)?;
        index::check_item(&meta, &item)?;
        let current = self.current(&meta, &key)?;
        let old = current.live().cloned();
        self.stage(&meta, key, current, Some(item));
        Ok(old)
    }

    /// Stages a delete; returns the live item it removes.
    pub fn delete_item(&mut self, table: &str, key: &Item) -> Result<Option<Item>, StoreError> {
        let meta = self.table(table)?;
        let key = keys::key_param(&meta, key)?;
        let current = self.current(&meta, &key)?;
        let old = current.live().cloned();
        self.stage(&meta, key, current, None);
        Ok(old)
    }

    /// Records of `table`'s stream after `after`, as committed before this
    /// batch plus earlier operations of it.
    pub fn read_stream(
        &mut self,
        table: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StreamRecord>, StoreError> {
        let meta = self.table(table)?;
        self.flush_pending()?;
        let (items, images) = (self.tables.items()?, self.tables.stream_images()?);
        stream::read_blocks(
            &**self.tables.stream()?,
            meta.id,
            after,
            limit,
            &mut stream::resolver(&meta, Some(&**items), Some(&**images), None),
            &mut stream::every,
        )
    }

    /// Reader `reader`'s checkpoint on `table`'s stream.
    pub fn checkpoint(&self, table: &str, reader: &str) -> Result<Option<u64>, StoreError> {
        let meta = self.table(table)?;
        Ok(self
            .tables
            .checkpoints()?
            .get((meta.id, reader))
            .map_err(storage_err)?
            .map(|g| g.value()))
    }

    /// Moves reader `reader`'s checkpoint on `table`'s stream; committed with
    /// the batch. Write it last in an operation: it is not staged.
    pub fn set_checkpoint(
        &mut self,
        table: &str,
        reader: &str,
        sequence_number: u64,
    ) -> Result<(), StoreError> {
        let meta = self.table(table)?;
        self.touched.set(true);
        self.tables
            .checkpoints_mut()?
            .insert((meta.id, reader), sequence_number)
            .map_err(storage_err)?;
        Ok(())
    }

    /// Opens tables of the batch's transaction, for modules that keep their
    /// own redb tables in the store file (declared in a `TableSet` the store
    /// was opened with, so the commit log can replay them). The store's own tables must not
    /// be opened here: the context opens them when it first needs them, and
    /// redb refuses a table that is already open. Writes made through it are NOT staged: an
    /// operation must validate everything before its first raw write, so
    /// that it never returns `Err` after writing.
    pub fn transaction(&self) -> TableOpener<'t> {
        self.touched.set(true);
        self.opener
    }

    /// Runs `hook` on the writer thread once this batch has committed,
    /// before the commit log has synced it (a store without a commit log:
    /// once redb's commit returns), and drops it unrun if the batch fails.
    /// It runs whatever this operation returns: it is for an operation's raw
    /// writes ([`WriteContext::transaction`]), which are not staged, and
    /// commit with the batch. Keep it short (the writer waits for it), and
    /// act outside the store only on what is synced (see
    /// [`EmbeddedStore::submit_unsynced`](super::EmbeddedStore::submit_unsynced)).
    pub fn on_commit(&mut self, hook: impl FnOnce() + Send + 'static) {
        self.on_commit.push(Box::new(hook));
    }

    // ---- what the built-in operations use ----

    /// The current version of `meta`'s table; ResourceNotFound if it was
    /// dropped (or dropped and recreated) since the request was validated.
    pub(crate) fn resolve(&self, meta: &TableMeta) -> Result<Arc<TableMeta>, StoreError> {
        let now = self.table(&meta.name)?;
        if now.id != meta.id {
            return Err(not_found());
        }
        Ok(now)
    }

    /// The latest change of `key` this operation staged, if any.
    fn staged_change(&self, meta: &TableMeta, key: &[u8]) -> Option<&Change> {
        self.staged
            .iter()
            .rev()
            .find(|c| c.meta.id == meta.id && c.key == key)
    }

    /// The item under `key`, seeing this operation's staged changes first.
    pub(crate) fn current(&self, meta: &TableMeta, key: &[u8]) -> Result<Current, StoreError> {
        let stored = match self.staged_change(meta, key) {
            Some(change) => change.new.clone(),
            None => read_ops::stored_item(&**self.tables.items()?, meta, key)?,
        };
        let expired = stored
            .as_ref()
            .is_some_and(|item| ttl::is_expired(meta, item, self.now_ms));
        Ok(Current { stored, expired })
    }

    /// Stages the change of `key` from `current` to `new`. An expired item
    /// in the way is first removed as TTL would have removed it.
    pub(crate) fn stage(
        &mut self,
        meta: &Arc<TableMeta>,
        key: Vec<u8>,
        current: Current,
        new: Option<Item>,
    ) {
        self.stage_encoded(meta, key, current, new, None);
    }

    /// [`WriteContext::stage`] with `new` already encoded (`new_bytes` must
    /// be `encode_item` of it).
    pub(crate) fn stage_encoded(
        &mut self,
        meta: &Arc<TableMeta>,
        key: Vec<u8>,
        current: Current,
        new: Option<Item>,
        new_bytes: Option<Vec<u8>>,
    ) {
        let old = match current {
            Current {
                stored: Some(stored),
                expired: true,
            } => {
                self.staged.push(Change {
                    meta: meta.clone(),
                    key: key.clone(),
                    old: Some(stored),
                    new: None,
                    new_bytes: None,
                    ttl_removal: true,
                });
                None
            }
            current => current.stored,
        };
        let new_bytes = new_bytes.filter(|_| new.is_some());
        self.staged.push(Change {
            meta: meta.clone(),
            key,
            old,
            new,
            new_bytes,
            ttl_removal: false,
        });
    }

    /// Stages the TTL removal of the item under `key`, if it is still stored
    /// and expired.
    pub(crate) fn expire(&mut self, meta: &Arc<TableMeta>, key: Vec<u8>) -> Result<(), StoreError> {
        let current = self.current(meta, &key)?;
        if let Current {
            stored: Some(stored),
            expired: true,
        } = current
        {
            self.staged.push(Change {
                meta: meta.clone(),
                key,
                old: Some(stored),
                new: None,
                new_bytes: None,
                ttl_removal: true,
            });
        }
        Ok(())
    }

    /// Keeps `meta`'s indexes in step with one item's change under `key`.
    fn maintain_indexes(
        &mut self,
        meta: &TableMeta,
        key: &[u8],
        old: Option<&Item>,
        new: Option<&Item>,
    ) -> Result<(), StoreError> {
        for index in &meta.indexes {
            let was = old.and_then(|item| index.row_key(item, key));
            let will = new.and_then(|item| index.row_key(item, key));
            if was == will {
                continue;
            }
            let items = self.tables.items_mut()?;
            if let Some(was) = was {
                items.remove(was.as_slice()).map_err(storage_err)?;
            }
            if let Some(will) = will {
                items.insert(will.as_slice(), key).map_err(storage_err)?;
            }
        }
        Ok(())
    }

    // ---- the writer's side ----

    /// Ends one operation: applies its staged changes when it succeeded,
    /// drops them when it failed.
    pub(crate) fn end_op(&mut self, succeeded: bool) -> Result<(), StoreError> {
        let staged = std::mem::take(&mut self.staged);
        if !succeeded {
            self.op_catalog.clear();
            return Ok(());
        }
        let changes = std::mem::take(&mut self.op_catalog);
        self.batch_catalog.extend(changes);
        for change in staged {
            self.apply(change)?;
        }
        Ok(())
    }

    /// Writes the stream heads and hands back what to publish after commit.
    pub(crate) fn finish(mut self) -> Result<Finished, StoreError> {
        self.flush_pending()?;
        if self.touched.get() {
            for (id, head) in std::mem::take(&mut self.heads) {
                self.tables
                    .heads_mut()?
                    .insert(id, head)
                    .map_err(storage_err)?;
            }
        }
        let mut changed = self.changed;
        for change in &self.batch_catalog {
            if let CatalogChange::Put(meta) = change
                && !changed.contains(&meta.id)
            {
                changed.push(meta.id);
            }
        }
        let mut on_commit = self.on_commit;
        if !self.expiries.is_empty() {
            // After the commit, so a sweep that reads the rows before it
            // began (`ArrivalIndex::begin_sweep`) sees them.
            let expiries = self.expiries;
            on_commit.push(Box::new(move || {
                for (index, place, at) in expiries {
                    index.note_expiry(place, at);
                }
            }));
        }
        Ok(Finished {
            catalog: self.batch_catalog,
            stream_written: self.stream_written,
            touched: self.touched.get(),
            on_commit,
            on_durable: self.on_durable,
            changed,
            referred: self.referred,
        })
    }

    fn apply(&mut self, change: Change) -> Result<(), StoreError> {
        let Change {
            meta,
            key,
            old,
            new,
            new_bytes,
            ttl_removal,
        } = change;
        if old == new {
            // DynamoDB writes no stream record for a write that changes nothing.
            return Ok(());
        }
        self.touched.set(true);
        if !self.changed.contains(&meta.id) {
            self.changed.push(meta.id);
        }
        let new_bytes = new
            .as_ref()
            .map(|item| new_bytes.unwrap_or_else(|| encode_item(item)));
        // This change's record, if the table has a stream, and whether it
        // refers to the new row instead of copying it.
        let record_seq = match meta.stream_view_type {
            Some(_) => Some(self.head(meta.id)?.0 + 1),
            None => None,
        };
        let by_ref = meta
            .stream_view_type
            .is_some_and(|view| stream::refers_to_row(view, old.as_ref(), new.as_ref()));
        let marked = match (&new_bytes, record_seq) {
            (Some(bytes), Some(seq)) if by_ref => Some(row::referred(seq, bytes)),
            _ => None,
        };
        // Where the row is: under its key, or its place in arrival order.
        let place = match &meta.arrival {
            None => None,
            Some(index) => Some(self.place(&meta, index, &key, old.is_some())?),
        };
        let at = place.as_ref().map_or(key.as_slice(), |p| &p[..]);
        let items = self.tables.items_mut()?;
        let replaced = match marked.as_deref().or(new_bytes.as_deref()) {
            Some(value) => items.insert(at, value),
            None => items.remove(at),
        }
        .map_err(storage_err)?
        .and_then(|old_row| match row::split(old_row.value()) {
            (Some(seq), image) => Some((seq, image.to_vec())),
            (None, _) => None,
        });
        // A partition whose last row this deletes gives up its place once
        // the delete is durable.
        if let (Some(index), Some(at), None) = (&meta.arrival, &place, &new)
            && let Some(emptied) = arrival::emptied(&**self.tables.items()?, meta.id, at)?
        {
            let (index, partition) = (index.clone(), key[..arrival::partition_len(&key)].to_vec());
            self.on_durable
                .push(Box::new(move || index.forget(&partition, emptied)));
        }
        // The row just replaced was one a retained insert record refers to:
        // keep its image for that record.
        if let Some((seq, image)) = replaced
            && seq > self.head(meta.id)?.1
        {
            self.tables
                .stream_images_mut()?
                .insert((meta.id, seq), image.as_slice())
                .map_err(storage_err)?;
        }
        if !meta.indexes.is_empty() {
            self.maintain_indexes(&meta, &key, old.as_ref(), new.as_ref())?;
        }
        if meta.ttl_attribute.is_some() {
            let was = old.as_ref().and_then(|i| ttl::expires_at(&meta, i));
            let will = new.as_ref().and_then(|i| ttl::expires_at(&meta, i));
            // An update that keeps the expiry (a claim completing) leaves
            // the index row as it is.
            if was != will {
                if let Some(at) = was {
                    // In arrival order, only a file's older rows have one.
                    self.tables
                        .ttl_index_mut()?
                        .remove((meta.id, at, key.as_slice()))
                        .map_err(storage_err)?;
                }
                if let Some(at) = will {
                    match (&meta.arrival, place.as_deref()) {
                        // Noted by block of places once the batch commits
                        // (see `arrival`).
                        (Some(index), Some(row)) => {
                            let place = arrival::place_of(row).ok_or_else(|| {
                                StoreError::Storage(format!(
                                    "table {}: a row in arrival order without a place",
                                    meta.name
                                ))
                            })?;
                            self.expiries.push((index.clone(), place, at));
                        }
                        _ => {
                            self.tables
                                .ttl_index_mut()?
                                .insert((meta.id, at, key.as_slice()), ())
                                .map_err(storage_err)?;
                        }
                    }
                }
            }
        }
        if let Some(view) = meta.stream_view_type {
            let new_image = new.as_ref().zip(new_bytes.as_deref());
            let record = stream::encode_change(
                &meta,
                view,
                old.as_ref(),
                new_image,
                ttl_removal,
                self.now_ms,
                by_ref,
            );
            let sequence_number = record_seq.expect("a table with a stream");
            self.heads.get_mut(&meta.id).expect("loaded by head()").0 = sequence_number;
            let (_, block) = self
                .pending
                .entry(meta.id)
                .or_insert_with(|| (sequence_number, Vec::new()));
            stream::block_append(block, &record);
            self.stream_written = true;
            // A record that refers to its row: its reader can have the
            // item as it is here, once the batch has committed.
            if by_ref && let Some(item) = new {
                self.referred.push((meta.id, sequence_number, item));
            }
        }
        Ok(())
    }

    /// Where `key`'s row is in arrival order: the stored row's key if there
    /// is one (`stored`), else where a new one goes.
    fn place(
        &mut self,
        meta: &Arc<TableMeta>,
        index: &Arc<arrival::ArrivalIndex>,
        key: &[u8],
        stored: bool,
    ) -> Result<Vec<u8>, StoreError> {
        let items = &**self.tables.items()?;
        if !stored {
            return arrival::place_new(items, meta, index, key);
        }
        match arrival::locate(items, meta, index, key)? {
            Some(at) => Ok(at),
            None => Err(StoreError::Storage(format!(
                "table {}: an item being changed has no row in arrival order",
                meta.name
            ))),
        }
    }

    /// Writes the stream records gathered so far as one block per table.
    fn flush_pending(&mut self) -> Result<(), StoreError> {
        for (id, (first_seq, block)) in std::mem::take(&mut self.pending) {
            self.tables
                .stream_mut()?
                .insert((id, first_seq), block.as_slice())
                .map_err(storage_err)?;
        }
        Ok(())
    }

    /// The stream head of table `id`, loaded into the batch's cache.
    fn head(&mut self, id: u32) -> Result<(u64, u64), StoreError> {
        match self.heads.entry(id) {
            Entry::Occupied(e) => Ok(*e.get()),
            Entry::Vacant(e) => {
                let head = self
                    .tables
                    .heads()?
                    .get(id)
                    .map_err(storage_err)?
                    .map_or((0, 0), |g| g.value());
                Ok(*e.insert(head))
            }
        }
    }
}
