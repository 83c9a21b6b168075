//! Tables whose rows are kept in arrival order.
//!
//! Keyed by the item's key, every new row of a table with random keys
//! (Idempotency-Keys, UUIDs) lands in a random leaf of the B-tree: its
//! commit copies a 4 KB page, the next checkpoint writes it again, and once
//! the table outgrows the page cache the leaf is read from the file first.
//! A table named in `EmbeddedOptions::arrival_tables` (a partition key only,
//! no stream, no secondary index) stores its rows under
//! `table id ‖ arrival number (u64 BE)` instead, so an insert lands at the
//! table's right edge, and finds them through an [`ArrivalIndex`] in memory:
//! a hash of the item's key to the arrival numbers holding it, about 20-40
//! bytes a row, rebuilt from the rows at open. A table created before keeps
//! the layout it was created with (`TableMeta::arrival_order`).
//!
//! The index only proposes: every candidate row is read and its key
//! compared, so a hash collision costs one more read and an entry whose row
//! is gone costs nothing. The writer adds an entry when it stores the row,
//! before the commit (a reader of an earlier snapshot finds no row there),
//! and drops one when the row's delete is durable (until then, a reader of
//! an earlier snapshot still finds the row). Changes of a row keep its
//! place. The commit log records the rows under their places, so a replay
//! rebuilds the same file, and the index is built from the file.
//! `tests/arrival.rs` runs the same operations on a table of each layout
//! and compares every answer, across reopening and replaying the log.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::Mutex;

use postbox_item::{AttributeValue, Item, RawValueRef, visit_encoded_item_unchecked};
use redb::ReadableTable;

use crate::StoreError;

use super::catalog::TableMeta;
use super::{keys, row, storage_err};

/// Where the row with arrival number `seq` of table `id` is stored.
pub(crate) fn row_key(id: u32, seq: u64) -> [u8; 12] {
    let mut out = [0; 12];
    out[..4].copy_from_slice(&id.to_be_bytes());
    out[4..].copy_from_slice(&seq.to_be_bytes());
    out
}

/// The arrival number of a row stored under `key` (see [`row_key`]).
fn seq_of(key: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(key.get(4..12)?.try_into().ok()?))
}

/// A hash of an item key to the arrival numbers of the rows that may hold
/// it. Shared by the writer (which changes it) and readers.
pub struct ArrivalIndex {
    /// None in tests that make every key collide.
    hasher: Option<RandomState>,
    state: Mutex<Places>,
}

#[derive(Default)]
struct Places {
    /// One place per hash: nearly every key.
    first: HashMap<u64, u64, BuildHasherDefault<Prehashed>>,
    /// Further places of a hash (a collision, or a row re-inserted before
    /// its delete was durable).
    more: HashMap<u64, Vec<u64>, BuildHasherDefault<Prehashed>>,
    /// The next arrival number.
    next: u64,
}

/// The keys of [`Places`] are hashes already.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

impl ArrivalIndex {
    /// An empty index, numbering rows from 1.
    pub(crate) fn new() -> ArrivalIndex {
        ArrivalIndex::with_hasher(Some(RandomState::new()))
    }

    /// An index whose keys all have one hash, to test collisions.
    #[cfg(test)]
    fn colliding() -> ArrivalIndex {
        ArrivalIndex::with_hasher(None)
    }

    fn with_hasher(hasher: Option<RandomState>) -> ArrivalIndex {
        ArrivalIndex {
            hasher,
            state: Mutex::new(Places {
                next: 1,
                ..Places::default()
            }),
        }
    }

