//! Test support for Recursive (a dev-dependency only):
//!
//! - [`ModelServer`]: a scripted model server on 127.0.0.1 that speaks OpenAI Chat Completions
//!   and Anthropic Messages (streaming and not), answers from a script of [`Reply`]s and
//!   standing rules, and records every request so a test can assert on the 2nd and 3rd
//!   request of a run; a [`Reply::raw`] reply writes exact bytes in pieces for framing tests;
//! - [`check_pairing`]: every tool call of a recorded request has exactly one result, in order;
//! - [`tools`]: tool fixtures ([`EchoTool`], [`SlowTool`], [`FailingTool`], [`CountingTool`]);
//! - [`mcp`]: a scripted stdio MCP server (plain Python) and watchers of its processes;
//! - [`wait_until`]: polls a condition instead of sleeping a fixed time;
//! - [`texts::haystack`]: a large log-like input with one needle, for tests and benchmarks;
//! - [`postgres::TestSchema`]: a schema of its own on the shared test PostgreSQL server;
//! - [`require_env`]: a prerequisite a test cannot run without fails the test, unless skipping
//!   is asked for with `RECURSIVE_ALLOW_SKIP=1`.

pub mod env;
pub mod mcp;
pub mod pairing;
pub mod postgres;
pub mod reply;
pub mod server;
mod sse;
pub mod texts;
pub mod tools;
pub mod wait;

pub use env::{ALLOW_SKIP_VAR, require_env};
pub use pairing::{Api, PairingError, check_pairing};
pub use reply::{Reply, Script};
pub use server::{ModelServer, PairingViolation, RecordedRequest};
pub use tools::{CountingTool, EchoTool, FailingTool, SlowTool};
pub use wait::{eventually, wait_until};
