//! Recursive's core: the conversation vocabulary, the `ChatProvider` and `Tool` traits, events
//! and sinks, the run tree, and the spine every path of the tree uses — one guarded model call
//! ([`RunScope::call_model`]), one tool executor ([`ToolInvoker`]) and one budget tree
//! ([`Budget`]) — then the agent loop and sub-agents built on it.
//!
//! Nothing here does HTTP, touches the filesystem beyond the JSONL logs a caller asks for, or
//! runs a sandbox; those live in the crates above.

pub mod answers;
pub mod asks;
pub mod budget;
pub mod compact;
pub mod config_trust;
pub mod confine;
pub mod env;
pub mod event;
pub mod inbox;
pub mod invoke;
pub mod items;
pub mod journal;
pub mod jsonl;
pub mod message;
pub mod mock;
pub mod provider;
pub mod reply;
pub mod run;
pub mod runnable;
pub mod runtime;
pub mod serde_secs;
pub mod spend;
pub mod subagent;
pub mod text;
pub mod tool;
pub mod transcript;

pub use answers::{AnswerBoard, ClientAnswer, Question};
pub use asks::{AnswerCheck, Asks, CheckAnswer};
pub use budget::{Budget, BudgetLimitError, BudgetLimits};
pub use event::{
    AgentEvent, Decision, EventKind, EventSink, Extension, ExtensionEvent, FanoutSink, JsonlSink, MemorySink,
    ModelCallInfo, NullSink, RunIds, StderrSink,
};
pub use inbox::{Inbox, InboxEvent};
pub use invoke::{ToolInvoker, ToolLimits, ToolOutcome};
pub use jsonl::{
    CutRecord, JsonlFile, JsonlReadError, JsonlRecords, MemoryRecords, StoredRecords, read_jsonl, read_jsonl_records,
};
pub use message::{Message, Reasoning, Role, ToolCall, ToolSpec, Usage};
pub use mock::{MockProvider, MockReply};
pub use provider::{
    CallPrice, ChatOptions, ChatProvider, ChatRequest, ChatResponse, ChatStream, ProviderError, ResponseFormat,
    StopReason, StreamEvent, ToolChoice,
};
pub use run::{DepthError, FinishReason, ModelCall, ModelCallError, RunScope, StopToken};
pub use runnable::{
    CheckpointHandle, CheckpointSlot, Outcome, RunInput, Runnable, RunnableKind, RunnableTool, Runnables, WithData,
    run_as, run_child, runnable_spec,
};
pub use runtime::{Agent, AgentConfig, AgentError, AgentRuntime, LateTools, RunError, RunLimits, RunResult};
pub use spend::{JsonlSpendLedger, MemorySpendLedger, RecordsLedger, SpendLedger, SpendRecord, SpendTotal};
pub use subagent::{SubAgent, SubAgentSession, agent_outcome};
pub use tool::{
    GateVerdict, PathScreen, Tool, ToolContext, ToolError, ToolGate, ToolOrigin, ToolRegistry, Typed, TypedTool,
    call_arguments, path_arguments, schema_for, typed,
};
pub use transcript::{Recovered, Transcript, TranscriptError, TranscriptLog};
