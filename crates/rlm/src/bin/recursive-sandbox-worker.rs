//! A stand-alone sandbox worker: runs the RLM's Python sessions for a host that is not itself a
//! worker (see `recursive_rlm::worker`). Started with or without the worker argument.

/// The worker's memory limit is enforced by this allocator.
#[global_allocator]
static ALLOC: monty_alloc::LimitedAllocator = monty_alloc::LimitedAllocator;

fn main() -> std::process::ExitCode {
    recursive_rlm::worker::serve()
}
