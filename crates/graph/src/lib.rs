//! Durable graphs: typed state with reducers, nodes of every kind the run tree knows (model
//! calls, agents, tools, RLMs, goal pursuits, people, sub-graphs, library functions), static
//! and conditional edges, and a superstep executor that checkpoints at every boundary —
//! so a crashed or interrupted thread resumes without running a finished node again, and
//! its history can be read, replayed and forked. Blueprints are the declarative text form:
//! parsed, compiled with located diagnostics, and bound against an allowlist before
//! anything runs.

pub mod archive;
pub mod blueprint;
pub mod checkpoint;
pub mod events;
pub mod exec;
pub mod graph;
pub mod kinds;
pub mod lease;
pub mod node;
pub mod postgres;
pub mod queue;
pub mod runnable;
pub mod slot;
pub mod sqlite;
pub mod state;
pub mod template;
pub mod worker;

pub use archive::{ArchivedRun, MemoryArchive, Retention, RunArchive, RunQuery, RunWrite, open_archive};
pub use checkpoint::{
    Checkpoint, Checkpointer, Listed, MemoryCheckpointer, PendingWrite, StoreError, ThreadInfo, Unreadable, When, Write,
};
pub use events::{GraphEvent, NodeOutcome};
pub use exec::{Finish, GraphError, GraphOutcome, Interruption, Start, Thread, fork};
pub use graph::{BuildError, END, Edge, Graph, GraphBuilder, Guard, Op, RecursionPolicy, START, Test};
pub use lease::{LEASE_TTL, Lease, LeaseError};
pub use node::{FnNode, Nested, Node, NodeContext, NodeError, func};
pub use postgres::PostgresCheckpointer;
pub use runnable::GraphRunnable;
pub use slot::StoreSlot;
pub use sqlite::SqliteCheckpointer;
pub use state::{Channel, Reducer, Schema, State, StateError, Update, ValueType};
pub use template::Template;
