//! A hash map of hashes that grows a little at a time.
//!
//! A `HashMap` grows by moving every entry into a table twice the size, in
//! one call. Timing each insert of a loop, the call at 458,752 entries took
//! 5-11 ms for entries like the store's arrival index's (16 bytes) and
//! 17-146 ms for a FIFO queue's deduplication ids (48 bytes); in the server
//! these run on the writer thread while every commit waits, and a server
//! whose tables passed that size had writer batches of 61 and 160 ms.
//! [`ShardedMap`] splits the map into [`SHARDS`] maps by eight bits of the
//! key, so each growth moves a 256th of the entries.
//!
//! Keys must already be hashes (uniform bits): the shard is taken from bits
//! 48-55, which `hashbrown` uses neither for the bucket (low bits) nor for
//! its tag (the top seven), so a map whose hasher passes the key through
//! still spreads its entries.

use std::collections::HashMap;
use std::collections::hash_map::{Entry, RandomState};
use std::hash::{BuildHasher, Hash};

/// Maps per [`ShardedMap`].
pub const SHARDS: usize = 256;

/// A key that is already a hash: its shard is eight of its bits.
pub trait ShardKey: Hash + Eq + Copy {
    /// The shard, below [`SHARDS`].
    fn shard(&self) -> usize;
}

impl ShardKey for u64 {
    fn shard(&self) -> usize {
        ((self >> 48) & 0xff) as usize
    }
}

impl ShardKey for u128 {
    fn shard(&self) -> usize {
        // The same bits of the low half.
        (*self as u64).shard()
    }
}

/// A map of [`SHARDS`] hash maps, chosen by the key's [`ShardKey::shard`].
/// An empty map holds no shards (every queue has one of these).
pub struct ShardedMap<K, V, S = RandomState> {
    shards: Vec<HashMap<K, V, S>>,
}

impl<K, V, S> Default for ShardedMap<K, V, S> {
    fn default() -> Self {
        ShardedMap { shards: Vec::new() }
    }
}

impl<K: ShardKey, V, S: BuildHasher + Default> ShardedMap<K, V, S> {
    /// The shard of `key`, made with the rest at the first insert.
    fn shard_mut(&mut self, key: &K) -> &mut HashMap<K, V, S> {
        if self.shards.is_empty() {
            self.shards = (0..SHARDS).map(|_| HashMap::default()).collect();
        }
        &mut self.shards[key.shard()]
    }

    /// The value of `key`.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.shards.get(key.shard())?.get(key)
    }

    /// Sets `key` to `value`; returns the value it replaced.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.shard_mut(&key).insert(key, value)
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        self.shards.get_mut(key.shard())?.remove(key)
    }

    /// Inserts `value` under `key` if it has none; returns whether it did.
    pub fn insert_if_absent(&mut self, key: K, value: V) -> bool {
        match self.shard_mut(&key).entry(key) {
            Entry::Vacant(e) => {
                e.insert(value);
                true
            }
            Entry::Occupied(_) => false,
        }
    }

    /// Entries held (summed over the shards: read at open and in tests,
    /// not kept up on every insert).
    pub fn len(&self) -> usize {
        self.shards.iter().map(HashMap::len).sum()
    }

    /// Every entry, shard by shard (in no particular order).
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.shards.iter().flat_map(HashMap::iter)
    }

    /// True when no entry is held.
    pub fn is_empty(&self) -> bool {
        self.shards.iter().all(HashMap::is_empty)
    }

    /// The most entries any one growth moves: the largest shard's capacity.
    pub fn largest_shard_capacity(&self) -> usize {
        self.shards.iter().map(HashMap::capacity).max().unwrap_or(0)
    }
}

impl<K: ShardKey, V, S: BuildHasher + Default> std::fmt::Debug for ShardedMap<K, V, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedMap")
            .field("len", &self.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys as the arrival index and the deduplication ids have them:
    /// uniform bits.
    fn key(n: u64) -> u64 {
        n.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29) ^ 0x5851_f42d_4c95_7f2d
    }

    #[test]
    fn a_growing_map_moves_a_small_share_of_its_entries_at_a_time() {
        let mut map: ShardedMap<u64, u64> = ShardedMap::default();
        let n = 200_000;
        for i in 0..n {
            assert!(map.insert_if_absent(key(i), i));
        }
        assert_eq!(map.len(), n as usize);
        // A single map would hold 229,376 buckets' worth of capacity; no
        // shard may be more than a few times its even share.
        let even = n as usize / SHARDS;
        assert!(
            map.largest_shard_capacity() <= 4 * even,
            "largest shard {} against an even share of {even}",
            map.largest_shard_capacity()
        );
    }

    #[test]
    fn an_empty_map_holds_no_shards() {
        let mut map: ShardedMap<u64, u64> = ShardedMap::default();
        assert_eq!(map.get(&key(1)), None);
        assert_eq!(map.remove(&key(1)), None);
        assert!(map.shards.is_empty());
        map.insert(key(1), 1);
        assert_eq!(map.shards.len(), SHARDS);
        assert_eq!(map.get(&key(1)), Some(&1));
    }

    #[test]
    fn it_answers_as_a_hash_map_does() {
        let mut map: ShardedMap<u128, u32> = ShardedMap::default();
        let mut plain = HashMap::new();
        for i in 0..5_000u32 {
            let k = u128::from(key(u64::from(i % 3_000))) << 3;
            match i % 5 {
                0 => assert_eq!(map.remove(&k), plain.remove(&k)),
                1 => assert_eq!(
                    map.insert_if_absent(k, i),
                    plain.insert(k, i).is_none_or(|old| {
                        plain.insert(k, old);
                        false
                    })
                ),
                _ => assert_eq!(map.insert(k, i), plain.insert(k, i)),
            }
            assert_eq!(map.get(&k), plain.get(&k));
            assert_eq!(map.len(), plain.len());
        }
        assert_eq!(map.is_empty(), plain.is_empty());
    }
}
