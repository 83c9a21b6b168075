//! FIFO deduplication: a send whose deduplication id was seen in the last
//! five minutes is accepted but not enqueued, and answered with the
//! original message's id and sequence number.
//!
//! A busy FIFO queue remembers every id of the last five minutes (9 million
//! at 30,000 messages/s), so entries are compact: the id (with its group,
//! when deduplication is per group) is kept as the first 128 bits of its
//! SHA-256, and the original message id as the 128-bit UUID it is. Both
//! of its collections grow without moving all they hold at once (each send
//! waits while they grow): the entries in a [`ShardedMap`], the expiry
//! order in chunks.

use std::collections::VecDeque;

use postbox_store::shards::ShardedMap;
use sha2::{Digest, Sha256};

/// How long a deduplication id is remembered: 5 minutes.
pub const DEDUP_WINDOW_MS: u64 = 5 * 60 * 1000;

/// A deduplication id as remembered: 128 bits of its SHA-256.
pub type DedupKey = u128;

/// What a remembered deduplication id answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DedupEntry {
    /// The original message's id, as a 128-bit UUID.
    pub message_id: u128,
    /// The original message's sequence.
    pub seq: u64,
    /// When the id is forgotten (ms).
    pub expires_at: u64,
}

/// Deduplication ids of one queue with their expiry.
#[derive(Debug, Default)]
pub struct DedupTable {
    entries: ShardedMap<DedupKey, DedupEntry>,
    /// In insertion order, which is expiry order while the clock does not
    /// go back (a late entry is only forgotten late; `get` checks expiry).
    by_expiry: Chunked<(u64, DedupKey)>,
}

/// Entries of a chunk of [`Chunked`].
const CHUNK: usize = 4096;

/// A queue kept in chunks of at most [`CHUNK`] entries: pushing moves at
/// most one chunk (a `VecDeque` of half a million entries moved them all,
/// 5-51 ms, when it grew), and a queue with a few ids holds a small chunk.
#[derive(Debug)]
struct Chunked<T> {
    chunks: VecDeque<VecDeque<T>>,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked {
            chunks: VecDeque::new(),
        }
    }
}

impl<T> Chunked<T> {
    fn push_back(&mut self, value: T) {
        match self.chunks.back_mut() {
            Some(last) if last.len() < CHUNK => last.push_back(value),
            _ => {
                self.chunks.push_back(VecDeque::from([value]));
            }
        }
    }

    fn front(&self) -> Option<&T> {
        self.chunks.front().and_then(VecDeque::front)
    }

    fn pop_front(&mut self) -> Option<T> {
        let first = self.chunks.front_mut()?;
        let value = first.pop_front();
        if first.is_empty() {
            self.chunks.pop_front();
        }
        value
    }
}

impl DedupTable {
    /// The live entry for `key` at `now`.
    pub fn get(&self, key: DedupKey, now: u64) -> Option<&DedupEntry> {
        self.entries.get(&key).filter(|e| e.expires_at > now)
    }

    /// Remembers `key`, replacing an expired entry.
    pub fn insert(&mut self, key: DedupKey, entry: DedupEntry) {
        self.by_expiry.push_back((entry.expires_at, key));
        self.entries.insert(key, entry);
    }

    /// Forgets entries expired at `now`, at most `max`; returns each
    /// `(expires_at, key)` remembered with an expiry that has passed, as
    /// the file keys them: the forgotten entries and the superseded
    /// remembrances of ids remembered again since.
    pub fn expire(&mut self, now: u64, max: usize) -> Vec<(u64, DedupKey)> {
        let mut out = Vec::new();
        while out.len() < max {
            match self.by_expiry.front() {
                Some(&(at, key)) if at <= now => {
                    self.by_expiry.pop_front();
                    // The key may have been remembered again since.
                    if self.entries.get(&key).is_some_and(|e| e.expires_at == at) {
                        self.entries.remove(&key);
                    }
                    out.push((at, key));
                }
                _ => break,
            }
        }
        out
    }

    /// True when an entry expired by `now`.
    pub fn has_expired(&self, now: u64) -> bool {
        self.by_expiry.front().is_some_and(|(at, _)| *at <= now)
    }

    /// Number of remembered ids.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no id is remembered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The key a deduplication id is remembered under: the id alone, or the
/// group and the id when deduplication is scoped to the message group.
pub fn dedup_key(per_group: bool, group: &str, id: &str) -> DedupKey {
    let mut h = Sha256::new();
    if per_group {
        h.update(group.as_bytes());
        h.update([0]);
    }
    h.update(id.as_bytes());
    u128::from_be_bytes(h.finalize()[..16].try_into().expect("16 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_window_grows_a_little_at_a_time_and_forgets_in_order() {
        let mut d = DedupTable::default();
        let n: u64 = 100_000;
        let key = |i: u64| dedup_key(false, "", &i.to_string());
        for i in 0..n {
            d.insert(
                key(i),
                DedupEntry {
                    message_id: u128::from(i),
                    seq: i,
                    expires_at: 1_000 + i,
                },
            );
        }
        assert_eq!(d.len(), n as usize);
        // No growth moves more than a few times a 256th of the entries, and
        // the expiry order is held in chunks, not one block.
        let even = n as usize / postbox_store::shards::SHARDS;
        assert!(d.entries.largest_shard_capacity() <= 4 * even);
        assert_eq!(d.by_expiry.chunks.len(), (n as usize).div_ceil(CHUNK));
        assert!(d.by_expiry.chunks.iter().all(|c| c.len() <= CHUNK));
        // Forgotten in expiry order, across chunk boundaries.
        let first = d.expire(1_000 + CHUNK as u64, usize::MAX);
        assert_eq!(first.len(), CHUNK + 1);
        assert_eq!(
            first.last(),
            Some(&(1_000 + CHUNK as u64, key(CHUNK as u64)))
        );
        assert!(d.get(key(CHUNK as u64), 0).is_none());
        assert_eq!(
            d.get(key(CHUNK as u64 + 1), 0).map(|e| e.seq),
            Some(CHUNK as u64 + 1)
        );
        let rest = d.expire(u64::MAX, usize::MAX);
        assert_eq!(rest.len(), n as usize - CHUNK - 1);
        assert!(rest.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(d.is_empty());
        assert!(d.by_expiry.front().is_none());
    }
}
