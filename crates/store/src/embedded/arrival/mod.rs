//! Tables whose partitions are kept in arrival order.
//!
//! Keyed by the item's key, every new row of a table with random partition
//! keys (Idempotency-Keys, UUIDs) lands in a random leaf of the B-tree: its
//! commit copies a 4 KB page, the next checkpoint writes it again, and once
//! the table outgrows the page cache the leaf is read from the file first.
//! A table created in arrival order (named in
//! `EmbeddedOptions::arrival_tables`, or tagged [`TAG`] = `arrival`; no
//! stream, no secondary index) gives each partition a *place*, a number
//! taken in order when its first item arrives, and stores its items under
//! `table id ‖ place (u64 BE) ‖ sort key`: a new partition lands at the
//! table's right edge, and a partition's items stay together in sort-key
//! order, so Query reads them as before. An [`ArrivalIndex`] in memory maps
//! a hash of the partition key to its places (about 20-40 bytes a
//! partition), built from the rows or read from its snapshot at open (see
//! below). A table keeps the layout it
//! was created with (`TableMeta::arrival_order`).
//!
//! The index only proposes: every candidate row is read and its key
//! compared, so a hash collision costs one more read and a place whose rows
//! are gone costs nothing. The writer adds a place when it stores a new
//! partition's first row, before the commit (a reader of an earlier
//! snapshot finds no row there), and drops one once the delete of its last
//! row is durable (until then, a reader of an earlier snapshot still finds
//! the row; one that looks the key up only after that finds the durable
//! state: no item). A partition emptied and written again takes a new
//! place. The commit log records rows under their places, so a replay
//! rebuilds the same file, and the index is built from the file.
//!
//! Such a table's expiry times (TTL) are not kept in `ttl_index`: its rows
//! come in arrival order, and so, for tables like the Idempotency-Keys
//! (every item expiring a fixed time after it arrived), do their expiries.
//! The index keeps instead, per block of [`EXPIRY_BLOCK`] places, the
//! earliest expiry second of an item written there, noted when the write
//! commits and built again at open. The sweeper reads the rows of
//! each block whose earliest expiry has passed, deletes what has expired
//! and notes the block's next expiry (`ttl::expire_arrival`). A note can
//! only be early (the item changed or went since), which costs a read of
//! the block's rows, never a missed expiry. Each keyed emit so writes one
//! row fewer, and the commit copies no tail page of `ttl_index`.
//!
//! A clean close keeps each index in the file (`arrival_snapshots`, see
//! [`save_snapshots`] in `snapshot`), and the next open reads it back instead of every
//! row of the table, then removes it before anything else is written: a
//! snapshot found at an open describes the file exactly. An open after a
//! crash, or after a commit the snapshot does not know of (the commit log's
//! applied record moved), rebuilds the index from the rows as before. The
//! index hashes with SipHash-1-3 under random keys chosen when the index is
//! first built and kept in its snapshot.
//!
//! `tests/arrival.rs` runs the same operations on a table of each layout
//! and compares every answer, across reopenings, and kills a writing
//! process to check what the replay and the rebuilt index give back.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::Mutex;

use postbox_item::{AttributeValue, Item, RawValueRef, visit_encoded_item_unchecked};
use redb::ReadableTable;
use siphasher::sip::SipHasher13;

use crate::StoreError;
use crate::shards::ShardedMap;

use super::catalog::TableMeta;
use super::{keys, row, storage_err};

mod snapshot;

pub(crate) use snapshot::{Saved, save_snapshots, take_snapshots};

/// The tag that asks CreateTable for arrival order (value [`ARRIVAL`]) or
/// for key order ([`KEY`]).
pub const TAG: &str = "postbox:row-order";
/// [`TAG`]'s value for arrival order.
pub(crate) const ARRIVAL: &str = "arrival";
/// [`TAG`]'s value for key order.
pub(crate) const KEY: &str = "key";

/// Where the item of table `id` whose partition has place `place` and
/// whose sort key encodes as `sort` is stored (`sort` is empty in a table
/// without a sort key).
pub(crate) fn row_key(id: u32, place: u64, sort: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + sort.len());
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&place.to_be_bytes());
    out.extend_from_slice(sort);
    out
}

/// The place of a row stored under `key` (see [`row_key`]).
pub(crate) fn place_of(key: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(key.get(4..12)?.try_into().ok()?))
}

