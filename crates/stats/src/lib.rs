//! A component's counters, declared once.
//!
//! A worker, a consumer or the engine counts what it does in atomics that
//! its clones share, and hands callers a plain snapshot. Both types have the
//! same fields; [`counters!`] declares them from one list, with the
//! snapshot's docs, so a counter cannot be added to one and forgotten in the
//! other.
//!
//! ```
//! postbox_stats::counters! {
//!     /// What a consumer did.
//!     pub struct ConsumerStats;
//!     pub(crate) struct Counters {
//!         /// Messages received.
//!         received,
//!         /// Messages deleted.
//!         deleted,
//!     }
//! }
//! let c = Counters::default();
//! postbox_stats::add(&c.received, 3);
//! postbox_stats::bump(&c.deleted);
//! assert_eq!(c.snapshot(), ConsumerStats { received: 3, deleted: 1 });
//! ```

use std::sync::atomic::{AtomicU64, Ordering};

/// Declares a snapshot struct (public `u64` fields, `Clone`, `Debug`,
/// `Default`, `PartialEq`, `Eq`) and a live struct of `AtomicU64`s with the
/// same field names (`Default`, with the given visibility on its fields) and
/// a `snapshot()` that reads them all.
#[macro_export]
macro_rules! counters {
    (
        $(#[$smeta:meta])*
        $svis:vis struct $stats:ident;
        $(#[$cmeta:meta])*
        $cvis:vis struct $counters:ident {
            $( $(#[$fmeta:meta])* $field:ident ),* $(,)?
        }
    ) => {
        $(#[$smeta])*
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        $svis struct $stats {
            $( $(#[$fmeta])* pub $field: u64, )*
        }

        $(#[$cmeta])*
        #[derive(Debug, Default)]
        $cvis struct $counters {
            $( $cvis $field: ::std::sync::atomic::AtomicU64, )*
        }

        impl $counters {
            /// The counters as they are now.
            #[allow(dead_code)]
            $cvis fn snapshot(&self) -> $stats {
                $stats {
                    $( $field: self.$field.load(::std::sync::atomic::Ordering::Relaxed), )*
                }
            }
        }
    };
}

/// Adds one to a counter.
pub fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Adds `n` to a counter.
pub fn add(c: &AtomicU64, n: usize) {
    c.fetch_add(n as u64, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    counters! {
        /// Test stats.
        pub struct Seen;
        struct Live {
            /// One.
            one,
            /// Two.
            two,
        }
    }

    #[test]
    fn a_snapshot_reads_every_field_by_name() {
        let live = Live::default();
        super::add(&live.two, 5);
        super::bump(&live.one);
        super::bump(&live.two);
        assert_eq!(live.snapshot(), Seen { one: 1, two: 6 });
    }
}
