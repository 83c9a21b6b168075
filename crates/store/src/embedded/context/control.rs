//! The table control plane inside a batch: creating, dropping and
//! changing tables (metadata, TTL, the stream, secondary indexes and their
//! backfill) and trimming streams. Item changes are staged and applied in
//! the parent module; these write the file directly, so each validates
//! before its first write.

use std::sync::Arc;

use redb::ReadableTable;

use crate::StoreError;
use crate::api::CreateTableInput;

use super::super::arrival::{self, ArrivalIndex};
use super::super::catalog::{CatalogChange, TableMeta};
use super::super::tables::{FORMAT_ARRIVAL, FORMAT_KEY, FORMAT_KEY_ORDER_ONLY, NEXT_TABLE_ID};
use super::super::{keys, row, storage_err, stream, ttl, validate};
use super::WriteContext;

impl WriteContext<'_> {
    /// Creates a table (validated by the caller except for existence).
    pub(crate) fn create_table(
        &mut self,
        input: &CreateTableInput,
    ) -> Result<Arc<TableMeta>, StoreError> {
        validate::table_name(&input.table_name)?;
        if self.table(&input.table_name).is_ok() {
            return Err(StoreError::ResourceInUse(format!(
                "Table already exists: {}",
                input.table_name
            )));
        }
        let id = self.next_table_id()?;
        let mut meta = TableMeta::from_create(input, id, self.now_ms)?;
        if self.catalog.in_arrival_order(&meta)? {
            meta.arrival_order = true;
            meta.arrival = Some(Arc::new(ArrivalIndex::new()));
            self.raise_format(FORMAT_ARRIVAL)?;
        }
        let meta = Arc::new(meta);
        self.take_table_ids(id, 1 + meta.indexes.len() as u32)?;
        self.write_meta(&meta)?;
        Ok(meta)
    }

    /// Drops a table with its items, TTL index, stream and checkpoints.
    pub(crate) fn delete_table(&mut self, meta: &TableMeta) -> Result<(), StoreError> {
        let id = meta.id;
        self.touched.set(true);
        self.delete_rows(id)?;
        for index in &meta.indexes {
            self.delete_rows(index.id)?;
        }
        let t = &mut self.tables;
        t.ttl_index_mut()?
            .delete_range((id, 0, &[][..])..(id + 1, 0, &[][..]))
            .map_err(storage_err)?;
        self.delete_stream(id)?;
        let t = &mut self.tables;
        t.heads_mut()?.remove(id).map_err(storage_err)?;
        t.meta_mut()?
            .remove(meta.name.as_str())
            .map_err(storage_err)?;
        self.heads.remove(&id);
        self.pending.remove(&id);
        self.op_catalog
            .push(CatalogChange::Remove(meta.name.clone()));
        Ok(())
    }

    /// Replaces a table's metadata (UpdateTable, tags). With `stream_off`,
    /// the stream's records, images and readers' checkpoints go with it
    /// (the record sequence keeps counting, so a later stream's numbers
    /// are higher).
    pub(crate) fn replace_meta(
        &mut self,
        meta: TableMeta,
        stream_off: bool,
    ) -> Result<Arc<TableMeta>, StoreError> {
        self.touched.set(true);
        if stream_off {
            self.delete_stream(meta.id)?;
        }
        let meta = Arc::new(meta);
        self.write_meta(&meta)?;
        Ok(meta)
    }

    /// Deletes every row under id `id` (a table's items or an index's rows).
    fn delete_rows(&mut self, id: u32) -> Result<(), StoreError> {
        let prefix = keys::table_prefix(id);
        let end = keys::prefix_end(&prefix);
        self.tables
            .items_mut()?
            .delete_range(prefix.as_slice()..end.as_slice())
            .map_err(storage_err)?;
        Ok(())
    }

    /// UpdateTable's index changes from `meta` to `next`: ids for the
    /// indexes `next` adds (their backfill starts empty and runs in
    /// chunks, see [`WriteContext::backfill`]), and the rows of the ones
    /// it drops deleted.
    pub(crate) fn change_indexes(
        &mut self,
        meta: &TableMeta,
        next: &mut TableMeta,
    ) -> Result<(), StoreError> {
        for gone in meta
            .indexes
            .iter()
            .filter(|i| next.index(&i.name).is_none())
        {
            self.touched.set(true);
            self.delete_rows(gone.id)?;
        }
        for index in next.indexes.iter_mut().filter(|i| i.id == 0) {
            let id = self.next_table_id()?;
            self.take_table_ids(id, 1)?;
            index.id = id;
        }
        Ok(())
    }

    /// Records that the file now needs a build that reads `format`.
    pub(crate) fn raise_format(&mut self, format: u64) -> Result<(), StoreError> {
        let system = self.tables.system_mut()?;
        let now = system
            .get(FORMAT_KEY)
            .map_err(storage_err)?
            .map_or(FORMAT_KEY_ORDER_ONLY, |g| g.value());
        if now < format {
            system.insert(FORMAT_KEY, format).map_err(storage_err)?;
            // Alone in its batch (a file's format raised at open), it is
            // still committed.
            self.touched.set(true);
        }
        Ok(())
    }

    /// The next unused id of a table or index.
    fn next_table_id(&self) -> Result<u32, StoreError> {
        Ok(self
            .tables
            .system()?
            .get(NEXT_TABLE_ID)
            .map_err(storage_err)?
            .map_or(1, |g| g.value() as u32))
    }

    /// Marks `count` ids from `first` (the next unused one) as used.
    fn take_table_ids(&mut self, first: u32, count: u32) -> Result<(), StoreError> {
        self.tables
            .system_mut()?
            .insert(NEXT_TABLE_ID, first as u64 + count as u64)
            .map_err(storage_err)?;
        Ok(())
    }

    /// Indexes up to `max` items of `meta`'s table after each CREATING
    /// index's cursor, moving the cursor; an index whose cursor reaches the
    /// end of the table becomes ACTIVE. Writes meanwhile keep every index
    /// row in step (`apply`), so an item indexed here and changed later, or
    /// changed before the backfill reached it, ends up indexed once, as it
    /// is. Returns whether any index is still CREATING.
    pub(crate) fn backfill(&mut self, meta: &TableMeta, max: usize) -> Result<bool, StoreError> {
        let meta = self.resolve(meta)?;
        let mut next = (*meta).clone();
        let prefix = keys::table_prefix(meta.id);
        let end = keys::prefix_end(&prefix);
        let mut creating = false;
        for index in next.indexes.iter_mut() {
            let Some(through) = index.backfilled_through.clone() else {
                continue;
            };
            let lo = if through.is_empty() {
                std::ops::Bound::Included(prefix.as_slice())
            } else {
                std::ops::Bound::Excluded(through.as_slice())
            };
            let mut rows = Vec::new();
            for row in self
                .tables
                .items()?
                .range::<&[u8]>((lo, std::ops::Bound::Excluded(end.as_slice())))
                .map_err(storage_err)?
            {
                let (k, v) = row.map_err(storage_err)?;
                rows.push((k.value().to_vec(), row::item(v.value())?));
                if rows.len() == max {
                    break;
                }
            }
            let done = rows.len() < max;
            if let Some((last, _)) = rows.last() {
                index.backfilled_through = Some(last.clone());
            }
            for (key, item) in &rows {
                if let Some(row_key) = index.row_key(item, key) {
                    self.tables
                        .items_mut()?
                        .insert(row_key.as_slice(), key.as_slice())
                        .map_err(storage_err)?;
                }
            }
            if done {
                index.backfilled_through = None;
            } else {
                creating = true;
            }
        }
        if next != *meta {
            self.replace_meta(next, false)?;
        }
        Ok(creating)
    }
    /// Deletes table `id`'s stream records, their images and its readers'
    /// checkpoints.
    fn delete_stream(&mut self, id: u32) -> Result<(), StoreError> {
        let t = &mut self.tables;
        t.stream_mut()?
            .delete_range((id, 0)..=(id, u64::MAX))
            .map_err(storage_err)?;
        t.stream_images_mut()?
            .delete_range((id, 0)..=(id, u64::MAX))
            .map_err(storage_err)?;
        t.checkpoints_mut()?
            .delete_range((id, "")..(id + 1, ""))
            .map_err(storage_err)?;
        Ok(())
    }

    /// Turns TTL on (with `attribute`) or off, rebuilding the TTL index of
    /// the table from its items.
    pub(crate) fn set_ttl(
        &mut self,
        meta: &TableMeta,
        attribute: Option<String>,
    ) -> Result<Arc<TableMeta>, StoreError> {
        let id = meta.id;
        let updated = Arc::new(TableMeta {
            ttl_attribute: attribute,
            ..meta.clone()
        });
        self.touched.set(true);
        self.tables
            .ttl_index_mut()?
            .delete_range((id, 0, &[][..])..(id + 1, 0, &[][..]))
            .map_err(storage_err)?;
        // A table in arrival order notes its expiries by place instead
        // (see `arrival`), once this commits.
        let mut by_place = Vec::new();
        if updated.ttl_attribute.is_some() {
            let prefix = keys::table_prefix(id);
            let end = keys::prefix_end(&prefix);
            let mut entries = Vec::new();
            for row in self
                .tables
                .items()?
                .range(prefix.as_slice()..end.as_slice())
                .map_err(storage_err)?
            {
                let (k, v) = row.map_err(storage_err)?;
                if updated.arrival_order {
                    if let (Some(place), Some(at)) = (
                        arrival::place_of(k.value()),
                        arrival::expiry_of_row(&updated, v.value())?,
                    ) {
                        by_place.push((place, at));
                    }
                    continue;
                }
                let item = row::item(v.value())?;
                if let Some(at) = ttl::expires_at(&updated, &item) {
                    entries.push((at, k.value().to_vec()));
                }
            }
            for (at, key) in entries {
                self.tables
                    .ttl_index_mut()?
                    .insert((id, at, key.as_slice()), ())
                    .map_err(storage_err)?;
            }
        }
        if let Some(index) = &updated.arrival {
            let index = index.clone();
            self.on_commit(move || index.reset_expiries(&by_place));
        }
        self.write_meta(&updated)?;
        Ok(updated)
    }

    /// Removes up to `max` of the oldest records of `meta`'s stream created
    /// before `cutoff_ms`; returns how many.
    pub(crate) fn trim_stream(
        &mut self,
        meta: &TableMeta,
        cutoff_ms: u64,
        max: usize,
    ) -> Result<usize, StoreError> {
        let id = meta.id;
        let (_, trimmed) = self.head(id)?;
        let mut doomed = Vec::new();
        let mut removed = 0;
        for row in self
            .tables
            .stream()?
            .range((id, trimmed.saturating_add(1))..=(id, u64::MAX))
            .map_err(storage_err)?
        {
            let (k, v) = row.map_err(storage_err)?;
            let first_seq = k.value().1;
            let (time, len) = stream::block_time_and_len(first_seq, v.value());
            if time >= cutoff_ms || removed >= max {
                break;
            }
            doomed.push((first_seq, first_seq + len - 1));
            removed += len as usize;
        }
        for (first_seq, _) in &doomed {
            self.touched.set(true);
            self.tables
                .stream_mut()?
                .remove((id, *first_seq))
                .map_err(storage_err)?;
        }
        if let Some(&(_, last)) = doomed.last() {
            self.heads.get_mut(&id).expect("loaded by head()").1 = last;
            // The images saved for the records just trimmed.
            self.tables
                .stream_images_mut()?
                .delete_range((id, 0)..=(id, last))
                .map_err(storage_err)?;
        }
        Ok(removed)
    }

    fn write_meta(&mut self, meta: &Arc<TableMeta>) -> Result<(), StoreError> {
        let json = serde_json::to_string(meta.as_ref()).expect("metadata serialises");
        self.touched.set(true);
        self.tables
            .meta_mut()?
            .insert(meta.name.as_str(), json.as_str())
            .map_err(storage_err)?;
        self.op_catalog.push(CatalogChange::Put(meta.clone()));
        Ok(())
    }
}