/// How many bytes of an item key (`keys::encode`) are its table id and
/// partition key: the partition key's encoding ends at its first 0x00 0x01
/// (a 0x00 in the value is escaped as 0x00 0xFF).
pub(crate) fn partition_len(key: &[u8]) -> usize {
    let mut i = 5;
    while i + 1 < key.len() {
        if key[i] == 0 {
            if key[i + 1] == 1 {
                return i + 2;
            }
            i += 2;
        } else {
            i += 1;
        }
    }
    key.len()
}

/// Places per block of [`Expiries`].
pub(crate) const EXPIRY_BLOCK: u64 = 256;

/// A hash of a partition key to the places that may hold the partition,
/// and the earliest expiry of each block of places. Shared by the writer
/// (which changes it), readers and the TTL sweeper.
pub struct ArrivalIndex {
    /// The SipHash keys of partition-key hashes, kept in the snapshot;
    /// None in tests that make every key collide.
    keys: Option<(u64, u64)>,
    /// Whether the index was read from a snapshot rather than built from
    /// the table's rows.
    restored: bool,
    state: Mutex<Places>,
    expiries: Mutex<Expiries>,
    /// Held through a sweep of the table's expiries: one at a time (the
    /// background sweeper and `sweep_now`), as [`Expiries::sweeping`]
    /// follows one.
    sweep: Mutex<()>,
}

/// When the items of each block of places expire, as far as the sweeper
/// needs to know.
#[derive(Default)]
struct Expiries {
    /// Block (place / [`EXPIRY_BLOCK`]) -> the earliest expiry second noted
    /// for an item in it since the sweeper last read the block. A block
    /// without an expiring item has no entry.
    earliest: BTreeMap<u64, u64>,
    /// The same entries as (second, block): which blocks are due is read
    /// from the front, not from a walk over every block (a day of keys at
    /// 1,000 emits/s is 337,500 blocks, 2.5 ms of walk under this lock,
    /// which the writer takes too, at the end of every sweep).
    by_time: BTreeSet<(u64, u64)>,
    /// Entries `begin_sweep` has looked at (a test's measure of its walk).
    looked_at: usize,
    /// The block the sweeper is reading, and the earliest expiry noted in
    /// it since the sweeper began (a write its read may not have seen).
    sweeping: Option<(u64, u64)>,
}

#[derive(Default)]
struct Places {
    /// One place per hash: nearly every key.
    /// Sharded: it holds a place per partition and grows on the writer.
    first: ShardedMap<u64, u64, BuildHasherDefault<Prehashed>>,
    /// Further places of a hash (a collision, or a partition written again
    /// before the delete that emptied it was durable).
    more: HashMap<u64, Vec<u64>, BuildHasherDefault<Prehashed>>,
    /// The next place.
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
    /// An empty index, numbering places from 1.
    pub(crate) fn new() -> ArrivalIndex {
        // Random keys, as the standard library's hash maps draw theirs.
        let random = RandomState::new();
        ArrivalIndex::with_keys(Some((random.hash_one(0u8), random.hash_one(1u8))))
    }

    /// An index whose keys all have one hash, to test collisions.
    #[cfg(test)]
    fn colliding() -> ArrivalIndex {
        ArrivalIndex::with_keys(None)
    }

    fn with_keys(keys: Option<(u64, u64)>) -> ArrivalIndex {
        ArrivalIndex {
            keys,
            restored: false,
            state: Mutex::new(Places {
                next: 1,
                ..Places::default()
            }),
            expiries: Mutex::new(Expiries::default()),
            sweep: Mutex::new(()),
        }
    }

