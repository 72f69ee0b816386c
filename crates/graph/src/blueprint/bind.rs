//! Bind: every capability a compiled blueprint names — models, tools, runnables (agents,
//! RLMs, goal pursuers, graphs), sub-graphs, functions — is looked up in an allowlist. Anything not on it fails
//! here, with its position, before any node runs; so does a limit above the allowlist's cap. What is
//! on it becomes a runnable [`Graph`].

use std::collections::BTreeMap;
use std::sync::Arc;

use recursive_core::{ChatOptions, ChatProvider, Runnable, RunnableKind, ToolInvoker};

use crate::blueprint::compile::{channels, compile};
use crate::blueprint::diag::{Diagnostic, Diagnostics};
use crate::blueprint::format::{At, Blueprint, Kind, NodeDecl, PauseAt};
use crate::blueprint::limits;
use crate::graph::{Graph, Guard, RecursionPolicy};
use crate::kinds::{AskNode, ModelNode, RunnableNode, SubgraphNode, ToolNode};
use crate::node::Node;
use crate::template::Template;

/// A blueprint's text and where it came from (the store pins it in a thread's record).
pub use recursive_store::BlueprintSource as Source;

/// Finds the provider a `model` node names (`provider = "NAME"`): the provider and the model its
/// calls ask for (empty: the provider's own), or why there is none by that name.
pub type ProviderLookup = Arc<dyn Fn(&str) -> Result<(Arc<dyn ChatProvider>, String), String> + Send + Sync>;

/// What a blueprint may use, by name. Nothing else can be reached from a blueprint.
#[derive(Default, Clone)]
pub struct Allowlist {
    models: BTreeMap<String, (Arc<dyn ChatProvider>, ChatOptions)>,
    providers: Option<ProviderLookup>,
    tools: Option<(ToolInvoker, Vec<String>)>,
    runnables: BTreeMap<(RunnableKind, String), Arc<dyn Runnable>>,
    graphs: BTreeMap<String, Source>,
    functions: BTreeMap<String, Arc<dyn Node>>,
    cap: Option<RecursionPolicy>,
}

