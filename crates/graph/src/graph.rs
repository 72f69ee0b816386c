//! A compiled graph: the state's channels, named nodes in declaration order (the order their
//! updates are folded in), edges that are static, conditional on a test of the state, or
//! taken otherwise, the nodes to interrupt before or after, and the recursion policy.

use std::collections::BTreeSet;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::index::Index;
use crate::node::Node;
use crate::state::{Channel, Schema, State, ValueType};

/// The edge source that names the nodes a run starts with.
pub const START: &str = "START";
/// The edge target that ends a branch.
pub const END: &str = "END";

/// Limits checked before a node runs; each is a typed finish when reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RecursionPolicy {
    /// Most supersteps one run of the graph takes.
    pub max_supersteps: u32,
    /// Most times one node runs in a run of the graph.
    pub max_visits: u32,
    /// Deepest level of the run tree a node of this graph may run at (nested graphs,
    /// agents and goals add levels).
    pub max_depth: u32,
}

impl Default for RecursionPolicy {
    fn default() -> Self {
        Self { max_supersteps: 100, max_visits: 25, max_depth: 8 }
    }
}

/// A comparison of a channel's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Equal to this JSON value.
    Equals(Value),
    /// Not equal to this JSON value.
    NotEquals(Value),
    /// Text containing this (case-insensitive), or a list with an item equal to it.
    Contains(String),
    /// The opposite of `contains`.
    NotContains(String),
    /// A number less than this (a list or text: its length).
    Lt(f64),
    /// Less than or equal.
    Le(f64),
    /// Greater than.
    Gt(f64),
    /// Greater than or equal.
    Ge(f64),
    /// `true`: set and not empty; `false`: null or empty.
    Exists(bool),
}

/// A test of the state that guards an edge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Test {
    /// The channel tested.
    pub channel: String,
    /// The comparison.
    #[serde(flatten)]
    pub op: Op,
}

impl Test {
    /// Whether the state passes.
    pub fn holds(&self, state: &State) -> bool {
        let value = state.get(&self.channel).unwrap_or(&Value::Null);
        match &self.op {
            Op::Equals(v) => value == v,
            Op::NotEquals(v) => value != v,
            Op::Contains(s) => contains(value, s),
            Op::NotContains(s) => !contains(value, s),
            Op::Lt(n) => magnitude(value).is_some_and(|m| m < *n),
            Op::Le(n) => magnitude(value).is_some_and(|m| m <= *n),
            Op::Gt(n) => magnitude(value).is_some_and(|m| m > *n),
            Op::Ge(n) => magnitude(value).is_some_and(|m| m >= *n),
            Op::Exists(want) => !is_empty(value) == *want,
        }
    }

    /// The channel types the comparison makes sense on.
    pub fn fits(&self, kind: ValueType) -> bool {
        match &self.op {
            // `equals "yes"` on an integer channel can never hold (null always can).
            Op::Equals(v) | Op::NotEquals(v) => kind.accepts(v),
            Op::Exists(_) => true,
            Op::Contains(_) | Op::NotContains(_) => {
                matches!(kind, ValueType::String | ValueType::List | ValueType::Any)
            }
            _ => matches!(
                kind,
                ValueType::Number | ValueType::Integer | ValueType::List | ValueType::String | ValueType::Any
            ),
        }
    }
}

fn contains(value: &Value, needle: &str) -> bool {
    match value {
        Value::String(s) => s.to_lowercase().contains(&needle.to_lowercase()),
        Value::Array(items) => items.iter().any(|i| i.as_str() == Some(needle)),
        _ => false,
    }
}

fn magnitude(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::Array(a) => Some(a.len() as f64),
        Value::String(s) => Some(s.chars().count() as f64),
        _ => None,
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// What decides whether an edge is taken.
#[derive(Clone)]
pub enum Guard {
    /// Always.
    Always,
    /// When the test holds.
    When(Test),
    /// When a library function of the state says so.
    Custom(Arc<dyn Fn(&State) -> bool + Send + Sync>),
    /// When no guarded edge from the same node was taken.
    Otherwise,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Guard::Always => f.write_str("Always"),
            Guard::When(t) => write!(f, "When({t:?})"),
            Guard::Custom(_) => f.write_str("Custom"),
            Guard::Otherwise => f.write_str("Otherwise"),
        }
    }
}

/// An edge.
#[derive(Debug, Clone)]
pub struct Edge {
    /// A node, or [`START`].
    pub from: String,
    /// A node, or [`END`].
    pub to: String,
    /// When it is taken.
    pub guard: Guard,
}

/// A graph that is wrongly put together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("graph `{graph}`: {message}")]
pub struct BuildError {
    /// The graph.
    pub graph: String,
    /// What is wrong.
    pub message: String,
}