    /// The index of `meta`'s rows in `items` (with their expiries, if the
    /// table has TTL on), read in one pass.
    pub(crate) fn build<T>(items: &T, meta: &TableMeta) -> Result<ArrivalIndex, StoreError>
    where
        T: ReadableTable<&'static [u8], &'static [u8]>,
    {
        let index = ArrivalIndex::new();
        let prefix = keys::table_prefix(meta.id);
        let end = keys::prefix_end(&prefix);
        {
            let mut places = index.state.lock().expect("arrival index");
            let mut expiries = index.expiries.lock().expect("arrival expiries");
            let mut last = None;
            let with_expiry = meta.ttl_attribute.is_some();
            for row in items
                .range(prefix.as_slice()..end.as_slice())
                .map_err(storage_err)?
            {
                let (k, v) = row.map_err(storage_err)?;
                let place = place_of(k.value()).ok_or_else(|| damaged(meta))?;
                if last == Some(place) {
                    // A further item of the partition: only its expiry.
                    if with_expiry && let Some(at) = expiry_of_row(meta, v.value())? {
                        expiries.note(place, at);
                    }
                    continue;
                }
                last = Some(place);
                let (key, at) = read_row(meta, v.value(), with_expiry)?;
                if let Some(at) = at {
                    expiries.note(place, at);
                }
                places.add(index.hash(&key[..partition_len(&key)]), place);
                places.next = places.next.max(place + 1);
            }
        }
        Ok(index)
    }

    /// Notes that an item at `place` expires at second `at` (its write has
    /// committed).
    pub(crate) fn note_expiry(&self, place: u64, at: u64) {
        self.expiries
            .lock()
            .expect("arrival expiries")
            .note(place, at);
    }

    /// Forgets every noted expiry and notes `entries` (place, second)
    /// instead: TTL turned on, off or onto another attribute.
    pub(crate) fn reset_expiries(&self, entries: &[(u64, u64)]) {
        let mut expiries = self.expiries.lock().expect("arrival expiries");
        *expiries = Expiries::default();
        for &(place, at) in entries {
            expiries.note(place, at);
        }
    }

    /// Held while the table's expiries are swept (one sweep at a time).
    pub(crate) fn sweeping(&self) -> std::sync::MutexGuard<'_, ()> {
        self.sweep
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The first block after `after` (from the first if None) with an item
    /// noted to expire before second `now`, marked as being swept.
    pub(crate) fn begin_sweep(&self, after: Option<u64>, now: u64) -> Option<u64> {
        let mut expiries = self.expiries.lock().expect("arrival expiries");
        let block = expiries.first_due(after.map_or(0, |b| b + 1), now)?;
        expiries.sweeping = Some((block, u64::MAX));
        Some(block)
    }

    /// Ends the sweep of `block`, whose rows left unexpired expire no
    /// earlier than `next` (None: none of them expires).
    pub(crate) fn end_sweep(&self, block: u64, next: Option<u64>) {
        let mut expiries = self.expiries.lock().expect("arrival expiries");
        let since = match expiries.sweeping.take() {
            Some((b, since)) if b == block => since,
            // Not ours: leave the block as noted.
            _ => return,
        };
        match next.unwrap_or(u64::MAX).min(since) {
            u64::MAX => expiries.set(block, None),
            at => expiries.set(block, Some(at)),
        }
    }

    /// How many blocks have an expiry noted (for tests).
    #[cfg(test)]
    fn blocks_noted(&self) -> usize {
        self.expiries
            .lock()
            .expect("arrival expiries")
            .earliest
            .len()
    }

    fn hash(&self, partition: &[u8]) -> u64 {
        self.keys.map_or(0, |(k0, k1)| {
            let mut h = SipHasher13::new_with_keys(k0, k1);
            h.write(partition);
            h.finish()
        })
    }

    /// A new place for `partition`.
    fn insert(&self, partition: &[u8]) -> u64 {
        let hash = self.hash(partition);
        let mut places = self.state.lock().expect("arrival index");
        let place = places.next;
        places.next += 1;
        places.add(hash, place);
        place
    }

    /// Forgets the place `place` of `partition` (the delete of its last
    /// row is durable).
    pub(crate) fn forget(&self, partition: &[u8], place: u64) {
        let hash = self.hash(partition);
        self.state
            .lock()
            .expect("arrival index")
            .remove(hash, place);
    }

    /// The places that may hold `partition`, newest first.
    fn candidates(&self, partition: &[u8]) -> Vec<u64> {
        let hash = self.hash(partition);
        let places = self.state.lock().expect("arrival index");
        let mut out = Vec::with_capacity(1);
        if let Some(more) = places.more.get(&hash) {
            out.extend(more.iter().rev());
        }
        out.extend(places.first.get(&hash));
        out
    }

    /// How many places the index holds.
    pub(crate) fn len(&self) -> usize {
        self.state.lock().expect("arrival index").len()
    }

