//! The global allocator of a binary that is both a host and, started again with the worker
//! argument, a sandbox worker (the `recursive` CLI).
//!
//! A worker needs `monty_alloc::LimitedAllocator`: it counts live bytes and ends the process
//! past the session's memory ceiling. The host does not: when the system refuses it memory it
//! should fail as any Rust program does (a fallible reservation gets its error, anything else
//! "memory allocation of N bytes failed"), not end with the worker's message, which blamed the
//! worker for the host's death. [`HostOrWorker`] is the system allocator until [`become_worker`]
//! is called and the limited allocator after.
//!
//! Both modes keep the one live-byte count (`monty_types::LIVE_MEMORY`) the same way — charged
//! on allocation, refunded on release — so a block allocated before the switch and freed after
//! it is refunded exactly what it was charged, and the worker's baseline is right.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};

use monty_alloc::LimitedAllocator;
use monty_types::LIVE_MEMORY;

/// Whether this process has become a sandbox worker; never unset.
static WORKER: AtomicBool = AtomicBool::new(false);

/// Switches this process's allocator to the worker's (the memory ceiling that
/// `monty_alloc::set_hard_limit` arms). Call it first thing when the binary starts as a worker.
pub fn become_worker() {
    WORKER.store(true, Ordering::SeqCst);
}

/// Whether [`become_worker`] was called.
pub fn is_worker() -> bool {
    WORKER.load(Ordering::Relaxed)
}

/// The system allocator in a host, `monty_alloc::LimitedAllocator` in a worker.
pub struct HostOrWorker;

/// Counts `size` more live bytes.
fn charge(size: usize) {
    LIVE_MEMORY.fetch_add(size, Ordering::Relaxed);
}

/// Counts `size` fewer live bytes.
fn refund(size: usize) {
    LIVE_MEMORY.fetch_sub(size, Ordering::Relaxed);
}

/// Counts a block that moved from `old` to `new` bytes.
fn recharge(old: usize, new: usize) {
    match new.checked_sub(old) {
        Some(grown) => charge(grown),
        None => refund(old - new),
    }
}

// SAFETY: every method forwards its arguments unchanged either to `LimitedAllocator` (itself a
// forwarder to `System`) or to `System`, and returns what they returned. Which of the two serves
// a block does not matter when it is released: both hand blocks to and take them from `System`.
// Nothing here creates, aliases or frees a pointer.
unsafe impl GlobalAlloc for HostOrWorker {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_worker() {
            // SAFETY: the caller's `layout`, forwarded unchanged.
            return unsafe { LimitedAllocator.alloc(layout) };
        }
        // SAFETY: the caller's `layout`, forwarded unchanged.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            charge(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_worker() {
            // SAFETY: the caller's `layout`, forwarded unchanged.
            return unsafe { LimitedAllocator.alloc_zeroed(layout) };
        }
        // SAFETY: the caller's `layout`, forwarded unchanged.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            charge(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_worker() {
            // SAFETY: `ptr` is a live block of this allocator with this `layout` (the caller's
            // contract), and every block of either mode is a `System` block.
            return unsafe { LimitedAllocator.dealloc(ptr, layout) };
        }
        refund(layout.size());
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if is_worker() {
            // SAFETY: `ptr`/`layout` describe a live `System` block (the caller's contract),
            // `new_size` is the caller's; all forwarded unchanged.
            return unsafe { LimitedAllocator.realloc(ptr, layout, new_size) };
        }
        // SAFETY: as above.
        let moved = unsafe { System.realloc(ptr, layout, new_size) };
        if !moved.is_null() {
            recharge(layout.size(), new_size);
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recharge_counts_growth_and_shrinking_alike() {
        let before = LIVE_MEMORY.load(Ordering::Relaxed);
        recharge(100, 164);
        recharge(164, 40);
        recharge(40, 100);
        assert_eq!(LIVE_MEMORY.load(Ordering::Relaxed), before);
    }
}
