//! Sub-model calls of one run ([`SubCaller`]): each a guarded model call of the run tree,
//! already reserved on the sub-call budget, limited by the tree's concurrency and reported as
//! an `rlm_sub_call` event.

use std::sync::Arc;
use std::time::Instant;

use monty_types::MontyObject;
use recursive_core::{ChatOptions, ChatRequest, Message, ModelCall, ModelCallError, RunScope};

use super::{Engine, Tree};
use crate::events::RlmEvent;

/// A failed sub-call: a short type name and the message.
pub(super) struct SubCallError {
    pub(super) kind: &'static str,
    pub(super) message: String,
}

/// Makes sub-model calls for one run: concurrency-limited, observable, each a guarded model
/// call of the run tree already reserved on the sub-call budget.
#[derive(Clone)]
pub(super) struct SubCaller {
    pub(super) engine: Arc<dyn Engine>,
    pub(super) tree: Arc<Tree>,
    pub(super) scope: RunScope,
    pub(super) step: u32,
    /// A model named by the call (`llm_query(p, model="...")`), instead of the sub-model.
    pub(super) model: Option<String>,
}

/// The model a call names, if any (`model=None` names none).
pub(super) fn model_name(arg: Option<&MontyObject>) -> Option<String> {
    arg.and_then(|m| m.as_ref().as_str().map(str::to_string)).filter(|m| !m.is_empty())
}

impl SubCaller {
    pub(super) fn with_model(mut self, model: Option<String>) -> Self {
        self.model = model;
        self
    }

    /// Asks every prompt at once, each on a task of its own — building and sending fifty 20 KB
    /// requests is work for every core, not the one that polls the batch; the answers come in
    /// the prompts' order. Dropping the future aborts the calls still running.
    pub(super) async fn query_all(
        &self,
        prompts: Vec<String>,
        kind: &'static str,
    ) -> Vec<Result<String, SubCallError>> {
        let mut tasks = tokio::task::JoinSet::new();
        let n = prompts.len();
        for (i, prompt) in prompts.into_iter().enumerate() {
            let caller = self.clone();
            tasks.spawn(async move { (i, caller.query(prompt, kind).await) });
        }
        let mut answers: Vec<Option<Result<String, SubCallError>>> = (0..n).map(|_| None).collect();
        while let Some(joined) = tasks.join_next().await {
            if let Ok((i, answer)) = joined {
                answers[i] = Some(answer);
            }
        }
        let lost = || SubCallError { kind: "Internal", message: "the sub-call failed inside the harness".into() };
        answers.into_iter().map(|a| a.unwrap_or_else(|| Err(lost()))).collect()
    }

    pub(super) async fn query(&self, prompt: String, kind: &str) -> Result<String, SubCallError> {
        let Ok(_permit) = self.tree.semaphore.acquire().await else {
            return Err(SubCallError { kind: "Internal", message: "the sub-call limiter is closed".into() });
        };
        let prompt_chars = prompt.chars().count();
        let prompt_head_source = recursive_core::text::clip_chars(&prompt, self.engine.config().trace_chars);
        let request = ChatRequest {
            messages: vec![Message::user(prompt)],
            tools: Vec::new(),
            options: match &self.model {
                Some(model) => ChatOptions { model: model.clone(), ..self.engine.config().sub_options.clone() },
                None => self.engine.config().sub_options.clone(),
            },
        };
        let t0 = Instant::now();
        let call = ModelCall { reserved: true, ..ModelCall::at(self.step) };
        let result = self.scope.call_model(self.engine.sub_model(), request, call).await.map_err(|e| match e {
            ModelCallError::Stopped(r) => SubCallError { kind: "Stopped", message: format!("the run must stop: {r}") },
            other => SubCallError { kind: "ProviderError", message: other.to_string() },
        });
        let (response_chars, error) = match &result {
            Ok(r) => (Some(r.message.content.chars().count()), None),
            Err(e) => (None, Some(e.message.clone())),
        };
        let head = |t: &str| recursive_core::text::clip_chars(t, self.engine.config().trace_chars);
        self.scope.emit(
            self.step,
            RlmEvent::RlmSubCall {
                kind: kind.to_string(),
                prompt_head: head(&prompt_head_source),
                answer_head: result.as_ref().ok().map(|r| head(&r.message.content)),
                prompt_chars,
                response_chars,
                latency_ms: t0.elapsed().as_millis() as u64,
                ok: result.is_ok(),
                error,
            }
            .into_kind(),
        );
        result.map(|r| r.message.content)
    }
}