    /// Whether the index was read from the snapshot of the last clean
    /// close rather than built from the table's rows.
    pub(crate) fn restored(&self) -> bool {
        self.restored
    }
}

/// Due blocks `first_due` picks from among by time; with more due, it
/// walks the blocks in order instead (a backlog: the walk soon meets one).
const DUE_SCAN: usize = 64;

impl Expiries {
    /// The first block from `from` on with an expiry noted before `now`.
    fn first_due(&mut self, from: u64, now: u64) -> Option<u64> {
        let mut looked = 0;
        let mut least = None;
        for &(_, block) in self.by_time.range(..(now, 0)).take(DUE_SCAN) {
            looked += 1;
            if block >= from && least.is_none_or(|l| block < l) {
                least = Some(block);
            }
        }
        let found = if looked < DUE_SCAN {
            least
        } else {
            self.earliest
                .range(from..)
                .inspect(|_| looked += 1)
                .find(|(_, at)| **at < now)
                .map(|(b, _)| *b)
        };
        self.looked_at = self.looked_at.wrapping_add(looked);
        found
    }

    /// Sets `block`'s earliest expiry (None: it has none).
    fn set(&mut self, block: u64, at: Option<u64>) {
        let old = match at {
            Some(at) => self.earliest.insert(block, at),
            None => self.earliest.remove(&block),
        };
        if let Some(old) = old {
            self.by_time.remove(&(old, block));
        }
        if let Some(at) = at {
            self.by_time.insert((at, block));
        }
    }

    fn note(&mut self, place: u64, at: u64) {
        let block = place / EXPIRY_BLOCK;
        match self.earliest.get(&block) {
            Some(&earliest) if earliest <= at => {}
            _ => self.set(block, Some(at)),
        }
        if let Some((b, since)) = &mut self.sweeping
            && *b == block
        {
            *since = (*since).min(at);
        }
    }
}

impl Places {
    fn len(&self) -> usize {
        self.first.len() + self.more.values().map(Vec::len).sum::<usize>()
    }

