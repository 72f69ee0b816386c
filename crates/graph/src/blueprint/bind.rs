//! Bind: every capability a compiled blueprint names — models, agents, tools, RLMs, goal
//! pursuers, sub-graphs, functions — is looked up in an allowlist. Anything not on it fails
//! here, with its position, before any node runs; what is on it becomes a runnable [`Graph`].

use std::collections::BTreeMap;
use std::sync::Arc;

use recursive_core::{Agent, ChatOptions, ChatProvider, ToolInvoker};
use recursive_goal::GoalPursuer;
use recursive_rlm::Rlm;

use crate::blueprint::compile::{channels, compile};
use crate::blueprint::diag::{Diagnostic, Diagnostics};
use crate::blueprint::format::{At, Blueprint, Kind, NodeDecl, PauseAt};
use crate::graph::{Graph, Guard, RecursionPolicy};
use crate::kinds::{AgentNode, AskNode, GoalNode, ModelNode, RlmNode, SubgraphNode, ToolNode};
use crate::node::Node;
use crate::template::Template;

/// A blueprint's text and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// A path or a name, for diagnostics.
    pub origin: String,
    /// The text.
    pub text: String,
}

/// What a blueprint may use, by name. Nothing else can be reached from a blueprint.
#[derive(Default, Clone)]
pub struct Allowlist {
    models: BTreeMap<String, (Arc<dyn ChatProvider>, ChatOptions)>,
    agents: BTreeMap<String, Arc<Agent>>,
    tools: Option<(ToolInvoker, Vec<String>)>,
    rlms: BTreeMap<String, Arc<Rlm>>,
    goals: BTreeMap<String, Arc<GoalPursuer>>,
    graphs: BTreeMap<String, Source>,
    functions: BTreeMap<String, Arc<dyn Node>>,
}

