//! A scripted provider for tests and offline use: it answers from a queue of replies (or a
//! handler function), streams text in small pieces, and records every request it receives so
//! tests can assert on what was sent.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::Value;

use crate::message::{Message, ToolCall, Usage};
use crate::provider::{ChatProvider, ChatRequest, ChatResponse, ChatStream, ProviderError, StopReason, StreamEvent};

type Handler = dyn Fn(&ChatRequest) -> Result<ChatResponse, ProviderError> + Send + Sync;

/// One scripted reply.
#[derive(Debug, Clone)]
pub enum MockReply {
    /// Plain text, ending the turn.
    Text(String),
    /// Tool calls `(name, arguments)`; ids are `call_1`, `call_2`... in order of the script.
    ToolCalls(Vec<(String, Value)>),
    /// A full response.
    Response(ChatResponse),
    /// A provider error.
    Error(ProviderError),
}

impl MockReply {
    /// A text reply.
    pub fn text(t: impl Into<String>) -> Self {
        MockReply::Text(t.into())
    }

    /// A single tool call.
    pub fn tool(name: impl Into<String>, arguments: Value) -> Self {
        MockReply::ToolCalls(vec![(name.into(), arguments)])
    }
}

#[derive(Default)]
struct State {
    replies: VecDeque<MockReply>,
    requests: Vec<ChatRequest>,
    received: usize,
    next_call: u64,
}

/// The scripted provider.
#[derive(Clone)]
pub struct MockProvider {
    state: Arc<Mutex<State>>,
    handler: Option<Arc<Handler>>,
    latency: Option<Duration>,
    usage_per_call: Usage,
    model: String,
    keeps_requests: bool,
}

impl Default for MockProvider {
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

impl MockProvider {
    /// A provider answering with these replies, in order.
    pub fn new(replies: impl IntoIterator<Item = MockReply>) -> Self {
        Self {
            state: Arc::new(Mutex::new(State { replies: replies.into_iter().collect(), ..Default::default() })),
            handler: None,
            latency: None,
            usage_per_call: Usage { input_tokens: 10, output_tokens: 5, ..Default::default() },
            model: "mock".into(),
            keeps_requests: true,
        }
    }

    /// A provider that computes each reply from the request (used once the queue is empty).
    pub fn with_handler(
        handler: impl Fn(&ChatRequest) -> Result<ChatResponse, ProviderError> + Send + Sync + 'static,
    ) -> Self {
        Self { handler: Some(Arc::new(handler)), ..Self::new(Vec::new()) }
    }

    /// Waits this long before each reply.
    pub fn with_latency(mut self, latency: Duration) -> Self {
        self.latency = Some(latency);
        self
    }

    /// Reports this usage for each reply (default 10 in / 5 out).
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage_per_call = usage;
        self
    }

    /// Reports this model name.
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// Counts requests without keeping them ([`requests`](Self::requests) stays empty), for a
    /// provider that answers a long-lived server.
    pub fn forgetting_requests(mut self) -> Self {
        self.keeps_requests = false;
        self
    }

    /// Adds a reply to the end of the queue.
    pub fn push(&self, reply: MockReply) {
        if let Ok(mut s) = self.state.lock() {
            s.replies.push_back(reply);
        }
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<ChatRequest> {
        self.state.lock().map(|s| s.requests.clone()).unwrap_or_default()
    }

    /// Number of requests received.
    pub fn request_count(&self) -> usize {
        self.state.lock().map(|s| s.received).unwrap_or_default()
    }

    /// Replies still queued.
    pub fn remaining(&self) -> usize {
        self.state.lock().map(|s| s.replies.len()).unwrap_or_default()
    }

    /// A text response with this provider's usage.
    pub fn text_response(&self, text: impl Into<String>) -> ChatResponse {
        ChatResponse {
            message: Message::assistant(text),
            stop_reason: StopReason::EndTurn,
            usage: self.usage_per_call,
            cost_usd: None,
            model: self.model.clone(),
        }
    }

    fn next(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let reply = {
            let mut s = self.state.lock().map_err(|_| ProviderError::Invalid("mock state poisoned".into()))?;
            s.received += 1;
            if self.keeps_requests {
                s.requests.push(request.clone());
            }
            match s.replies.pop_front() {
                Some(MockReply::ToolCalls(calls)) => {
                    let calls = calls
                        .into_iter()
                        .map(|(name, arguments)| {
                            s.next_call += 1;
                            ToolCall { id: format!("call_{}", s.next_call), name, arguments }
                        })
                        .collect();
                    Some(Ok(ChatResponse {
                        message: Message::assistant_with_tools("", calls),
                        stop_reason: StopReason::ToolUse,
                        usage: self.usage_per_call,
                        cost_usd: None,
                        model: self.model.clone(),
                    }))
                }
                Some(MockReply::Text(t)) => Some(Ok(self.text_response(t))),
                Some(MockReply::Response(r)) => Some(Ok(r)),
                Some(MockReply::Error(e)) => Some(Err(e)),
                None => None,
            }
        };
        match (reply, &self.handler) {
            (Some(r), _) => r,
            (None, Some(h)) => h(request),
            (None, None) => Err(ProviderError::Invalid(format!(
                "mock provider: no scripted reply left for request #{}",
                self.request_count()
            ))),
        }
    }
}

#[async_trait]
impl ChatProvider for MockProvider {
    fn name(&self) -> &str {
        "mock"
    }

    fn default_model(&self) -> &str {
        &self.model
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ProviderError> {
        if let Some(l) = self.latency {
            tokio::time::sleep(l).await;
        }
        let response = self.next(&request)?;
        let mut events: Vec<Result<StreamEvent, ProviderError>> = Vec::new();
        let text = &response.message.content;
        let mut start = 0;
        for (i, c) in text.char_indices() {
            if c == ' ' && i > start {
                events.push(Ok(StreamEvent::TextDelta(text[start..i].to_string())));
                start = i;
            }
        }
        if start < text.len() {
            events.push(Ok(StreamEvent::TextDelta(text[start..].to_string())));
        }
        events.push(Ok(StreamEvent::Completed(response)));
        Ok(futures::stream::iter(events).boxed())
    }
}
