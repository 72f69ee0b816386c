//! A stand-alone sandbox worker: runs the RLM's Python sessions for a host that is not itself a
//! worker (see `recursive_rlm::worker`). Started with or without the worker argument.

/// The worker's memory limit is enforced by this allocator (`serve` switches it to the worker's).
#[global_allocator]
static ALLOC: recursive_alloc::HostOrWorker = recursive_alloc::HostOrWorker;

fn main() -> std::process::ExitCode {
    recursive_rlm::worker::serve()
}
