//! `rlm_query`: a child RLM run over the prompt (or the given inputs) under this run's budget
//! node, or a plain sub-model call when the depth limit is reached; and how a long task is
//! handed to a run as an input rather than as its question.

use recursive_core::{BudgetLimits, RunInput, RunnableKind};
use serde_json::{Map, Value};

use super::{Node, RunHost, bind_args, shaped, type_error};
use crate::convert::{dict_pairs, is_none, monty_to_json, prompt_text};
use crate::events::RlmEvent;
use crate::inputs::{InputValue, Inputs};
use crate::reach::text_arg;
use crate::sandbox::{HostCall, HostReply};

/// A child run's question is its prompt up to this size; longer prompts are read from its inputs.
const CHILD_QUESTION_MAX_CHARS: usize = 4000;

impl RunHost {
    pub(super) fn rlm_query(&self, call: &HostCall) -> HostReply {
        let bound = match bind_args("rlm_query", &["prompt", "inputs", "name"], call, 1) {
            Ok(b) => b,
            Err(e) => return e,
        };
        let prompt = bound[0].map(prompt_text).unwrap_or_default();
        if let Some(name) = text_arg(bound[2]) {
            let data = match bound[1].filter(|o| !is_none(o)).map(monty_to_json) {
                None => Map::new(),
                Some(Value::Object(m)) => m,
                Some(_) => return type_error("rlm_query() expects `inputs` to be a dict of name -> value, or None"),
            };
            return self.start_runnable(
                RunnableKind::Rlm,
                Some(name),
                RunInput { text: prompt, data, ..Default::default() },
            );
        }
        let child_inputs = match bound[1].filter(|o| !is_none(o)).map(dict_pairs) {
            None => None,
            Some(Some(pairs)) => {
                let mut inputs = Inputs::new();
                for (k, v) in pairs {
                    let value = match v.as_ref().as_str() {
                        Some(s) => InputValue::Text(s.to_string()),
                        None => InputValue::Json(monty_to_json(&v)),
                    };
                    inputs.insert(prompt_text(&k), value);
                }
                Some(inputs)
            }
            Some(None) => return type_error("rlm_query() expects `inputs` to be a dict of name -> value, or None"),
        };
        if let Some(msg) = self.stopped() {
            return self.failed("Stopped", msg);
        }
        if let Err(e) = self.node.reserve(self.engine.config().max_llm_calls, 1) {
            return self.failed("BudgetExceeded", e);
        }
        let dialect = self.engine.config().dialect;
        let child_depth = self.node.rlm_depth + 1;
        let fallback = |why: &str| {
            let caller = self.sub_caller();
            let mut text = prompt.clone();
            if let Some(inputs) = &child_inputs {
                let as_json: Map<String, Value> = inputs
                    .iter()
                    .map(|(k, v)| {
                        let v = match v {
                            InputValue::Text(s) => Value::String(s.clone()),
                            InputValue::Json(j) => j.clone(),
                        };
                        (k.to_string(), v)
                    })
                    .collect();
                text.push_str(&format!("\n\nInputs:\n{}", Value::Object(as_json)));
            }
            self.scope.emit(
                self.step(),
                RlmEvent::RlmChildFallback { reason: why.to_string(), prompt_chars: text.chars().count() }.into_kind(),
            );
            HostReply::Pending(Box::pin(async move {
                Ok(match caller.query(text, "rlm_query").await {
                    Ok(t) => shaped(dialect, Ok(Value::String(t))),
                    Err(e) => shaped(dialect, Err((e.kind, e.message))),
                })
            }))
        };
        if child_depth > self.engine.config().max_depth {
            return fallback("max_depth");
        }
        // The child's own budget node (no limit of its own) sits under the sub-call budget, so
        // every model call of the child is charged to it and counted for the child.
        let child_scope = match self.node.sub_scope.child_with_budget("rlm", BudgetLimits::default()) {
            Ok(s) => s,
            Err(e) => return fallback(&e.to_string()),
        };
        let prompt_chars = prompt.chars().count();
        let (question, inputs) = match child_inputs {
            Some(mut inputs) => {
                if prompt_chars > CHILD_QUESTION_MAX_CHARS && inputs.get("prompt").is_none() {
                    inputs.insert("prompt", prompt.clone());
                }
                (child_question(&prompt), inputs)
            }
            None => (child_question(&prompt), Inputs::single("prompt", prompt.clone())),
        };
        let input_names: Vec<String> = inputs.iter().map(|(n, _)| n.to_string()).collect();
        self.scope.emit(
            self.step(),
            RlmEvent::RlmChildStarted {
                child_run_id: child_scope.ids().run_id.clone(),
                depth: child_scope.depth(),
                rlm_depth: child_depth,
                prompt_chars,
                inputs: input_names,
            }
            .into_kind(),
        );
        let child = Node { rlm_depth: child_depth, sub_scope: child_scope.clone(), first_reserved: true };
        let engine = self.engine.clone();
        let tree = self.tree.clone();
        let parent = self.scope.clone();
        let step = self.step();
        HostReply::Pending(Box::pin(async move {
            let (r, error) = match engine.run_child(question, inputs, child_scope, tree, child).await {
                Ok(r) => (r, None),
                Err(e) => (*e.partial, Some(e.error.to_string())),
            };
            let reply = match (&error, r.outcome.has_output()) {
                (Some(e), _) => shaped(dialect, Err(("ChildFailed", format!("the child run failed: {e}")))),
                (None, true) => match r.output.get("answer") {
                    Some(Value::String(a)) => shaped(dialect, Ok(Value::String(a.clone()))),
                    _ => shaped(dialect, Ok(r.output.clone())),
                },
                (None, false) => shaped(
                    dialect,
                    Err(("NoResult", format!("the child run ended without a result ({})", r.outcome.as_str()))),
                ),
            };
            let finished = RlmEvent::RlmChildFinished {
                child_run_id: r.run_id,
                outcome: error.is_none().then_some(r.outcome),
                iterations: r.iterations,
                sub_calls: r.sub_calls,
                usage: r.usage,
                cost_usd: r.cost_usd,
                error,
            };
            parent.emit(step, finished.into_kind());
            Ok(reply)
        }))
    }
}

/// The question of a child run: its prompt, or a pointer to it when the prompt is long.
fn child_question(prompt: &str) -> String {
    task_question("prompt", prompt)
}

/// The question for a task given as the input `name`: the task itself, or a pointer to the
/// input when the task is long.
pub(crate) fn task_question(name: &str, task: &str) -> String {
    let chars = task.chars().count();
    if chars <= CHILD_QUESTION_MAX_CHARS {
        task.to_string()
    } else {
        let head: String = task.chars().take(1000).collect();
        format!("The task is given in full in `inputs[\"{name}\"]` ({chars} chars); read it there. It begins:\n{head}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_child_prompts_are_read_from_inputs() {
        assert_eq!(child_question("short task"), "short task");
        let long = "x".repeat(CHILD_QUESTION_MAX_CHARS + 1);
        assert!(child_question(&long).contains("inputs[\"prompt\"]"));
    }
}
