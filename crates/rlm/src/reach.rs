//! What sandbox code can start besides sub-model calls: the run tree's runnables. One
//! definition serves the RLM's code and a person's `recursive repl`:
//!
//! - `agent_query(task, name=None, **data)`, `goal_query(objective, name=None, **data)`,
//!   `graph_run(name, input="", **data)`, and `rlm_query(prompt, inputs=None, name=...)` run a
//!   runnable of that kind as a child of the session's run: by its registered name, by the
//!   kind's default when no name is given (agent, goal), or — when the session has a
//!   [`RunnableLoader`] (a person's REPL) — from a runnable file or blueprint path.
//! - `tool_call(name, **args)` calls one of the session's tools through its tool executor.
//! - `model_query(prompt, model=None)` is `llm_query`.

use std::path::Path;
use std::sync::Arc;

use monty_types::MontyObject;
use recursive_core::{Runnable, RunnableKind, Runnables};
use serde_json::{Map, Value};

use crate::convert::{monty_to_json, prompt_text};

/// Names of the run tree's functions (besides `llm_query`, `rlm_query` and the finishers).
pub const TREE_FUNCTIONS: [&str; 5] = ["model_query", "tool_call", "agent_query", "goal_query", "graph_run"];

/// Loads a runnable from a file a person names in the REPL (a runnable file, or for graphs a
/// blueprint), bound to the same configuration and policy as everything else of the session.
pub trait RunnableLoader: Send + Sync {
    /// The runnable of `kind` that the file at `path` declares.
    fn load(&self, kind: RunnableKind, path: &Path) -> Result<Arc<dyn Runnable>, String>;
}

/// The runnables a session's code may start.
#[derive(Clone, Default)]
pub struct Reach {
    named: Runnables,
    defaults: Vec<Arc<dyn Runnable>>,
    loader: Option<Arc<dyn RunnableLoader>>,
}

impl std::fmt::Debug for Reach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reach")
            .field("named", &self.named.names())
            .field("defaults", &self.defaults.iter().map(|d| d.kind()).collect::<Vec<_>>())
            .field("loader", &self.loader.is_some())
            .finish()
    }
}

impl Reach {
    /// The registered runnables, reachable by name.
    pub fn new(named: Runnables) -> Self {
        Self { named, ..Default::default() }
    }

    /// The runnable started when code names none of its kind (replaces an earlier default).
    pub fn with_default(mut self, runnable: Arc<dyn Runnable>) -> Self {
        self.defaults.retain(|d| d.kind() != runnable.kind());
        self.defaults.push(runnable);
        self
    }

    /// Lets code name runnable files by path.
    pub fn with_loader(mut self, loader: Arc<dyn RunnableLoader>) -> Self {
        self.loader = Some(loader);
        self
    }

    /// Whether nothing is reachable (no runnable, no default, no loader).
    pub fn is_empty(&self) -> bool {
        self.named.is_empty() && self.defaults.is_empty() && self.loader.is_none()
    }

    /// The runnable of `kind` that `reference` names: a registered name, else a file path (with
    /// a loader); no reference means the kind's default.
    pub fn find(&self, kind: RunnableKind, reference: Option<&str>) -> Result<Arc<dyn Runnable>, String> {
        let Some(reference) = reference else {
            return self
                .defaults
                .iter()
                .find(|d| d.kind() == kind)
                .cloned()
                .ok_or_else(|| format!("there is no default {kind} here; name one{}", self.listing(kind)));
        };
        if let Some(found) = self.named.get(reference) {
            if found.kind() != kind {
                return Err(format!("`{reference}` is {}, not {}", a_kind(found.kind()), a_kind(kind)));
            }
            return Ok(found.clone());
        }
        match &self.loader {
            Some(loader) if looks_like_path(reference) => loader.load(kind, Path::new(reference)),
            Some(_) => {
                Err(format!("no {kind} named `{reference}`{}, and it is not a .toml file path", self.listing(kind)))
            }
            None => Err(format!("no {kind} named `{reference}`{}", self.listing(kind))),
        }
    }

    fn listing(&self, kind: RunnableKind) -> String {
        let names: Vec<&str> = self.named.iter().filter(|r| r.kind() == kind).map(|r| r.name()).collect();
        if names.is_empty() { String::new() } else { format!(" (registered: {})", names.join(", ")) }
    }
}

/// "an agent", "a goal"...
fn a_kind(kind: RunnableKind) -> String {
    let article = if kind.as_str().starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
    format!("{article} {kind}")
}

