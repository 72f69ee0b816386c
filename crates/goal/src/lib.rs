//! Recursive goal pursuit: one abstraction, the goal (a string), pursued at any depth by one
//! function — assess whether it is directly executable; execute it with an action, or
//! decompose it into sub-goals and pursue those in dependency layers (concurrently within a
//! layer); stop early once the goal is judged achieved, decompose again for what remains when
//! it is not; synthesize the sub-results. Every prompt fits a character budget, every result a
//! size; a pursuit replays from a cassette and resumes from its log.
//!
//! Every goal runs in its own node of the caller's run tree, so usage, cost and budgets are
//! shared with everything else, and every step is logged (JSONL) and emitted as a
//! `goal_<event>` event.

pub mod actions;
pub mod assemble;
pub mod config;
pub mod context;
mod digest;
pub mod layers;
pub mod log;
pub mod outcome;
pub mod prompts;
pub mod pursuer;
pub mod resume;
pub mod runnable;
pub mod similarity;
pub mod structured;
mod tree;

pub use actions::{
    ActionError, ActionExecutor, ActionOutput, ActionRegistry, ActionRequest, DelegateAction, ModelAction, ToolAction,
    compact_tool,
};
pub use assemble::Prompt;
pub use config::{Constraints, GoalConfig, SimilarityMetric};
pub use context::{Evidence, GoalContext};
pub use layers::{Layering, layer};
pub use log::{ExecutionLog, GoalEvent, GoalEventKind, GoalRunEvent, LogReadError, trace, trace_id};
pub use outcome::{GoalOutcome, GoalResult, GoalStatus};
pub use prompts::Phase;
pub use pursuer::{GoalError, GoalObserver, GoalPursuer};
pub use resume::{ResumeError, ResumeLog};
pub use similarity::{CycleKind, CycleMatch, EmbedError, Embedder, HttpEmbedder, cosine, normalize, text_similarity};
pub use structured::{
    AchievedCheck, ActionPlan, Assessment, Complexity, Decomposition, ParseError, SubGoalPlan, SynthesisOutput,
    output_schema, parse_lenient,
};
