//! Durable RLM runs: after every iteration the top-level run keeps a checkpoint — the
//! conversation, the trajectory, the spend, and the REPL's state as the cells it executed with
//! every asynchronous host call's answer (sub-calls, tools, runnables) — in a
//! [`CheckpointSlot`] (the graph store gives them: a run of its own, or a graph node's). A
//! run started again with the same key resumes after its last completed iteration: a fresh
//! REPL re-executes the cells with those calls answered from the checkpoint (no model call is
//! made again), so its variables are back, and the loop goes on.
//!
//! Replay rather than an interpreter image: it works the same on both backends (Monty and
//! CPython), and a checkpoint's size does not grow with the inputs (they are bound again from
//! their source, not copied into every checkpoint). Calls answered at once by the host
//! (`SHOW_VARS`, `FINAL`…) are made again; they cost nothing.

use std::sync::{Arc, Mutex};

use monty_types::{ExcType, MontyException};
use recursive_core::{CheckpointSlot, Message, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::result::RlmIteration;
use crate::sandbox::{HostCall, HostReply, HostResult, SandboxHost};

/// The checkpoint format's version.
pub const CHECKPOINT_VERSION: u32 = 1;

/// How one host call of a cell was answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RecordedCall {
    /// Answered at once: made again on replay.
    Immediate,
    /// Asynchronous work that completed with this answer.
    Answered {
        /// The function.
        name: String,
        /// Its answer.
        answer: HostResult,
    },
    /// Asynchronous work that had not completed (the cell was stopped).
    Unfinished {
        /// The function.
        name: String,
    },
}

/// One executed snippet and its host calls, in call order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// The code.
    pub code: String,
    /// Its host calls.
    pub calls: Vec<RecordedCall>,
}

/// The state of a durable run after an iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RlmCheckpoint {
    /// [`CHECKPOINT_VERSION`].
    pub version: u32,
    /// What the caller keeps with the run (the CLI: the question and how to load the inputs).
    #[serde(default)]
    pub meta: Value,
    /// The question.
    pub question: String,
    /// Iterations completed.
    pub iteration: u32,
    /// The primary conversation.
    pub messages: Vec<Message>,
    /// The trajectory so far.
    pub trajectory: Vec<RlmIteration>,
    /// Every cell executed, in order.
    pub cells: Vec<Cell>,
    /// Tokens spent so far (the whole run tree under the RLM).
    pub usage: Usage,
    /// USD spent so far.
    pub cost_usd: f64,
    /// Model calls charged to the run's sub-call budget.
    pub sub_calls: u64,
    /// The submitted result, once the run finished with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted: Option<Value>,
}

/// A durable run's checkpoint slot and the caller's data kept with every checkpoint.
#[derive(Clone)]
pub struct Durable {
    /// Where its checkpoints go.
    pub slot: Arc<dyn CheckpointSlot>,
    /// Kept with every checkpoint (the CLI: the question and how to load the inputs).
    pub meta: Value,
    /// A checkpoint of another question or other inputs is an error (a resume asked for by a
    /// person); otherwise the run starts afresh over it (a graph node run again from an earlier
    /// checkpoint with a new input).
    pub strict: bool,
    /// The host restored the run's spend from its spend ledger ([`recursive_core::spend`]), which
    /// has every call — also those after the last checkpoint — so a resume does not count the
    /// checkpoint's spend again.
    pub spend_restored: bool,
}

impl std::fmt::Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable").field("slot", &self.slot.name()).finish()
    }
}

impl Durable {
    /// Saves a checkpoint.
    pub(crate) async fn save(&self, checkpoint: &RlmCheckpoint) -> Result<(), String> {
        let value = serde_json::to_value(checkpoint).map_err(|e| e.to_string())?;
        self.slot.save(&value).await
    }

    /// The latest checkpoint, if any.
    pub async fn load(&self) -> Result<Option<RlmCheckpoint>, String> {
        let Some(value) = self.slot.load().await? else { return Ok(None) };
        serde_json::from_value(value).map(Some).map_err(|e| format!("the stored checkpoint is unreadable: {e}"))
    }
}

/// Passes calls to the run's host and records how each was answered.
pub(crate) struct RecordingHost {
    live: Arc<dyn SandboxHost>,
    calls: Arc<Mutex<Vec<RecordedCall>>>,
}

impl RecordingHost {
    pub(crate) fn new(live: Arc<dyn SandboxHost>) -> Self {
        Self { live, calls: Arc::default() }
    }

    /// The calls recorded so far.
    pub(crate) fn calls(&self) -> Vec<RecordedCall> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

impl SandboxHost for RecordingHost {
    fn is_host_function(&self, name: &str) -> bool {
        self.live.is_host_function(name)
    }

    fn call(&self, call: HostCall) -> HostReply {
        let name = call.name.clone();
        let reply = self.live.call(call);
        let Ok(mut calls) = self.calls.lock() else { return reply };
        let index = calls.len();
        match reply {
            HostReply::Pending(work) => {
                calls.push(RecordedCall::Unfinished { name: name.clone() });
                let calls = self.calls.clone();
                HostReply::Pending(Box::pin(async move {
                    let answer = work.await;
                    if let Ok(mut c) = calls.lock()
                        && let Some(slot) = c.get_mut(index)
                    {
                        *slot = RecordedCall::Answered { name, answer: answer.clone() };
                    }
                    answer
                }))
            }
            other => {
                calls.push(RecordedCall::Immediate);
                other
            }
        }
    }
}

/// Answers a replayed cell's asynchronous calls from its record; calls answered at once go to
/// the run's host again.
pub(crate) struct ReplayHost {
    live: Arc<dyn SandboxHost>,
    calls: Mutex<std::collections::VecDeque<RecordedCall>>,
}

impl ReplayHost {
    pub(crate) fn new(live: Arc<dyn SandboxHost>, calls: Vec<RecordedCall>) -> Self {
        Self { live, calls: Mutex::new(calls.into()) }
    }
}

impl SandboxHost for ReplayHost {
    fn is_host_function(&self, name: &str) -> bool {
        self.live.is_host_function(name)
    }

    fn call(&self, call: HostCall) -> HostReply {
        let next = self.calls.lock().ok().and_then(|mut c| c.pop_front());
        let answer = match next {
            Some(RecordedCall::Immediate) => return self.live.call(call),
            Some(RecordedCall::Answered { name, answer }) if name == call.name => answer,
            Some(RecordedCall::Unfinished { name }) if name == call.name => Err(MontyException::new(
                ExcType::RuntimeError,
                Some(format!("{name}() did not finish before the run was stopped")),
            )),
            other => Err(MontyException::new(
                ExcType::RuntimeError,
                Some(format!(
                    "the replayed cell called {}() where the checkpoint has {}",
                    call.name,
                    other.map_or("no call".to_string(), |c| format!("{c:?}"))
                )),
            )),
        };
        HostReply::Pending(Box::pin(async move { answer }))
    }
}