impl std::fmt::Debug for Allowlist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allowlist")
            .field("models", &self.models.keys().collect::<Vec<_>>())
            .field("agents", &self.agents.keys().collect::<Vec<_>>())
            .field("tools", &self.tools.as_ref().map(|t| &t.1))
            .field("graphs", &self.graphs.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Allowlist {
    /// Nothing allowed.
    pub fn new() -> Self {
        Self::default()
    }

    /// Allows a model by name, called with these options.
    pub fn model(mut self, name: impl Into<String>, provider: Arc<dyn ChatProvider>, options: ChatOptions) -> Self {
        self.models.insert(name.into(), (provider, options));
        self
    }

    /// Allows an agent by name.
    pub fn agent(mut self, name: impl Into<String>, agent: Arc<Agent>) -> Self {
        self.agents.insert(name.into(), agent);
        self
    }

    /// Allows the named tools of this executor (its permission gate still applies to each call).
    pub fn tools(mut self, invoker: ToolInvoker, names: Vec<String>) -> Self {
        self.tools = Some((invoker, names));
        self
    }

    /// Allows an RLM by name.
    pub fn rlm(mut self, name: impl Into<String>, rlm: Arc<Rlm>) -> Self {
        self.rlms.insert(name.into(), rlm);
        self
    }

    /// Allows a goal pursuer by name.
    pub fn goal(mut self, name: impl Into<String>, pursuer: Arc<GoalPursuer>) -> Self {
        self.goals.insert(name.into(), pursuer);
        self
    }

    /// Allows a sub-graph by name.
    pub fn graph(mut self, name: impl Into<String>, source: Source) -> Self {
        self.graphs.insert(name.into(), source);
        self
    }

    /// Allows a library function by name.
    pub fn function(mut self, name: impl Into<String>, node: Arc<dyn Node>) -> Self {
        self.functions.insert(name.into(), node);
        self
    }

    /// The names allowed for a kind, for messages.
    pub fn names(&self, kind: Kind) -> Vec<String> {
        match kind {
            Kind::Model => self.models.keys().cloned().collect(),
            Kind::Agent => self.agents.keys().cloned().collect(),
            Kind::Tool => self.tools.as_ref().map(|t| t.1.clone()).unwrap_or_default(),
            Kind::Rlm => self.rlms.keys().cloned().collect(),
            Kind::Goal => self.goals.keys().cloned().collect(),
            Kind::Graph => self.graphs.keys().cloned().collect(),
            Kind::Function => self.functions.keys().cloned().collect(),
            Kind::Ask => Vec::new(),
        }
    }
}

/// Compiles and binds `source` against `allow`: a runnable graph, or every problem found.
pub fn load(source: &Source, allow: &Allowlist) -> Result<Graph, Diagnostics> {
    let bp = compile(&source.text, &source.origin)?;
    bind(&bp, source, allow, &mut vec![bp.name.get().clone()])
}

/// Binds a compiled blueprint. `stack` holds the names of the graphs being bound around it
/// (a graph that contains itself is refused).
fn bind(bp: &Blueprint, source: &Source, allow: &Allowlist, stack: &mut Vec<String>) -> Result<Graph, Diagnostics> {
    let mut d = Diagnostics::new(&source.origin, &source.text);
    let mut builder = Graph::builder(bp.name.get().clone());
    for (name, channel) in channels(bp) {
        builder = builder.channel(name, channel);
    }
    for node in &bp.nodes {
        match bind_node(node, allow, stack) {
            Ok(bound) => builder = builder.node(node.name.get().clone(), bound),
            Err(diag) => d.push(diag),
        }
        builder = match node.interrupt {
            Some(PauseAt::Before) => builder.interrupt_before(node.name.get().clone()),
            Some(PauseAt::After) => builder.interrupt_after(node.name.get().clone()),
            None => builder,
        };
    }
    d.into_result()?;
    for edge in &bp.edges {
        for to in edge.to.get().each() {
            let guard = match (&edge.when, edge.otherwise) {
                (Some(test), _) => Guard::When(test.get().clone()),
                (None, true) => Guard::Otherwise,
                (None, false) => Guard::Always,
            };
            builder = builder.guarded(edge.from.get().clone(), to.clone(), guard);
        }
    }
    let limits = bp.limits.as_ref().map(|l| l.get().clone()).unwrap_or_default();
    let defaults = RecursionPolicy::default();
    builder = builder.policy(RecursionPolicy {
        max_supersteps: limits.max_supersteps.unwrap_or(defaults.max_supersteps),
        max_visits: limits.max_visits.unwrap_or(defaults.max_visits),
        max_depth: limits.max_depth.unwrap_or(defaults.max_depth),
    });
    builder.build().map_err(|e| {
        let mut d = Diagnostics::new(&source.origin, &source.text);
        d.push(Diagnostic::new(e.message, bp.name.span()));
        d
    })
}

fn template(field: &Option<At<String>>) -> Template {
    field.as_ref().and_then(|t| Template::parse(t.get()).ok()).unwrap_or_else(|| Template::literal(""))
}

fn not_allowed(kind: Kind, name: &At<String>, allow: &Allowlist) -> Diagnostic {
    let names = allow.names(kind);
    let help = if names.is_empty() {
        format!("no {} is allowed here", kind.as_str())
    } else {
        format!("allowed {}s: {}", kind.as_str(), names.join(", "))
    };
    Diagnostic::new(format!("{} `{}` is not allowed", kind.as_str(), name.get()), name.span()).help(help)
}

fn bind_node(node: &NodeDecl, allow: &Allowlist, stack: &mut Vec<String>) -> Result<Arc<dyn Node>, Diagnostic> {
    let Some((kind, name)) = node.kinds().into_iter().next() else {
        return Err(Diagnostic::new("node names no capability", node.name.span()));
    };
    let output = node.output.as_ref().map(|o| o.get().clone()).unwrap_or_default();
    let refuse = || not_allowed(kind, name, allow);
    Ok(match kind {
        Kind::Model => {
            let (provider, options) = allow.models.get(name.get()).ok_or_else(refuse)?;
            Arc::new(ModelNode {
                provider: provider.clone(),
                options: options.clone(),
                system: node.system.as_ref().map(|_| template(&node.system)),
                prompt: template(&node.prompt),
                output,
            })
        }
        Kind::Agent => {
            let agent = allow.agents.get(name.get()).ok_or_else(refuse)?;
            Arc::new(AgentNode { agent: agent.clone(), input: template(&node.input), output })
        }
        Kind::Tool => {
            let (invoker, names) = allow.tools.as_ref().ok_or_else(refuse)?;
            if !names.contains(name.get()) || invoker.tools().get(name.get()).is_none() {
                return Err(refuse());
            }
            let args = node.args.as_ref().map(|a| a.get().clone()).unwrap_or_else(|| serde_json::json!({}));
            Arc::new(ToolNode { invoker: invoker.clone(), tool: name.get().clone(), args, output })
        }
        Kind::Rlm => {
            let rlm = allow.rlms.get(name.get()).ok_or_else(refuse)?;
            let inputs = node.inputs.iter().map(|i| i.get().clone()).collect();
            Arc::new(RlmNode { rlm: rlm.clone(), question: template(&node.question), inputs, output })
        }
        Kind::Goal => {
            let pursuer = allow.goals.get(name.get()).ok_or_else(refuse)?;
            Arc::new(GoalNode { pursuer: pursuer.clone(), objective: template(&node.objective), output })
        }
        Kind::Function => allow.functions.get(name.get()).ok_or_else(refuse)?.clone(),
        Kind::Ask => Arc::new(AskNode { question: template(&node.ask), output }),
        Kind::Graph => {
            let source = allow.graphs.get(name.get()).ok_or_else(refuse)?;
            if stack.contains(name.get()) {
                return Err(Diagnostic::new(
                    format!("graph `{}` contains itself ({} → {})", name.get(), stack.join(" → "), name.get()),
                    name.span(),
                ));
            }
            stack.push(name.get().clone());
            let graph = compile(&source.text, &source.origin).and_then(|bp| bind(&bp, source, allow, stack));
            stack.pop();
            let graph = graph.map_err(|inner| {
                Diagnostic::new(format!("sub-graph `{}` does not bind:\n{inner}", name.get()), name.span())
            })?;
            Arc::new(SubgraphNode {
                graph: Arc::new(graph),
                inputs: node.map_in.as_ref().map(|m| m.get().clone()),
                outputs: node.map_out.as_ref().map(|m| m.get().clone()),
            })
        }
    })
}
