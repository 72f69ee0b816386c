//! The blueprint text format (TOML): the graph's name and limits, its state channels, its
//! nodes — each naming one capability (`model`, `agent`, `tool`, `rlm`, `goal`, `graph`,
//! `function`) or asking a person (`ask`) — and its edges with their conditions. Parsing
//! keeps every name's position for diagnostics; the JSON Schema comes from the same types.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::graph::Test;
use crate::state::{Reducer, ValueType};

/// A value with its position in the blueprint's text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct At<T>(pub toml::Spanned<T>);

impl<T> At<T> {
    /// The value.
    pub fn get(&self) -> &T {
        self.0.get_ref()
    }

    /// Its byte range in the text.
    pub fn span(&self) -> Range<usize> {
        self.0.span()
    }
}

impl<T: JsonSchema> JsonSchema for At<T> {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        T::schema_name()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        T::json_schema(generator)
    }
}

/// A graph, declared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Blueprint {
    /// The graph's name.
    pub name: At<String>,
    /// What it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Limits checked before each node runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<At<Limits>>,
    /// The state's channels by name: a type name (`topic = "string"`) or a table with `type`,
    /// `reducer` and `default`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub state: BTreeMap<String, At<ChannelDecl>>,
    /// The nodes, in the order their updates are folded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeDecl>,
    /// The edges (`from = "START"` names the first nodes; `to = "END"` ends a branch).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edges: Vec<EdgeDecl>,
}

/// The recursion policy's limits (each optional; defaults: 100 supersteps, 25 visits, depth 8).
/// Whoever binds the blueprint may cap them (see [`crate::blueprint::limits`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Most supersteps of one run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_supersteps: Option<At<u32>>,
    /// Most runs of one node in one run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_visits: Option<At<u32>>,
    /// Deepest run-tree level a node may run at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<At<u32>>,
}

impl Limits {
    /// Each limit by its key, as declared.
    pub fn each(&self) -> [(&'static str, Option<&At<u32>>); 3] {
        [
            ("max_supersteps", self.max_supersteps.as_ref()),
            ("max_visits", self.max_visits.as_ref()),
            ("max_depth", self.max_depth.as_ref()),
        ]
    }
}

/// A channel: a type name, or a table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ChannelDecl {
    /// `topic = "string"`: a last-value channel of that type.
    Type(ValueType),
    /// `notes = { type = "list", reducer = "append" }`.
    Full {
        /// The value type.
        #[serde(rename = "type")]
        kind: ValueType,
        /// How updates are folded (default `last`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reducer: Option<Reducer>,
        /// The starting value.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        default: Option<Value>,
    },
}

impl ChannelDecl {
    /// Type, reducer and default.
    pub fn parts(&self) -> (ValueType, Reducer, Option<&Value>) {
        match self {
            ChannelDecl::Type(t) => (*t, Reducer::Last, None),
            ChannelDecl::Full { kind, reducer, default } => (*kind, reducer.unwrap_or_default(), default.as_ref()),
        }
    }
}

/// Pause the run before or after a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PauseAt {
    /// Before it runs.
    Before,
    /// After it ran.
    After,
}

/// A node: its name, one capability (or `ask`), its inputs and its output channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeDecl {
    /// Unique name.
    pub name: At<String>,
    /// One model call with `prompt` (and `system`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<At<String>>,
    /// An agent run (the tool loop) on `input`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<At<String>>,
    /// One tool call with `args`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<At<String>>,
    /// A recursive language model answering `question` over the `inputs` channels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rlm: Option<At<String>>,
    /// A goal pursuit of `objective`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<At<String>>,
    /// A sub-graph (a blueprint by name), sharing channels or mapped by `map_in`/`map_out`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<At<String>>,
    /// A function registered by the program running the graph.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<At<String>>,
    /// Ask a person this question; the run waits for the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask: Option<At<String>>,
    /// The prompt of a `model` node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<At<String>>,
    /// The system text of a `model` node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<At<String>>,
    /// The provider of a `model` node's call, by the name the program running the graph
    /// configured it under (`[providers.NAME]`); its model is that provider's. Default: the
    /// model's own provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<At<String>>,
    /// The input of an `agent` node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<At<String>>,
    /// The arguments of a `tool` node (strings are templates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<At<Value>>,
    /// The question of an `rlm` node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<At<String>>,
    /// The channels an `rlm` node reads as its inputs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<At<String>>,
    /// The objective of a `goal` node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objective: Option<At<String>>,
    /// Sub-graph channel ← this graph's channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map_in: Option<At<BTreeMap<String, String>>>,
    /// This graph's channel ← sub-graph channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map_out: Option<At<BTreeMap<String, String>>>,
    /// The channel the result goes to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<At<String>>,
    /// Pause the run before or after this node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt: Option<PauseAt>,
}

/// The node's capability kind and name (or the question, for `ask`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A model.
    Model,
    /// An agent.
    Agent,
    /// A tool.
    Tool,
    /// An RLM.
    Rlm,
    /// A goal pursuer.
    Goal,
    /// A sub-graph.
    Graph,
    /// A function.
    Function,
    /// A question.
    Ask,
}

impl Kind {
    /// The key that declares it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Model => "model",
            Kind::Agent => "agent",
            Kind::Tool => "tool",
            Kind::Rlm => "rlm",
            Kind::Goal => "goal",
            Kind::Graph => "graph",
            Kind::Function => "function",
            Kind::Ask => "ask",
        }
    }
}

impl NodeDecl {
    /// The capabilities it names (exactly one is valid).
    pub fn kinds(&self) -> Vec<(Kind, &At<String>)> {
        [
            (Kind::Model, &self.model),
            (Kind::Agent, &self.agent),
            (Kind::Tool, &self.tool),
            (Kind::Rlm, &self.rlm),
            (Kind::Goal, &self.goal),
            (Kind::Graph, &self.graph),
            (Kind::Function, &self.function),
            (Kind::Ask, &self.ask),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
        .collect()
    }
}

/// Edge targets: one node or several (a fan-out).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Targets {
    /// One.
    One(String),
    /// Several, run in the same superstep.
    Many(Vec<String>),
}

impl Targets {
    /// Each target.
    pub fn each(&self) -> Vec<&String> {
        match self {
            Targets::One(t) => vec![t],
            Targets::Many(ts) => ts.iter().collect(),
        }
    }
}

/// An edge: always taken, taken `when` a test of the state holds, or taken `otherwise` (when
/// no conditional edge from the same node is).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EdgeDecl {
    /// A node, or `START`.
    pub from: At<String>,
    /// A node or `END`, or a list of them.
    pub to: At<Targets>,
    /// The test (`{ channel = "verdict", contains = "APPROVE" }`; comparisons: equals,
    /// not_equals, contains, not_contains, lt, le, gt, ge, exists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<At<Test>>,
    /// Taken when no `when` edge from the same node is.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub otherwise: bool,
}