    fn add(&mut self, hash: u64, seq: u64) {
        if !self.first.insert_if_absent(hash, seq) {
            self.more.entry(hash).or_default().push(seq);
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

/// The item of `meta`'s table with key `key` (encoded as `keys::encode`
/// does), as `items` has it.
pub(crate) fn find<T>(
    items: &T,
    meta: &TableMeta,
    index: &ArrivalIndex,
    key: &[u8],
) -> Result<Option<Item>, StoreError>
where
    T: ReadableTable<&'static [u8], &'static [u8]>,
{
    lookup(items, meta, index, key, |_, value| Ok(row::item(value)?))
}

/// The key of the row that stores the item of `meta`'s table with key
/// `key`, without building the item.
pub(crate) fn locate<T>(
    items: &T,
    meta: &TableMeta,
    index: &ArrivalIndex,
    key: &[u8],
) -> Result<Option<Vec<u8>>, StoreError>
where
    T: ReadableTable<&'static [u8], &'static [u8]>,
{
    lookup(items, meta, index, key, |at, _| Ok(at))
}

/// What `found` makes of the row (its key and stored bytes) that holds the
/// item with key `key`: the first candidate place whose row has that key.
fn lookup<T, R>(
    items: &T,
    meta: &TableMeta,
    index: &ArrivalIndex,
    key: &[u8],
    found: impl FnOnce(Vec<u8>, &[u8]) -> Result<R, StoreError>,
) -> Result<Option<R>, StoreError>
where
    T: ReadableTable<&'static [u8], &'static [u8]>,
{
    let (partition, sort) = key.split_at(partition_len(key));
    for place in index.candidates(partition) {
        let at = row_key(meta.id, place, sort);
        let Some(bytes) = items.get(at.as_slice()).map_err(storage_err)? else {
            continue;
        };
        if key_of_row(meta, bytes.value())? == key {
            return found(at, bytes.value()).map(Some);
        }
    }
    Ok(None)
}

/// The keys bounding the rows of `place` in table `id`.
fn place_rows(id: u32, place: u64) -> std::ops::Range<Vec<u8>> {
    row_key(id, place, &[])..row_key(id, place + 1, &[])
}

/// The keys bounding the rows of the places in expiry block `block` of
/// table `id`.
pub(crate) fn block_rows(id: u32, block: u64) -> std::ops::Range<Vec<u8>> {
    let first = block.saturating_mul(EXPIRY_BLOCK);
    row_key(id, first, &[])..row_key(id, first.saturating_add(EXPIRY_BLOCK), &[])
}

/// The place of the partition whose key encodes as `partition` (the first
/// bytes of its items' keys), if a row of it is stored.
pub(crate) fn partition_place<T>(
    items: &T,
    meta: &TableMeta,
    index: &ArrivalIndex,
    partition: &[u8],
) -> Result<Option<u64>, StoreError>
where
    T: ReadableTable<&'static [u8], &'static [u8]>,
{
    for place in index.candidates(partition) {
        let rows = place_rows(meta.id, place);
        let first = items
            .range(rows.start.as_slice()..rows.end.as_slice())
            .map_err(storage_err)?
            .next();
        if let Some(row) = first {
            let (_, v) = row.map_err(storage_err)?;
            let key = key_of_row(meta, v.value())?;
            if key[..partition_len(&key)] == *partition {
                return Ok(Some(place));
            }
        }
    }
    Ok(None)
}

/// Where a new item with key `key` goes: into its partition's place, or,
/// for a partition with no row stored, a new place at the table's end.
pub(crate) fn place_new<T>(
    items: &T,
    meta: &TableMeta,
    index: &ArrivalIndex,
    key: &[u8],
) -> Result<Vec<u8>, StoreError>
where
    T: ReadableTable<&'static [u8], &'static [u8]>,
{
    let (partition, sort) = key.split_at(partition_len(key));
    let place = match partition_place(items, meta, index, partition)? {
        Some(place) => place,
        None => index.insert(partition),
    };
    Ok(row_key(meta.id, place, sort))
}

/// The place of the row `at` of table `id` just deleted, if its partition
/// has no row left there (the place is to be forgotten once the delete is
/// durable).
pub(crate) fn emptied<T>(items: &T, id: u32, at: &[u8]) -> Result<Option<u64>, StoreError>
where
    T: ReadableTable<&'static [u8], &'static [u8]>,
{
    let Some(place) = place_of(at) else {
        return Ok(None);
    };
    let rows = place_rows(id, place);
    let left = items
        .range(rows.start.as_slice()..rows.end.as_slice())
        .map_err(storage_err)?
        .next()
        .is_some();
    Ok((!left).then_some(place))
}

/// The expiry second of a stored row's item under `meta`'s TTL attribute
/// (`ttl::value_expires_at`), read without building the item.
pub(crate) fn expiry_of_row(meta: &TableMeta, value: &[u8]) -> Result<Option<u64>, StoreError> {
    let Some(name) = meta.ttl_attribute.as_deref().map(str::as_bytes) else {
        return Ok(None);
    };
    let mut found = None;
    visit_encoded_item_unchecked(row::item_bytes(value), |n, v| {
        if n == name {
            found = Some(v);
        }
    })?;
    expiry_of(found)
}

/// The expiry second a TTL attribute's stored value names, if any (an S
/// never does).
fn expiry_of(found: Option<RawValueRef<'_>>) -> Result<Option<u64>, StoreError> {
    match found {
        Some(RawValueRef::Value(v)) => Ok(super::ttl::value_expires_at(&v.to_value()?)),
        _ => Ok(None),
    }
}

/// The item key of a stored row, read without building the item.
pub(crate) fn key_of_row(meta: &TableMeta, value: &[u8]) -> Result<Vec<u8>, StoreError> {
    Ok(read_row(meta, value, false)?.0)
}

/// The item key of a stored row and, `with_expiry`, its expiry second
/// ([`expiry_of_row`]), in one walk of its attributes.
fn read_row(
    meta: &TableMeta,
    value: &[u8],
    with_expiry: bool,
) -> Result<(Vec<u8>, Option<u64>), StoreError> {
    let pk_name = meta.partition_key.name.as_bytes();
    let sk_name = meta.sort_key.as_ref().map(|sk| sk.name.as_bytes());
    let ttl_name = (meta.ttl_attribute.as_deref())
        .filter(|_| with_expiry)
        .map(str::as_bytes);
    let (mut pk, mut sk, mut ttl) = (None, None, None);
    visit_encoded_item_unchecked(row::item_bytes(value), |n, v| {
        if n == pk_name {
            pk = Some(v);
        } else if Some(n) == sk_name {
            sk = Some(v);
        } else if Some(n) == ttl_name {
            ttl = Some(v);
        }
    })?;
    let value_of = |v: RawValueRef<'_>| -> Result<AttributeValue, StoreError> {
        Ok(match v {
            RawValueRef::S(s) => AttributeValue::S(
                std::str::from_utf8(s)
                    .map_err(|_| damaged(meta))?
                    .to_owned(),
            ),
            RawValueRef::Value(v) => v.to_value()?,
        })
    };
    let pk = value_of(pk.ok_or_else(|| damaged(meta))?)?;
    let sk = match (sk_name, sk) {
        (None, _) => None,
        (Some(_), Some(v)) => Some(value_of(v)?),
        (Some(_), None) => return Err(damaged(meta)),
    };
    Ok((keys::encode(meta, &pk, sk.as_ref()), expiry_of(ttl)?))
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
        use crate::api::{AttributeDefinition, CreateTableInput, KeySchemaElement, KeyType};
        use postbox_item::AttributeValue;
        use redb::ReadableDatabase;

        let db = redb::Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .unwrap();
        // A partition key and a sort key: items of one partition share a place.
        let mut input = CreateTableInput::keyed_by("rows", "pk");
        input.key_schema.push(KeySchemaElement {
            attribute_name: "sk".into(),
            key_type: KeyType::Range,
        });
        input.attribute_definitions.push(AttributeDefinition {
            attribute_name: "sk".into(),
            attribute_type: crate::api::ScalarType::S,
        });
        let meta = TableMeta::from_create(&input, 3, 0).unwrap();
        let index = ArrivalIndex::colliding();
        let s = |v: &str| AttributeValue::S(v.to_owned());
        let key_of = |pk: &str, sk: &str| keys::encode(&meta, &s(pk), Some(&s(sk)));
        let txn = db.begin_write().unwrap();
        {
            let mut items = txn.open_table(super::super::tables::ITEMS).unwrap();
            for (pk, sk) in [("a", "1"), ("b", "1"), ("a", "2"), ("c", "1")] {
                let mut item = Item::new();
                item.insert("pk".into(), s(pk));
                item.insert("sk".into(), s(sk));
                let at = place_new(&items, &meta, &index, &key_of(pk, sk)).unwrap();
                let bytes = postbox_item::encode_item(&item);
                items.insert(at.as_slice(), bytes.as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
        let read = db.begin_read().unwrap();
        let items = read.open_table(super::super::tables::ITEMS).unwrap();
        for (pk, sk, place) in [("a", "1", 1), ("a", "2", 1), ("b", "1", 2), ("c", "1", 3)] {
            let key = key_of(pk, sk);
            let at = locate(&items, &meta, &index, &key).unwrap().unwrap();
            let item = find(&items, &meta, &index, &key).unwrap().unwrap();
            assert_eq!(place_of(&at), Some(place));
            assert_eq!(
                (item.get("pk"), item.get("sk")),
                (Some(&s(pk)), Some(&s(sk)))
            );
        }
        assert!(
            find(&items, &meta, &index, &key_of("a", "3"))
                .unwrap()
                .is_none()
        );
        assert!(
            locate(&items, &meta, &index, &key_of("a", "3"))
                .unwrap()
                .is_none()
        );
        assert!(
            find(&items, &meta, &index, &key_of("d", "1"))
                .unwrap()
                .is_none()
        );
        // Forgetting one place keeps the others; a rebuilt index finds all.
        let b = key_of("b", "1");
        index.forget(&b[..partition_len(&b)], 2);
        assert!(find(&items, &meta, &index, &b).unwrap().is_none());
        assert!(
            find(&items, &meta, &index, &key_of("c", "1"))
                .unwrap()
                .is_some()
        );
        let rebuilt = ArrivalIndex::build(&items, &meta).unwrap();
        assert_eq!(rebuilt.len(), 3);
        assert_eq!(rebuilt.insert(b"x"), 4);
    }

    #[test]
    fn a_block_keeps_its_earliest_expiry_and_what_was_noted_during_its_sweep() {
        let index = ArrivalIndex::new();
        let b = EXPIRY_BLOCK;
        index.note_expiry(1, 50);
        index.note_expiry(2, 30);
        index.note_expiry(b + 1, 80);
        index.note_expiry(3 * b, 10);
        assert_eq!(index.blocks_noted(), 3);
        // Blocks whose earliest expiry is before 60, in order.
        assert_eq!(index.begin_sweep(None, 60), Some(0));
        // A write the sweep's read may have missed is kept for the next.
        index.note_expiry(5, 40);
        index.end_sweep(0, Some(70));
        assert_eq!(index.begin_sweep(None, 60), Some(0));
        index.end_sweep(0, Some(70));
        assert_eq!(index.begin_sweep(None, 60), Some(3));
        // A block left with nothing to expire is dropped.
        index.end_sweep(3, None);
        assert_eq!(index.begin_sweep(None, 60), None);
        assert_eq!(index.blocks_noted(), 2);
        assert_eq!(index.begin_sweep(None, 71), Some(0));
        assert_eq!(index.begin_sweep(Some(0), 81), Some(1));
        // A stale end (another block's) changes nothing.
        index.end_sweep(0, None);
        assert_eq!(index.blocks_noted(), 2);
        index.reset_expiries(&[(7, 5)]);
        assert_eq!(index.blocks_noted(), 1);
        assert_eq!(index.begin_sweep(None, 6), Some(0));
    }

    /// Entries `begin_sweep` has looked at so far.
    fn looked_at(index: &ArrivalIndex) -> usize {
        index.expiries.lock().unwrap().looked_at
    }

    #[test]
    fn a_sweep_finds_its_due_blocks_without_walking_the_others() {
        let index = ArrivalIndex::new();
        // Ten thousand blocks expiring from second 1,000 on, two due at 60.
        for block in 0..10_000 {
            index.note_expiry(block * EXPIRY_BLOCK, 1_000 + block);
        }
        index.note_expiry(700 * EXPIRY_BLOCK + 3, 50);
        index.note_expiry(90 * EXPIRY_BLOCK, 20);
        assert_eq!(index.begin_sweep(None, 60), Some(90));
        index.end_sweep(90, Some(1_090));
        assert_eq!(index.begin_sweep(Some(90), 60), Some(700));
        index.end_sweep(700, Some(1_700));
        assert_eq!(index.begin_sweep(Some(700), 60), None);
        assert_eq!(index.begin_sweep(None, 60), None, "nothing left due");
        assert!(
            looked_at(&index) <= 8,
            "looked at {} entries for two due blocks of 10,000",
            looked_at(&index)
        );
        assert_eq!(index.blocks_noted(), 10_000);
    }

    #[test]
    fn a_backlog_of_due_blocks_is_swept_in_block_order() {
        let index = ArrivalIndex::new();
        // More due blocks than are picked by time, expiring in reverse.
        let n = 3 * DUE_SCAN as u64;
        for block in 0..n {
            index.note_expiry(block * EXPIRY_BLOCK, 10 + n - block);
        }
        index.note_expiry(n * EXPIRY_BLOCK, 5_000);
        let mut swept = Vec::new();
        let mut after = None;
        while let Some(block) = index.begin_sweep(after, 1_000) {
            swept.push(block);
            after = Some(block);
            index.end_sweep(block, None);
        }
        assert_eq!(swept, (0..n).collect::<Vec<_>>());
        assert_eq!(index.blocks_noted(), 1, "the block not due stays");
        assert_eq!(index.begin_sweep(None, 5_001), Some(n));
    }

    #[test]
    fn row_keys_sort_by_table_then_place_then_sort_key() {
        assert!(row_key(1, 2, b"z") < row_key(1, 3, b""));
        assert!(row_key(1, 2, b"a") < row_key(1, 2, b"b"));
        assert!(row_key(1, u64::MAX, b"") < row_key(2, 0, b""));
        assert_eq!(place_of(&row_key(5, 42, b"x")), Some(42));
    }

    #[test]
    fn the_partition_part_of_a_key_ends_at_its_terminator() {
        use postbox_item::AttributeValue;
        let mut key = 7u32.to_be_bytes().to_vec();
        postbox_item::encode_partition_key(&AttributeValue::B(vec![0, 1, 0]), &mut key).unwrap();
        let len = key.len();
        key.extend_from_slice(b"sort");
        assert_eq!(partition_len(&key), len);
    }
}