    /// The index of `meta`'s rows in `items`, read in one pass.
    pub(crate) fn build<T>(items: &T, meta: &TableMeta) -> Result<ArrivalIndex, StoreError>
    where
        T: ReadableTable<&'static [u8], &'static [u8]>,
    {
        let index = ArrivalIndex::new();
        let prefix = keys::table_prefix(meta.id);
        let end = keys::prefix_end(&prefix);
        {
            let mut places = index.state.lock().expect("arrival index");
            for row in items
                .range(prefix.as_slice()..end.as_slice())
                .map_err(storage_err)?
            {
                let (k, v) = row.map_err(storage_err)?;
                let seq = seq_of(k.value()).ok_or_else(|| damaged(meta))?;
                let key = key_of_row(meta, v.value())?;
                places.add(index.hash(&key), seq);
                places.next = places.next.max(seq + 1);
            }
        }
        Ok(index)
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.as_ref().map_or(0, |h| h.hash_one(key))
    }

    /// Numbers a new row for `key` and records its place.
    pub(crate) fn insert(&self, key: &[u8]) -> u64 {
        let hash = self.hash(key);
        let mut places = self.state.lock().expect("arrival index");
        let seq = places.next;
        places.next += 1;
        places.add(hash, seq);
        seq
    }

    /// Forgets the place `seq` of `key` (its row was deleted, durably).
    pub(crate) fn forget(&self, key: &[u8], seq: u64) {
        let hash = self.hash(key);
        self.state.lock().expect("arrival index").remove(hash, seq);
    }

    /// The places that may hold `key`, newest first.
    fn candidates(&self, key: &[u8]) -> (Option<u64>, Vec<u64>) {
        let hash = self.hash(key);
        let places = self.state.lock().expect("arrival index");
        let more = match places.more.is_empty() {
            true => Vec::new(),
            false => places.more.get(&hash).cloned().unwrap_or_default(),
        };
        (places.first.get(&hash).copied(), more)
    }

    /// How many places the index holds.
    pub(crate) fn len(&self) -> usize {
        let places = self.state.lock().expect("arrival index");
        places.first.len() + places.more.values().map(Vec::len).sum::<usize>()
    }
}

impl Places {
    fn add(&mut self, hash: u64, seq: u64) {
        match self.first.entry(hash) {
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(seq);
            }
            std::collections::hash_map::Entry::Occupied(_) => {
                self.more.entry(hash).or_default().push(seq);
            }
        }
    }

    fn remove(&mut self, hash: u64, seq: u64) {
        if self.first.get(&hash) == Some(&seq) {
            match self.more.get_mut(&hash).and_then(Vec::pop) {
                Some(next) => {
                    self.first.insert(hash, next);
                }
                None => {
                    self.first.remove(&hash);
                }
            }
        } else if let Some(more) = self.more.get_mut(&hash) {
            more.retain(|s| *s != seq);
        }
        if self.more.get(&hash).is_some_and(Vec::is_empty) {
            self.more.remove(&hash);
        }
    }
}

/// Compared by identity: a table's metadata and its copies share one index.
impl PartialEq for ArrivalIndex {
    fn eq(&self, other: &ArrivalIndex) -> bool {
        std::ptr::eq(self, other)
    }
}

impl std::fmt::Debug for ArrivalIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArrivalIndex")
            .field("places", &self.len())
            .finish()
    }
}

/// The row of `meta`'s table holding the item with key `key` (encoded as
/// `keys::encode` does), as `items` has it: its arrival number and item.
pub(crate) fn find<T>(
    items: &T,
    meta: &TableMeta,
    index: &ArrivalIndex,
    key: &[u8],
) -> Result<Option<(u64, Item)>, StoreError>
where
    T: ReadableTable<&'static [u8], &'static [u8]>,
{
    let (first, more) = index.candidates(key);
    for seq in more.into_iter().rev().chain(first) {
        let Some(bytes) = items.get(&row_key(meta.id, seq)[..]).map_err(storage_err)? else {
            continue;
        };
        if key_of_row(meta, bytes.value())? == key {
            return Ok(Some((seq, row::item(bytes.value())?)));
        }
    }
    Ok(None)
}

