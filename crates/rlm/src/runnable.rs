//! The RLM as a [`Runnable`]: a task (and any named data) in, the RLM's answer out, in the
//! scope it is given — so an agent can call an RLM as a tool, a goal can delegate to one and a
//! graph node can be one, through the generic adapters of those roles.
//!
//! Input: named data become the REPL's inputs and the text is the question. With text only,
//! the text *is* the input (bound as `inputs["input"]`), and the question is the text when it
//! is short, or a pointer to the input when it is long — a long text never goes whole into the
//! prompt.

use async_trait::async_trait;
use recursive_core::{FinishReason, Outcome, RunInput, RunScope, Runnable, RunnableKind};
use serde_json::{Value, json};

use crate::host::task_question;
use crate::inputs::Inputs;
use crate::result::RlmResult;
use crate::rlm::Rlm;

impl RlmResult {
    /// The answer as text: the one string field of a one-field object (the default
    /// `{"answer": text}`), a string as itself, nothing for `null`, JSON otherwise.
    pub fn text(&self) -> String {
        answer_text(&self.output)
    }

    /// The run as an [`Outcome`]; `error` is the fault that ended it, if one did.
    pub fn to_outcome(&self, error: Option<String>) -> Outcome {
        Outcome {
            finish_reason: if error.is_some() { FinishReason::Fault } else { self.outcome.finish_reason() },
            text: self.text(),
            output: self.output.clone(),
            usage: self.usage,
            cost_usd: self.cost_usd,
            steps: self.iterations,
            run_id: self.run_id.clone(),
            error,
            messages: Vec::new(),
        }
    }
}

/// The one rule turning an RLM result into text (see [`RlmResult::text`]).
pub fn answer_text(output: &Value) -> String {
    match output {
        Value::Object(m) if m.len() == 1 => match m.values().next() {
            Some(Value::String(s)) => s.clone(),
            _ => serde_json::to_string_pretty(output).unwrap_or_default(),
        },
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    }
}

/// The question and inputs of a run from a runnable input (see the module docs).
pub fn question_and_inputs(input: RunInput) -> (String, Inputs) {
    if input.data.is_empty() {
        let question = task_question("input", &input.text);
        return (question, Inputs::single("input", input.text));
    }
    let mut inputs = Inputs::new();
    for (name, value) in input.data {
        inputs.insert(name, value);
    }
    (input.text, inputs)
}

#[async_trait]
impl Runnable for Rlm {
    fn name(&self) -> &str {
        Rlm::name(self)
    }

    fn kind(&self) -> RunnableKind {
        RunnableKind::Rlm
    }

    fn description(&self) -> String {
        self.described().map(str::to_string).unwrap_or_else(|| {
            "A recursive language model: give it a long text as `input` (and a `question` about it); it reads the \
             text with Python code in a sandbox and calls sub-models on the pieces, then answers."
                .into()
        })
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "input": {"type": "string", "description": "The text to work over (bound as the REPL's `inputs[\"input\"]`), or the task when `question` is not given."},
                "question": {"type": "string", "description": "What to answer about the input."}
            },
            "required": ["input"],
            "additionalProperties": false
        })
    }

    /// Its host tools decide: an RLM only reads when they all do.
    fn read_only(&self) -> bool {
        let tools = self.host_tools();
        tools.names().iter().all(|n| tools.get(n).is_some_and(|t| t.read_only()))
    }

    async fn run(&self, mut input: RunInput, scope: &RunScope) -> Outcome {
        // A tool call's `question` with the text as the input it is about.
        if let Some(Value::String(question)) = input.data.remove("question") {
            let text = std::mem::replace(&mut input.text, question);
            input.data.insert("input".into(), Value::String(text));
        }
        // A graph node's run keeps checkpoints in its slot and resumes from them.
        let durable = input.checkpoint.take().map(|c| crate::durable::Durable {
            slot: c.0,
            meta: Value::Null,
            strict: false,
            spend_restored: false,
        });
        let (question, inputs) = question_and_inputs(input);
        let engine = match durable {
            Some(d) => std::borrow::Cow::Owned(self.clone().with_durable(d)),
            None => std::borrow::Cow::Borrowed(self),
        };
        match Rlm::run(&engine, &question, inputs, scope).await {
            Ok(result) => result.to_outcome(None),
            Err(e) => e.partial.to_outcome(Some(e.error.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_become_text_by_one_rule() {
        assert_eq!(answer_text(&json!({"answer": "42"})), "42");
        assert_eq!(answer_text(&json!({"result": "x"})), "x");
        assert_eq!(answer_text(&json!("plain")), "plain");
        assert_eq!(answer_text(&Value::Null), "");
        assert_eq!(answer_text(&json!({"a": 1, "b": 2})), "{\n  \"a\": 1,\n  \"b\": 2\n}");
    }

    #[test]
    fn a_text_alone_is_the_input_and_a_long_one_stays_out_of_the_question() {
        let (question, inputs) = question_and_inputs(RunInput::text("short task"));
        assert_eq!(question, "short task");
        assert_eq!(inputs.iter().map(|(n, _)| n).collect::<Vec<_>>(), ["input"]);
        let long = "x".repeat(50_000);
        let (question, _) = question_and_inputs(RunInput::text(long));
        assert!(question.contains("inputs[\"input\"]") && question.len() < 2_000, "{question}");
    }

    #[test]
    fn named_data_are_the_inputs_and_the_text_the_question() {
        let input = RunInput::text("which?").with("log", json!("a\nb"));
        let (question, inputs) = question_and_inputs(input);
        assert_eq!(question, "which?");
        assert_eq!(inputs.iter().map(|(n, _)| n).collect::<Vec<_>>(), ["log"]);
    }
}