/// A graph ready to run.
#[derive(Clone)]
pub struct Graph {
    pub(crate) name: String,
    pub(crate) schema: Schema,
    pub(crate) nodes: Vec<(String, Arc<dyn Node>)>,
    pub(crate) edges: Vec<Edge>,
    pub(crate) interrupt_before: BTreeSet<String>,
    pub(crate) interrupt_after: BTreeSet<String>,
    pub(crate) policy: RecursionPolicy,
    /// Lookups computed when it is built.
    pub(crate) index: Index,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("name", &self.name)
            .field("nodes", &self.nodes.iter().map(|(n, _)| n).collect::<Vec<_>>())
            .field("edges", &self.edges)
            .finish()
    }
}

impl Graph {
    /// Starts a graph named `name`.
    pub fn builder(name: impl Into<String>) -> GraphBuilder {
        GraphBuilder {
            graph: Graph {
                name: name.into(),
                schema: Schema::new(),
                nodes: Vec::new(),
                edges: Vec::new(),
                interrupt_before: BTreeSet::new(),
                interrupt_after: BTreeSet::new(),
                policy: RecursionPolicy::default(),
                index: Index::default(),
            },
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its state's channels.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Its policy.
    pub fn policy(&self) -> &RecursionPolicy {
        &self.policy
    }

    /// Node names, in declaration order.
    pub fn node_names(&self) -> impl Iterator<Item = &str> {
        self.nodes.iter().map(|(n, _)| n.as_str())
    }

    pub(crate) fn node(&self, name: &str) -> Option<&Arc<dyn Node>> {
        self.index.position(name).and_then(|p| self.nodes.get(p)).map(|(_, node)| node)
    }

    fn position(&self, name: &str) -> usize {
        self.index.position(name).unwrap_or(usize::MAX)
    }

    /// Sorts node names into declaration order.
    pub(crate) fn in_order(&self, names: impl IntoIterator<Item = String>) -> Vec<String> {
        let mut set: Vec<String> = names.into_iter().collect::<BTreeSet<_>>().into_iter().collect();
        set.sort_by_key(|n| self.position(n));
        set
    }

    /// The nodes edges from `sources` lead to on `state` (ends dropped), in declaration order.
    pub(crate) fn route(&self, sources: &[String], state: &State) -> Vec<String> {
        let mut next = Vec::new();
        for source in sources {
            let out: Vec<&Edge> = self.index.outgoing(source).iter().filter_map(|&i| self.edges.get(i)).collect();
            let mut guarded_taken = false;
            for edge in &out {
                let taken = match &edge.guard {
                    Guard::Always => true,
                    Guard::When(t) => t.holds(state),
                    Guard::Custom(f) => f(state),
                    Guard::Otherwise => continue,
                };
                if taken {
                    guarded_taken |= !matches!(edge.guard, Guard::Always);
                    next.push(edge.to.clone());
                }
            }
            if !guarded_taken {
                next.extend(out.iter().filter(|e| matches!(e.guard, Guard::Otherwise)).map(|e| e.to.clone()));
            }
        }
        self.in_order(next.into_iter().filter(|n| n != END))
    }
}

/// Builds a [`Graph`] in code (blueprints build one too).
pub struct GraphBuilder {
    graph: Graph,
}

impl GraphBuilder {
    /// Adds a channel.
    pub fn channel(mut self, name: impl Into<String>, channel: Channel) -> Self {
        self.graph.schema = self.graph.schema.with(name, channel);
        self
    }

    /// Adds a node (declaration order is the order updates are folded in).
    pub fn node(mut self, name: impl Into<String>, node: Arc<dyn Node>) -> Self {
        self.graph.nodes.push((name.into(), node));
        self
    }

    /// Adds an edge always taken.
    pub fn edge(self, from: impl Into<String>, to: impl Into<String>) -> Self {
        self.guarded(from, to, Guard::Always)
    }

    /// Adds an edge taken when `test` holds.
    pub fn edge_when(self, from: impl Into<String>, to: impl Into<String>, test: Test) -> Self {
        self.guarded(from, to, Guard::When(test))
    }

    /// Adds an edge with any guard.
    pub fn guarded(mut self, from: impl Into<String>, to: impl Into<String>, guard: Guard) -> Self {
        self.graph.edges.push(Edge { from: from.into(), to: to.into(), guard });
        self
    }

    /// Stops before `node` runs, until the thread is resumed.
    pub fn interrupt_before(mut self, node: impl Into<String>) -> Self {
        self.graph.interrupt_before.insert(node.into());
        self
    }

    /// Stops after `node` ran, until the thread is resumed.
    pub fn interrupt_after(mut self, node: impl Into<String>) -> Self {
        self.graph.interrupt_after.insert(node.into());
        self
    }

    /// Uses this policy.
    pub fn policy(mut self, policy: RecursionPolicy) -> Self {
        self.graph.policy = policy;
        self
    }

    /// Checks that every edge and interrupt names a node, nodes are unique, something starts,
    /// and every reducer fits its channel.
    pub fn build(self) -> Result<Graph, BuildError> {
        let mut g = self.graph;
        let fail = |message: String| BuildError { graph: g.name.clone(), message };
        let mut seen = BTreeSet::new();
        for (name, _) in &g.nodes {
            if name == START || name == END || !seen.insert(name.as_str()) {
                return Err(fail(format!("node name `{name}` is reserved or used twice")));
            }
        }
        for edge in &g.edges {
            if edge.from != START && !seen.contains(edge.from.as_str()) {
                return Err(fail(format!("an edge starts at unknown node `{}`", edge.from)));
            }
            if edge.to != END && !seen.contains(edge.to.as_str()) {
                return Err(fail(format!("an edge leads to unknown node `{}`", edge.to)));
            }
        }
        if !g.edges.iter().any(|e| e.from == START) {
            return Err(fail(format!("no edge from {START}: nothing would run")));
        }
        for name in g.interrupt_before.iter().chain(&g.interrupt_after) {
            if !seen.contains(name.as_str()) {
                return Err(fail(format!("an interrupt names unknown node `{name}`")));
            }
        }
        for (name, channel) in g.schema.channels() {
            channel.check().map_err(|e| fail(format!("channel `{name}`: {e}")))?;
        }
        g.index = Index::new(g.nodes.iter().map(|(n, _)| n.as_str()), &g.edges);
        Ok(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::func;
    use serde_json::{Map, json};

    fn noop() -> Arc<dyn Node> {
        func(|_| Ok(Map::new()))
    }

    fn state(v: Value) -> State {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn tests_compare_text_numbers_and_lists() {
        let t = |channel: &str, op: Op| Test { channel: channel.into(), op };
        let s = state(json!({"verdict": "APPROVED, ship it", "score": 7, "tags": ["a"], "none": null}));
        assert!(t("verdict", Op::Contains("approved".into())).holds(&s));
        assert!(!t("verdict", Op::NotContains("ship".into())).holds(&s));
        assert!(t("score", Op::Lt(8.0)).holds(&s) && !t("score", Op::Gt(7.0)).holds(&s));
        assert!(t("tags", Op::Contains("a".into())).holds(&s) && t("tags", Op::Ge(1.0)).holds(&s));
        assert!(t("none", Op::Exists(false)).holds(&s) && !t("missing", Op::Exists(true)).holds(&s));
        assert!(t("score", Op::Equals(json!(7))).holds(&s));
    }

    #[test]
    fn otherwise_is_taken_only_when_no_guarded_edge_is() {
        let g = Graph::builder("g")
            .node("check", noop())
            .node("fix", noop())
            .node("ship", noop())
            .edge(START, "check")
            .edge_when("check", "ship", Test { channel: "ok".into(), op: Op::Equals(json!(true)) })
            .guarded("check", "fix", Guard::Otherwise)
            .build()
            .unwrap();
        let from = ["check".to_string()];
        assert_eq!(g.route(&from, &state(json!({"ok": true}))), ["ship"]);
        assert_eq!(g.route(&from, &state(json!({"ok": false}))), ["fix"]);
    }

    #[test]
    fn routes_come_out_in_declaration_order_without_duplicates_or_end() {
        let g = Graph::builder("g")
            .node("a", noop())
            .node("b", noop())
            .node("c", noop())
            .edge(START, "a")
            .edge(START, "b")
            .edge("a", "c")
            .edge("b", "c")
            .edge("b", END)
            .build()
            .unwrap();
        assert_eq!(g.route(&["b".into(), "a".into()], &State::new()), ["c"]);
        assert_eq!(g.route(&[START.into()], &State::new()), ["a", "b"]);
    }

    #[test]
    fn building_refuses_unknown_nodes_and_a_graph_without_a_start() {
        let e = Graph::builder("g").node("a", noop()).edge(START, "b").build().unwrap_err();
        assert!(e.message.contains("unknown node `b`"), "{e}");
        let e = Graph::builder("g").node("a", noop()).build().unwrap_err();
        assert!(e.message.contains("no edge from START"), "{e}");
        let e = Graph::builder("g").node("a", noop()).edge(START, "a").interrupt_before("z").build().unwrap_err();
        assert!(e.message.contains("`z`"), "{e}");
    }
}
