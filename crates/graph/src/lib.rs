//! Durable graphs: typed state with reducers, nodes of every kind the run tree knows (model
//! calls, agents, tools, RLMs, goal pursuits, people, sub-graphs, library functions), static
//! and conditional edges, and a superstep executor that checkpoints at every boundary —
//! so a crashed or interrupted thread resumes without running a finished node again, and
//! its history can be read, replayed and forked. Blueprints are the declarative text form:
//! parsed, compiled with located diagnostics, and bound against an allowlist before
//! anything runs. Checkpoints, leases and the job queue are kept by `recursive-store`; this
//! crate runs graphs on them.

pub mod blueprint;
pub mod events;
pub mod exec;
pub mod graph;
mod index;
pub mod jobs;
pub mod kinds;
pub mod node;
pub mod runnable;
pub mod state;
pub mod template;

pub use events::{GraphEvent, NodeOutcome};
pub use exec::{Finish, GraphError, GraphOutcome, Interruption, Start, Thread, fork};
pub use graph::{BuildError, END, Edge, Graph, GraphBuilder, Guard, Op, RecursionPolicy, START, Test};
pub use node::{FnNode, Nested, Node, NodeContext, NodeError, func};
pub use runnable::GraphRunnable;
pub use state::{Channel, Reducer, Schema, State, StateError, Update, ValueType};
pub use template::Template;
