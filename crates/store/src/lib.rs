//! Durable storage for every run of the tree: graph checkpoints and the run slots of RLMs
//! ([`checkpoint`], with the in-memory, [`sqlite`] and [`postgres`] backends behind one
//! [`Checkpointer`] contract), the archive of served runs ([`archive`]), one runner per thread
//! ([`lease`]), durable runs' journals ([`journal`]), the one way a durable run is run
//! ([`durable`]: lease, journal, run, end, release), the PostgreSQL job queue ([`queue`]) and the generic worker that claims its jobs
//! ([`worker`]). Nothing here knows how a graph runs: records hold a graph's state as JSON
//! values, and the engines above convert.

pub mod archive;
pub mod checkpoint;
pub mod durable;
pub mod format;
pub mod journal;
pub mod lease;
pub mod postgres;
pub mod queue;
pub mod slot;
pub mod sqlite;
pub mod status;
pub mod worker;

pub use archive::{ArchivedRun, MemoryArchive, Retention, RunArchive, RunQuery, RunWrite, open_archive};
pub use checkpoint::{
    BlueprintSource, Checkpoint, Checkpointer, Listed, MemoryCheckpointer, Pause, PendingWrite, Source, StoreError,
    ThreadInfo, Unreadable, When, Write, open,
};
pub use durable::{DurableKey, HeldRun, Runner, run_durable};
pub use format::FORMAT;
pub use journal::StoreLedger;
pub use lease::{LEASE_TTL, Lease, LeaseError};
pub use postgres::PostgresCheckpointer;
pub use slot::StoreSlot;
pub use sqlite::{SqliteCheckpointer, SqliteRecords};
pub use status::ThreadStatus;
