//! A clock that can be moved forward at run time: the system clock plus an
//! offset. `postbox serve --test-clock` hands it to the store and the queues
//! so conformance cases can advance time (retention, delays) without waiting.

use std::sync::atomic::{AtomicU64, Ordering};

use postbox_store::{Clock, SystemClock};

/// The system clock shifted forward by an adjustable offset.
#[derive(Debug, Default)]
pub struct ShiftedClock {
    offset_ms: AtomicU64,
}

impl ShiftedClock {
    /// A clock reading the system time.
    pub fn new() -> ShiftedClock {
        ShiftedClock::default()
    }

    /// Moves the clock forward by `ms`.
    pub fn advance_ms(&self, ms: u64) {
        self.offset_ms.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ShiftedClock {
    fn now_ms(&self) -> u64 {
        SystemClock.now_ms() + self.offset_ms.load(Ordering::SeqCst)
    }
}