impl std::fmt::Debug for Allowlist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allowlist")
            .field("models", &self.models.keys().collect::<Vec<_>>())
            .field("runnables", &self.runnables.keys().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>())
            .field("tools", &self.tools.as_ref().map(|t| &t.1))
            .field("graphs", &self.graphs.keys().collect::<Vec<_>>())
            .field("cap", &self.cap)
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

    /// Lets a `model` node send its call to another provider by name (`provider = "NAME"`),
    /// found by `lookup` when the blueprint binds; without it, a node naming a provider is refused.
    pub fn providers(mut self, lookup: ProviderLookup) -> Self {
        self.providers = Some(lookup);
        self
    }

    /// Allows a runnable (an agent, an RLM, a goal pursuer, a graph) under its name; a node
    /// names it by its kind (`agent = "…"`, `rlm = "…"`, `goal = "…"`, `graph = "…"`).
    pub fn runnable(self, runnable: Arc<dyn Runnable>) -> Self {
        let name = runnable.name().to_string();
        self.runnable_as(name, runnable)
    }

    /// Allows a runnable under another name (e.g. `default` for a command's own agent).
    pub fn runnable_as(mut self, name: impl Into<String>, runnable: Arc<dyn Runnable>) -> Self {
        self.runnables.insert((runnable.kind(), name.into()), runnable);
        self
    }

    /// Allows each of these runnables.
    pub fn runnables(self, runnables: &recursive_core::Runnables) -> Self {
        runnables.iter().fold(self, |allow, r| allow.runnable(r.clone()))
    }

    fn runnable_of(&self, kind: RunnableKind, name: &str) -> Option<&Arc<dyn Runnable>> {
        self.runnables.get(&(kind, name.to_string()))
    }

    fn runnable_names(&self, kind: RunnableKind) -> Vec<String> {
        self.runnables.keys().filter(|(k, _)| *k == kind).map(|(_, n)| n.clone()).collect()
    }

    /// Allows the named tools of this executor (its permission gate still applies to each call).
    pub fn tools(mut self, invoker: ToolInvoker, names: Vec<String>) -> Self {
        self.tools = Some((invoker, names));
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

    /// Caps the limits of every blueprint bound here (sub-graphs too): a declared limit above
    /// the cap is refused, a limit left out is lowered to it.
    pub fn limits(mut self, cap: RecursionPolicy) -> Self {
        self.cap = Some(cap);
        self
    }

    /// The cap on the limits, if any.
    pub fn cap(&self) -> Option<&RecursionPolicy> {
        self.cap.as_ref()
    }

    /// The allowed sub-graph blueprints that `source` reaches, directly or through other
    /// sub-graphs, by name: what a thread keeps so it binds the same graphs when resumed.
    /// (A blueprint that does not compile reaches nothing; binding reports it.)
    pub fn reachable_graphs(&self, source: &Source) -> BTreeMap<String, Source> {
        let mut reached = BTreeMap::new();
        let mut pending = vec![source.clone()];
        while let Some(next) = pending.pop() {
            let Ok(bp) = compile(&next.text, &next.origin) else { continue };
            for node in &bp.nodes {
                let Some((Kind::Graph, name)) = node.kinds().into_iter().next() else { continue };
                if let Some(sub) = self.graphs.get(name.get())
                    && !reached.contains_key(name.get())
                {
                    reached.insert(name.get().clone(), sub.clone());
                    pending.push(sub.clone());
                }
            }
        }
        reached
    }

    /// The names allowed for a kind, for messages.
    pub fn names(&self, kind: Kind) -> Vec<String> {
        match kind {
            Kind::Model => self.models.keys().cloned().collect(),
            Kind::Agent => self.runnable_names(RunnableKind::Agent),
            Kind::Tool => self.tools.as_ref().map(|t| t.1.clone()).unwrap_or_default(),
            Kind::Rlm => self.runnable_names(RunnableKind::Rlm),
            Kind::Goal => self.runnable_names(RunnableKind::Goal),
            Kind::Graph => {
                let mut names: Vec<String> = self.graphs.keys().cloned().collect();
                names.extend(self.runnable_names(RunnableKind::Graph));
                names
            }
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
    match limits::policy(bp.limits.as_ref().map(At::get), allow.cap.as_ref()) {
        Ok(policy) => builder = builder.policy(policy),
        Err(problems) => problems.into_iter().for_each(|p| d.push(p)),
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
            let (provider, options) = match &node.provider {
                None => (provider.clone(), options.clone()),
                Some(named) => {
                    let found = match &allow.providers {
                        Some(lookup) => lookup(named.get()),
                        None => Err("no provider is configured by name here".to_string()),
                    };
                    let (provider, model) = found.map_err(|why| {
                        Diagnostic::new(format!("provider `{}` cannot be used", named.get()), named.span()).help(why)
                    })?;
                    (provider, ChatOptions { model, ..options.clone() })
                }
            };
            Arc::new(ModelNode {
                provider,
                options,
                system: node.system.as_ref().map(|_| template(&node.system)),
                prompt: template(&node.prompt),
                output,
            })
        }
        Kind::Agent => {
            let runnable = allow.runnable_of(RunnableKind::Agent, name.get()).ok_or_else(refuse)?;
            Arc::new(RunnableNode {
                runnable: runnable.clone(),
                input: template(&node.input),
                data: Vec::new(),
                output,
            })
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
            let runnable = allow.runnable_of(RunnableKind::Rlm, name.get()).ok_or_else(refuse)?;
            let data = node.inputs.iter().map(|i| i.get().clone()).collect();
            Arc::new(RunnableNode { runnable: runnable.clone(), input: template(&node.question), data, output })
        }
        Kind::Goal => {
            let runnable = allow.runnable_of(RunnableKind::Goal, name.get()).ok_or_else(refuse)?;
            Arc::new(RunnableNode {
                runnable: runnable.clone(),
                input: template(&node.objective),
                data: Vec::new(),
                output,
            })
        }
        Kind::Function => allow.functions.get(name.get()).ok_or_else(refuse)?.clone(),
        Kind::Ask => Arc::new(AskNode { question: template(&node.ask), output }),
        Kind::Graph if !allow.graphs.contains_key(name.get()) => {
            let runnable = allow.runnable_of(RunnableKind::Graph, name.get()).ok_or_else(refuse)?;
            Arc::new(RunnableNode {
                runnable: runnable.clone(),
                input: template(&node.input),
                data: Vec::new(),
                output,
            })
        }
        Kind::Graph => {
            let source = allow.graphs.get(name.get()).ok_or_else(refuse)?;
            if stack.contains(name.get()) {
                return Err(Diagnostic::new(
                    format!("graph `{}` contains itself ({} → {})", name.get(), stack.join(" → "), name.get()),
                    name.span(),
                ));
            }
            let compiled = compile(&source.text, &source.origin);
            if let Ok(bp) = &compiled {
                check_maps(node, bp)?;
            }
            stack.push(name.get().clone());
            let graph = compiled.and_then(|bp| bind(&bp, source, allow, stack));
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

/// `map_in` keys and `map_out` values name the sub-graph's channels: each must exist there
/// (the parent's side is checked when the parent compiles).
fn check_maps(node: &NodeDecl, sub: &Blueprint) -> Result<(), Diagnostic> {
    let known = || format!("the sub-graph's channels: {}", sub.state.keys().cloned().collect::<Vec<_>>().join(", "));
    if let Some(map) = &node.map_in
        && let Some(channel) = map.get().keys().find(|c| !sub.state.contains_key(*c))
    {
        let message = format!("`map_in` writes `{channel}`, which the sub-graph does not declare");
        return Err(Diagnostic::new(message, map.span()).help(known()));
    }
    if let Some(map) = &node.map_out
        && let Some(channel) = map.get().values().find(|c| !sub.state.contains_key(*c))
    {
        let message = format!("`map_out` reads `{channel}`, which the sub-graph does not declare");
        return Err(Diagnostic::new(message, map.span()).help(known()));
    }
    Ok(())
}
