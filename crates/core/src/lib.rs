//! Recursive's core: the conversation vocabulary, the `ChatProvider` and `Tool` traits, events
//! and sinks, the run tree with its shared budget, the agent loop, and sub-agents.
//!
//! Nothing here does HTTP, touches the filesystem beyond the JSONL logs a caller asks for, or
//! runs a sandbox; those live in the crates above.

pub mod event;
pub mod jsonl;
pub mod message;
pub mod mock;
pub mod provider;
pub mod run;
pub mod runtime;
pub mod serde_secs;
pub mod subagent;
pub mod text;
pub mod tool;
pub mod transcript;

pub use event::{
    AgentEvent, Decision, EventKind, EventSink, FanoutSink, JsonlSink, MemorySink, NullSink, RunIds, StderrSink,
};
pub use jsonl::{JsonlFile, JsonlReadError, read_jsonl};
pub use message::{Message, Role, ToolCall, ToolSpec, Usage};
pub use mock::{MockProvider, MockReply};
pub use provider::{
    ChatOptions, ChatProvider, ChatRequest, ChatResponse, ChatStream, ProviderError, ResponseFormat, StopReason,
    StreamEvent,
};
pub use run::{Budget, BudgetLimits, DepthError, FinishReason, RunScope};
pub use runtime::{Agent, AgentConfig, AgentError, AgentRuntime, RunLimits, RunResult};
pub use subagent::{SubAgent, SubAgentArgs, SubAgentError, SubAgentOutcome, SubAgentSession, SubAgentTool};
pub use tool::{
    GateVerdict, Tool, ToolContext, ToolError, ToolGate, ToolRegistry, Typed, TypedTool, schema_for, typed,
};
pub use transcript::{Transcript, TranscriptError, TranscriptLog};
