//! FIFO deduplication: a send whose deduplication id was seen in the last
//! five minutes is accepted but not enqueued, and answered with the
//! original message's id and sequence number.

use std::collections::{BTreeSet, HashMap};

/// How long a deduplication id is remembered: 5 minutes.
pub const DEDUP_WINDOW_MS: u64 = 5 * 60 * 1000;

/// What a remembered deduplication id answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DedupEntry {
    /// The original message's id.
    pub message_id: String,
    /// The original message's sequence.
    pub seq: u64,
    /// When the id is forgotten (ms).
    pub expires_at: u64,
}

/// Deduplication ids of one queue with their expiry.
#[derive(Debug, Default)]
pub struct DedupTable {
    entries: HashMap<String, DedupEntry>,
    by_expiry: BTreeSet<(u64, String)>,
}

impl DedupTable {
    /// The live entry for `key` at `now`.
    pub fn get(&self, key: &str, now: u64) -> Option<&DedupEntry> {
        self.entries.get(key).filter(|e| e.expires_at > now)
    }

    /// Remembers `key`, replacing an expired entry.
    pub fn insert(&mut self, key: String, entry: DedupEntry) {
        if let Some(old) = self.entries.get(&key) {
            self.by_expiry.remove(&(old.expires_at, key.clone()));
        }
        self.by_expiry.insert((entry.expires_at, key.clone()));
        self.entries.insert(key, entry);
    }

    /// Forgets entries expired at `now`, at most `max`; returns their keys.
    pub fn expire(&mut self, now: u64, max: usize) -> Vec<String> {
        let doomed: Vec<(u64, String)> =
            self.by_expiry.iter().take_while(|(at, _)| *at <= now).take(max).cloned().collect();
        for (at, key) in &doomed {
            self.by_expiry.remove(&(*at, key.clone()));
            self.entries.remove(key);
        }
        doomed.into_iter().map(|(_, k)| k).collect()
    }

    /// True when an entry expired by `now`.
    pub fn has_expired(&self, now: u64) -> bool {
        self.by_expiry.first().is_some_and(|(at, _)| *at <= now)
    }

    /// Number of remembered ids.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no id is remembered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The highest sequence any entry names (kept sequences increase across
    /// restarts).
    pub fn max_seq(&self) -> u64 {
        self.entries.values().map(|e| e.seq).max().unwrap_or(0)
    }
}

/// The key a deduplication id is remembered under: the id alone, or the
/// group and the id when deduplication is scoped to the message group.
pub fn dedup_key(per_group: bool, group: &str, id: &str) -> String {
    if per_group { format!("{group}\u{0}{id}") } else { id.to_owned() }
}