/// The item key of a stored row, read without building the item.
fn key_of_row(meta: &TableMeta, value: &[u8]) -> Result<Vec<u8>, StoreError> {
    let name = meta.partition_key.name.as_bytes();
    let mut pk = None;
    visit_encoded_item_unchecked(row::item_bytes(value), |n, v| {
        if n == name {
            pk = Some(v);
        }
    })?;
    let pk = match pk {
        Some(RawValueRef::S(s)) => AttributeValue::S(
            std::str::from_utf8(s)
                .map_err(|_| damaged(meta))?
                .to_owned(),
        ),
        Some(RawValueRef::Value(v)) => v.to_value()?,
        None => return Err(damaged(meta)),
    };
    Ok(keys::encode(meta, &pk, None))
}

fn damaged(meta: &TableMeta) -> StoreError {
    StoreError::Storage(format!(
        "table {} keeps its rows in arrival order, but a row is not one of its items",
        meta.name
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_of_one_hash_are_all_kept_and_dropped_one_by_one() {
        let mut places = Places::default();
        places.add(7, 1);
        places.add(7, 2);
        places.add(7, 3);
        places.add(8, 4);
        places.remove(7, 1);
        assert_eq!(places.first.get(&7), Some(&3));
        assert_eq!(places.more.get(&7), Some(&vec![2]));
        places.remove(7, 2);
        assert!(places.more.is_empty());
        places.remove(7, 3);
        assert_eq!(places.first.len(), 1);
        places.remove(8, 9);
        assert_eq!(places.first.get(&8), Some(&4));
    }

    #[test]
    fn colliding_keys_are_told_apart_by_their_rows() {
        use crate::api::CreateTableInput;
        use postbox_item::AttributeValue;
        use redb::ReadableDatabase;

        let db = redb::Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .unwrap();
        let input = CreateTableInput::keyed_by("rows", "pk");
        let meta = TableMeta::from_create(&input, 3, 0).unwrap();
        let index = ArrivalIndex::colliding();
        let key_of = |pk: &str| keys::encode(&meta, &AttributeValue::s(pk), None);
        let txn = db.begin_write().unwrap();
        {
            let mut items = txn.open_table(super::super::tables::ITEMS).unwrap();
            for pk in ["a", "b", "c"] {
                let mut item = Item::new();
                item.insert("pk".into(), AttributeValue::s(pk));
                let seq = index.insert(&key_of(pk));
                let bytes = postbox_item::encode_item(&item);
                items
                    .insert(&row_key(meta.id, seq)[..], bytes.as_slice())
                    .unwrap();
            }
        }
        txn.commit().unwrap();
        let read = db.begin_read().unwrap();
        let items = read.open_table(super::super::tables::ITEMS).unwrap();
        for (pk, seq) in [("a", 1), ("b", 2), ("c", 3)] {
            let (found, item) = find(&items, &meta, &index, &key_of(pk)).unwrap().unwrap();
            assert_eq!((found, item.get("pk")), (seq, Some(&AttributeValue::s(pk))));
        }
        assert!(find(&items, &meta, &index, &key_of("d")).unwrap().is_none());
        // Forgetting one place keeps the others; a rebuilt index finds all.
        index.forget(&key_of("b"), 2);
        assert!(find(&items, &meta, &index, &key_of("b")).unwrap().is_none());
        assert!(find(&items, &meta, &index, &key_of("c")).unwrap().is_some());
        let rebuilt = ArrivalIndex::build(&items, &meta).unwrap();
        assert_eq!(rebuilt.len(), 3);
        assert_eq!(rebuilt.insert(&key_of("e")), 4);
    }

    #[test]
    fn row_keys_sort_by_table_then_arrival() {
        assert!(row_key(1, 2) < row_key(1, 3));
        assert!(row_key(1, u64::MAX) < row_key(2, 0));
        assert_eq!(seq_of(&row_key(5, 42)), Some(42));
    }
}