/// Whether a reference is a file path rather than a name.
fn looks_like_path(reference: &str) -> bool {
    reference.contains('/') || reference.ends_with(".toml")
}

/// What becomes of a call's keyword arguments that name no parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Extra {
    /// They are an error (`got an unexpected keyword argument`), as in Python.
    Refused,
    /// They are data for the callee.
    Data,
}

/// A call's arguments bound to its parameters (borrowed: an argument may be a whole input), and
/// with [`Extra::Data`] the other keyword arguments as data.
pub(crate) struct SplitArgs<'a> {
    pub bound: Vec<Option<&'a MontyObject>>,
    pub data: Map<String, Value>,
}

/// Binds positional arguments and matching keywords to `params`; `extra` says what the other
/// keywords are.
pub(crate) fn split_args<'a>(
    func: &str,
    params: &[&str],
    args: &'a [MontyObject],
    kwargs: &'a [(String, MontyObject)],
    required: usize,
    extra: Extra,
) -> Result<SplitArgs<'a>, String> {
    if args.len() > params.len() {
        let hint = if extra == Extra::Data { "; pass data as keywords" } else { "" };
        return Err(format!(
            "{func}() takes at most {} positional argument(s) ({}) but {} were given{hint}",
            params.len(),
            params.join(", "),
            args.len()
        ));
    }
    let mut bound: Vec<Option<&MontyObject>> = vec![None; params.len()];
    for (slot, a) in bound.iter_mut().zip(args) {
        *slot = Some(a);
    }
    let mut data = Map::new();
    for (k, v) in kwargs {
        match params.iter().position(|p| p == k) {
            Some(i) if bound[i].is_some() => return Err(format!("{func}() got multiple values for argument '{k}'")),
            Some(i) => bound[i] = Some(v),
            None if extra == Extra::Data => {
                data.insert(k.clone(), monty_to_json(v));
            }
            None => return Err(format!("{func}() got an unexpected keyword argument '{k}'")),
        }
    }
    if let Some(missing) = (0..required).find(|&i| bound[i].is_none()) {
        return Err(format!("{func}() missing required argument '{}'", params[missing]));
    }
    Ok(SplitArgs { bound, data })
}

/// A bound argument as text (`None` and absent are `None`).
pub(crate) fn text_arg(arg: Option<&MontyObject>) -> Option<String> {
    arg.filter(|a| a.type_name() != "NoneType").map(prompt_text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use recursive_core::{FinishReason, Outcome, RunInput, RunScope};

    struct Named(&'static str, RunnableKind);

    #[async_trait]
    impl Runnable for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn kind(&self) -> RunnableKind {
            self.1
        }
        fn description(&self) -> String {
            String::new()
        }
        async fn run(&self, _input: RunInput, scope: &RunScope) -> Outcome {
            Outcome::new(FinishReason::Completed, self.0, scope)
        }
    }

    #[test]
    fn a_name_of_another_kind_is_refused_with_its_kind() {
        let reach = Reach::new(Runnables::new().with(Arc::new(Named("planner", RunnableKind::Goal))));
        let e = reach.find(RunnableKind::Agent, Some("planner")).err().unwrap_or_default();
        assert_eq!(e, "`planner` is a goal, not an agent");
    }

    #[test]
    fn no_name_means_the_kinds_default() {
        let reach = Reach::default().with_default(Arc::new(Named("agent", RunnableKind::Agent)));
        assert_eq!(reach.find(RunnableKind::Agent, None).map(|r| r.name().to_string()), Ok("agent".into()));
        let e = reach.find(RunnableKind::Graph, None).err().unwrap_or_default();
        assert!(e.contains("no default graph"), "{e}");
    }

    #[test]
    fn unknown_names_list_the_registered_ones_of_the_kind() {
        let reach = Reach::new(Runnables::new().with(Arc::new(Named("flow", RunnableKind::Graph))));
        let e = reach.find(RunnableKind::Graph, Some("flwo")).err().unwrap_or_default();
        assert_eq!(e, "no graph named `flwo` (registered: flow)");
    }

    #[test]
    fn extra_keywords_become_data() {
        let args = [MontyObject::string("do it")];
        let kwargs = [
            ("name".to_string(), MontyObject::string("rev")),
            ("n".to_string(), crate::convert::json_to_monty(&Value::from(3))),
        ];
        let split = split_args("agent_query", &["task", "name"], &args, &kwargs, 1, Extra::Data)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(text_arg(split.bound[1]).as_deref(), Some("rev"));
        assert_eq!(split.data.get("n"), Some(&Value::from(3)));
    }
}
