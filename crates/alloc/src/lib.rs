//! The allocator of the `postbox` binary and of every benchmark harness.
//!
//! mimalloc instead of glibc's malloc: the store's writer frees on one
//! thread what the callers allocated on others, and glibc's per-thread arenas
//! made that slow (the relay benchmark was 25-35% faster on mimalloc).
//!
//! [`tune`] turns off mimalloc's purging. By default mimalloc hands memory it
//! has not used for a while back to the OS, and the next allocation of that
//! size faults the pages in again, which the kernel zeroes. The writer builds
//! each commit in large short-lived buffers, so with purging on about 10% of
//! its time went to the kernel clearing pages (`clear_page_erms` in a
//! profile of `cargo bench -p postbox-engine --bench emit`); with it off, one
//! tenant's emit throughput rose from 16.3k to 21.9k events/s in the same run.
//! The price is that a process keeps its peak heap until it exits.
//!
//! Transparent huge pages stay as mimalloc asks for them (`allow_thp`, on
//! by default on Linux: its arenas are advised `MADV_HUGEPAGE`, which a
//! kernel set to `madvise` honours). [`tune`] used to turn them off, when
//! redb's page cache grew the heap by about 130 MB/s and every first touch
//! of a 2 MiB region faulted, zeroed and compacted a whole huge page on the
//! thread that touched it. With the store's 16 MiB page cache the heap stays
//! a few hundred MB, and small pages cost more than huge ones: the hottest
//! symbol of a 100-tenant HTTP emit's server profile was mimalloc's
//! free-list pop, stalled on its one load of the block it hands out (5.2% of
//! the samples with small pages, 4.3% with huge ones), and the rest of the
//! server's work got cheaper with it. Alternating runs, same binary: `postbox
//! bench --http` at 100 tenants 9,258-9,983 -> 9,945-11,066 emits/s (10-s
//! runs, five pairs), 9,094 / 9,342 -> 9,781 / 10,252 (60-s runs), one
//! tenant 11,759 / 11,859 -> 12,611 / 12,748; `POSTBOX_BENCH_ONLY=many
//! cargo bench -p postbox-engine --bench emit` 29.6-29.8k -> 31.8k
//! events/s; the worker bench level. `MIMALLOC_ALLOW_THP=0` in the
//! environment turns them off again (`tune` leaves the option alone).
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOC: postbox_alloc::Allocator = postbox_alloc::Allocator;
//!
//! fn main() {
//!     postbox_alloc::tune();
//!     // ...
//! }
//! ```

/// The global allocator type (mimalloc).
pub use mimalloc::MiMalloc as Allocator;

/// mimalloc's option number of `purge_delay` (`mi_option_purge_delay` in
/// `mimalloc.h`, the same in its versions 2 and 3).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Sets the allocator's options; call it first thing in `main`. Calling it
/// again does no harm.
pub fn tune() {
    // SAFETY: mi_option_set only stores an integer in mimalloc's option
    // table; any thread may call it at any time.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1);
    }
}

#[cfg(test)]
mod tests {
    /// mimalloc's option number of `allow_thp` (`mi_option_allow_thp` in
    /// version 3's `mimalloc.h`).
    const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

    // One test: tests run in parallel threads of one process, and `tune`
    // changes process-wide settings another test would read as defaults.
    #[test]
    fn tune_turns_purging_off_and_leaves_huge_pages_on() {
        // SAFETY (all blocks): reads an integer from mimalloc's option
        // table; PR_GET_THP_DISABLE only returns the process's flag.
        let delay = unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        let thp = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_ALLOW_THP) };
        // mimalloc 3's defaults (on Linux): the option numbers are right.
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(delay, 1000, "option 15 is not purge_delay");
        }
        if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
            assert_eq!(thp, 1, "option 43 is not allow_thp");
        }
        super::tune();
        let delay = unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        assert_eq!(delay, -1);
        let after = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_ALLOW_THP) };
        assert_eq!(after, thp, "tune changed allow_thp");
        #[cfg(target_os = "linux")]
        {
            let disabled = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
            assert_eq!(
                disabled, 0,
                "transparent huge pages are off for the process"
            );
        }
    }
}
