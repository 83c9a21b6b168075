//! What the queues expose for monitoring: depth, in flight, delayed, the age
//! of the oldest message, and counters of what happened since start.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one queue since the process started (not persisted).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub sent: AtomicU64,
    pub received: AtomicU64,
    pub deleted: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub moved: AtomicU64,
    pub expired: AtomicU64,
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// A snapshot of one queue's metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// The queue's name.
    pub name: String,
    /// Messages available for retrieval (depth).
    pub visible: u64,
    /// Messages received and not yet deleted or visible again.
    pub in_flight: u64,
    /// Messages whose delay has not passed.
    pub delayed: u64,
    /// Age of the oldest message in ms (0 when empty).
    pub oldest_age_ms: u64,
    /// Messages enqueued (duplicates not counted).
    pub sent: u64,
    /// Messages handed out (each redelivery counts).
    pub received: u64,
    /// Messages deleted by their receipt handle.
    pub deleted: u64,
    /// Messages moved to the dead-letter queue after too many receives.
    pub dead_lettered: u64,
    /// Messages moved out of this queue by a move task.
    pub moved: u64,
    /// Messages dropped at the end of the retention period.
    pub expired: u64,
}

impl QueueStats {
    pub(crate) fn fill_counters(&mut self, c: &Counters) {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        self.sent = load(&c.sent);
        self.received = load(&c.received);
        self.deleted = load(&c.deleted);
        self.dead_lettered = load(&c.dead_lettered);
        self.moved = load(&c.moved);
        self.expired = load(&c.expired);
    }
}
