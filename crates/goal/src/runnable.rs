//! Goal pursuit as a [`Runnable`]: the input text is the objective; the result's summary is
//! the text and the outcome tree the structured output — so an agent can call a pursuit as a
//! tool, an RLM snippet as a function, a graph as a node.

use async_trait::async_trait;
use recursive_core::{Outcome, RunInput, RunScope, Runnable, RunnableKind};

use crate::pursuer::GoalPursuer;

#[async_trait]
impl Runnable for GoalPursuer {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> RunnableKind {
        RunnableKind::Goal
    }

    fn description(&self) -> String {
        self.description.clone().unwrap_or_else(|| {
            "Recursive goal pursuit: give it an objective; it decomposes it into sub-goals, carries them out and \
             reports the result."
                .into()
        })
    }

    async fn run(&self, input: RunInput, scope: &RunScope) -> Outcome {
        match self.pursue_as_run(&input.text, scope).await {
            Err(e) => Outcome::fault(e.to_string(), scope),
            Ok((outcome, finish)) => {
                let text = if outcome.result.summary.is_empty() {
                    outcome.reason.clone().unwrap_or_default()
                } else {
                    outcome.result.summary.clone()
                };
                let mut o = Outcome::new(finish, text, scope);
                o.error = outcome.fault.clone();
                o.usage = outcome.usage;
                o.cost_usd = outcome.cost_usd;
                o.steps = u32::try_from(outcome.walk().len()).unwrap_or(u32::MAX);
                o.output = serde_json::to_value(&outcome).unwrap_or_default();
                o
            }
        }
    }
}
