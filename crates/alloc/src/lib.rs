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
//! [`tune`] also turns transparent huge pages off for the process (Linux).
//! mimalloc asks for them on its arenas, so every first touch of a 2 MiB
//! region faulted in, zeroed and, with the kernel's default `defrag`
//! setting, first compacted a whole huge page, on whichever thread touched
//! it: the store's writer among them, while the heap grows with redb's page
//! cache. With them off (alternating runs of `POSTBOX_BENCH_ONLY=many
//! cargo bench -p postbox-engine --bench emit`) the 100-tenant emit went
//! from 17.7-17.8k to 22.4-26.9k events/s and the writer's CPU per event
//! from 49-51 to 32-40 us.
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

/// mimalloc's option number of `allow_thp` (`mi_option_allow_thp` in
/// version 3's `mimalloc.h`).
const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

/// Sets the allocator's options and turns transparent huge pages off for
/// the process; call it first thing in `main`. Calling it again does no
/// harm.
pub fn tune() {
    // SAFETY: mi_option_set only stores an integer in mimalloc's option
    // table; any thread may call it at any time.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1);
        // No MADV_HUGEPAGE on the arenas mimalloc maps from now on.
        libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_THP, 0);
    }
    // mimalloc mapped its first arena (and asked for huge pages on it)
    // before `main`; the process-wide switch covers that one too, for every
    // page fault from now on. It only fails on kernels without it (before
    // 3.15), where there is nothing to do.
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes plain integers and touches no memory
    // of ours.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    // One test: tests run in parallel threads of one process, and `tune`
    // changes process-wide settings another test would read as defaults.
    #[test]
    fn tune_turns_purging_and_huge_pages_off() {
        // SAFETY (all blocks): reads an integer from mimalloc's option
        // table; PR_GET_THP_DISABLE only returns the process's flag.
        let delay = unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        let thp = unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_ALLOW_THP) };
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
        let thp = unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_ALLOW_THP) };
        assert_eq!(thp, 0);
        #[cfg(target_os = "linux")]
        {
            let disabled = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
            assert_eq!(disabled, 1, "transparent huge pages are still on");
        }
    }
}
