//! Logging a recurring condition once per key per interval instead of once
//! per occurrence: "delivered to nobody" for every event of an unsubscribed
//! type would fill a log (and cost the emit path) while saying one thing.
//! Counters keep the exact numbers; the log keeps the news.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a [`Throttle`] lets one key through by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);

/// Lets a key through once per interval, counting what it held back.
#[derive(Debug)]
pub struct Throttle {
    interval: Duration,
    /// Per key: when it was last let through and how many were held back since.
    keys: Mutex<HashMap<String, (Instant, u64)>>,
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle::new(DEFAULT_INTERVAL)
    }
}

impl Throttle {
    pub fn new(interval: Duration) -> Throttle {
        Throttle {
            interval,
            keys: Mutex::default(),
        }
    }

    /// `Some(n)` when an occurrence of `key` at `now` should be logged, `n`
    /// being the occurrences held back since the last one logged; `None`
    /// when it is held back.
    pub fn admit(&self, key: &str, now: Instant) -> Option<u64> {
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        match keys.get_mut(key) {
            Some((last, held)) if now.saturating_duration_since(*last) < self.interval => {
                *held += 1;
                None
            }
            Some((last, held)) => {
                let n = std::mem::take(held);
                *last = now;
                Some(n)
            }
            None => {
                keys.insert(key.to_owned(), (now, 0));
                Some(0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_let_through_once_per_interval_with_what_was_held_back() {
        let t = Throttle::new(Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(t.admit("A", t0), Some(0));
        assert_eq!(t.admit("A", t0 + Duration::from_secs(1)), None);
        assert_eq!(t.admit("A", t0 + Duration::from_secs(59)), None);
        // Another key has its own interval.
        assert_eq!(t.admit("B", t0 + Duration::from_secs(2)), Some(0));
        assert_eq!(t.admit("A", t0 + Duration::from_secs(60)), Some(2));
        assert_eq!(t.admit("A", t0 + Duration::from_secs(61)), None);
        assert_eq!(t.admit("A", t0 + Duration::from_secs(121)), Some(1));
    }
}
