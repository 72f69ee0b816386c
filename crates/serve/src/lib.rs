//! Recursive as a server (`recursive serve`): an HTTP runs API whose runs stream every event of
//! their run tree as Server-Sent Events, and an OpenAI-compatible chat endpoint whose models are
//! an agent and an RLM, so any OpenAI SDK can call them unchanged.
//!
//! - [`runs`]: the runs held by the server and the [`Runner`] that does the work;
//! - [`served`]: [`Served`], the runner over registered runnables (the CLI builds them with the
//!   harness);
//! - [`store`]: runs in flight in memory, the rest in the run archive (SQLite or PostgreSQL);
//! - [`queued`]: runs through the PostgreSQL job queue (`serve --enqueue`, run by workers);
//! - [`threads`]: graph threads over HTTP (create, run, resume, state, history, fork);
//! - [`server`]: the router, auth, limits, queue and shutdown;
//! - [`guard`]: the `Host` and `Origin` every request is checked for, and CORS;
//! - [`conversation`]: a client's conversation (either OpenAI API) as a run request, and the
//!   conversations that wait on a client's tool results;
//! - [`answer`]: the check of a structured answer;
//! - [`openai`]: `/v1/models` and `/v1/chat/completions`;
//! - [`responses`]: `/v1/responses` (OpenAI's Responses API);
//! - `langgraph`: the LangGraph Platform API (assistants, threads, runs, store) over the graph
//!   threads;
//! - [`mcp`]: an MCP server (tools `run`, `rlm`, `goal`) over stdio and at `/mcp`;
//! - [`web`]: the live web view at `/` (the runs and their trees, drawn as their events arrive).

pub mod answer;
mod body;
pub mod conversation;
mod durable;
pub mod guard;
mod langgraph;
pub mod mcp;
pub mod openai;
pub mod queued;
pub mod responses;
pub mod runs;
pub mod served;
pub mod server;
pub mod store;
pub mod threads;
pub mod web;

pub use runs::{RunKind, RunOutput, RunRecord, RunRequest, RunStatus, RunView, Runner};
pub use served::Served;
pub use server::{ServeConfig, ServeError, Server};
pub use store::{Retention, RunStore};
