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
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
}

#[cfg(test)]
mod tests {
    #[test]
    fn tune_turns_purging_off() {
        // SAFETY (both blocks): reads an integer from mimalloc's option table.
        let default = unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            // mimalloc 3's default purge delay: the option number is right.
            assert_eq!(default, 1000, "option 15 is not purge_delay");
        }
        super::tune();
        let delay = unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        assert_eq!(delay, -1);
    }
}
