//! The response transform of the Responses API: stream events (or one response object) become
//! a core [`ChatResponse`] — output text, refusals, function calls (by output index; parallel
//! calls interleave), reasoning items with their summary, id and encrypted content, the stop
//! reason (`incomplete_details.reason` for an incomplete response) and the usage (cached input
//! as cache reads). `response.failed` and `error` events are provider errors.

use std::collections::BTreeMap;

use recursive_core::{ChatResponse, Message, ProviderError, Reasoning, StopReason, ToolCall, Usage};

use super::wire;
use crate::sse;

/// Maps wire usage: cached input tokens become cache reads and are not counted as input;
/// reasoning tokens are part of the output tokens, and billed as output.
pub fn usage(u: &wire::ResponseUsage) -> Usage {
    let cached = u.input_tokens_details.map(|d| d.cached_tokens).unwrap_or(0).min(u.input_tokens);
    Usage {
        input_tokens: u.input_tokens - cached,
        output_tokens: u.output_tokens,
        cache_read_tokens: cached,
        cache_write_tokens: 0,
    }
}

/// The stop reason of an incomplete response, from `incomplete_details.reason`.
pub fn incomplete_reason(reason: Option<&str>) -> StopReason {
    match reason {
        Some("max_output_tokens") => StopReason::MaxTokens,
        Some("content_filter") => StopReason::ContentFilter,
        Some(other) => StopReason::Other(other.to_string()),
        None => StopReason::Other("incomplete".into()),
    }
}

/// The HTTP status an error code stands for, so errors sent inside a stream retry like their
/// HTTP equivalents: rate limits as 429, request faults as 400, the rest as 500.
fn status_of_code(code: &str) -> u16 {
    match code {
        c if c.contains("rate_limit") => 429,
        "insufficient_quota" => 429,
        "server_error" | "vector_store_timeout" | "" => 500,
        c if c.starts_with("invalid")
            || c.starts_with("image_")
            || c.ends_with("_policy")
            || c.ends_with("_policy_violation")
            || c.contains("mismatch")
            || c.contains("context_length") =>
        {
            400
        }
        _ => 500,
    }
}

/// A provider error from an error object sent in the stream or in a failed response.
pub(crate) fn api_error(provider: &str, error: &wire::ApiError, origin: &str) -> ProviderError {
    let code = error.code.as_deref().unwrap_or_default();
    let what = if code.is_empty() { String::new() } else { format!("{code}: ") };
    ProviderError::Http {
        provider: provider.to_string(),
        status: status_of_code(code),
        message: format!("{what}{} ({origin})", error.message),
        retry_after_secs: None,
    }
}

/// One output item as it is being assembled.
#[derive(Debug, Clone)]
enum Item {
    Message { text: String, refusal: String, phase: Option<String> },
    Reasoning { id: String, summary: Vec<String>, encrypted: String, text: Vec<String> },
    Call { call_id: String, name: String, arguments: String },
    Other,
}

impl Item {
    fn empty_message() -> Item {
        Item::Message { text: String::new(), refusal: String::new(), phase: None }
    }

    fn empty_call() -> Item {
        Item::Call { call_id: String::new(), name: String::new(), arguments: String::new() }
    }

    fn from_wire(item: wire::OutputItem) -> Item {
        match item {
            wire::OutputItem::Message { content, phase } => {
                let (mut text, mut refusal) = (String::new(), String::new());
                for part in content {
                    match part {
                        wire::ContentPart::OutputText { text: t } => text.push_str(&t),
                        wire::ContentPart::Refusal { refusal: r } => refusal.push_str(&r),
                        wire::ContentPart::Other => {}
                    }
                }
                Item::Message { text, refusal, phase }
            }
            wire::OutputItem::Reasoning { id, summary, encrypted_content, content } => Item::Reasoning {
                id,
                summary: summary.into_iter().map(|p| p.text).collect(),
                encrypted: encrypted_content.unwrap_or_default(),
                text: content.into_iter().map(|p| p.text).collect(),
            },
            wire::OutputItem::FunctionCall { call_id, name, arguments } => Item::Call { call_id, name, arguments },
            wire::OutputItem::Other => Item::Other,
        }
    }
}

/// How the response ended.
#[derive(Debug, Clone, PartialEq)]
enum End {
    Completed,
    Incomplete(Option<String>),
}

/// Assembles a response from its stream events. A plain struct, fed with parsed events, so it
/// can be tested without HTTP.
#[derive(Debug, Default, Clone)]
pub struct ResponseAccumulator {
    model: String,
    items: BTreeMap<u32, Item>,
    usage: Option<wire::ResponseUsage>,
    end: Option<End>,
    /// Reasoning that arrived since [`ResponseAccumulator::take_reasoning`] was last called.
    reasoning: Vec<String>,
    /// The reasoning part the last reasoning delta belonged to (item, part, whether a summary
    /// part): parts are shown apart.
    last_part: Option<(u32, u32, bool)>,
    /// The message the last answer text belonged to.
    last_text: Option<u32>,
}

impl ResponseAccumulator {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one event; returns the answer text that arrived with it. `response.failed` and
    /// `error` become the provider's error.
    pub fn push(&mut self, provider: &str, event: wire::StreamEvent) -> Result<Vec<String>, ProviderError> {
        use wire::StreamEvent as E;
        match event {
            E::Created { response } => {
                if !response.model.is_empty() {
                    self.model = response.model;
                }
            }
            E::OutputItemAdded { output_index, item } => {
                self.items.insert(output_index, Item::from_wire(item));
            }
            E::OutputItemDone { output_index, item } => {
                self.items.insert(output_index, Item::from_wire(item));
            }
            E::OutputTextDelta { output_index, delta } => {
                // A second message (commentary, then the answer) starts a new paragraph, as
                // `finish` joins them.
                let new_message = self.last_text.is_some_and(|last| last != output_index);
                self.last_text = Some(output_index);
                self.push_text(output_index, &delta, false);
                return Ok(vec![if new_message { format!("\n\n{delta}") } else { delta }]);
            }
            E::RefusalDelta { output_index, delta } => self.push_text(output_index, &delta, true),
            E::ReasoningSummaryDelta { output_index, summary_index, delta } => {
                self.reasoning_delta(output_index, summary_index, true, delta)
            }
            E::ReasoningTextDelta { output_index, content_index, delta } => {
                self.reasoning_delta(output_index, content_index, false, delta)
            }
            E::ArgumentsDelta { output_index, delta } => self.push_arguments(output_index, delta, false),
            E::ArgumentsDone { output_index, arguments } => self.push_arguments(output_index, arguments, true),
            E::Completed { response } => self.end(response, End::Completed),
            E::Incomplete { response } => {
                let reason = response.incomplete_details.as_ref().and_then(|d| d.reason.clone());
                self.end(response, End::Incomplete(reason));
            }
            E::Failed { response } => {
                let error = response.error.unwrap_or_else(|| wire::ApiError {
                    code: None,
                    message: "the response failed and gave no reason".into(),
                });
                return Err(api_error(provider, &error, "response.failed"));
            }
            E::Error { code, message, error } => {
                let error = error.unwrap_or(wire::ApiError { code, message });
                return Err(api_error(provider, &error, "error event in the stream"));
            }
            E::Unknown => {}
        }
        Ok(Vec::new())
    }

    /// The final response's items (authoritative when present), usage and end.
    fn end(&mut self, response: wire::Response, end: End) {
        if !response.model.is_empty() {
            self.model = response.model;
        }
        if !response.output.is_empty() {
            self.items =
                response.output.into_iter().enumerate().map(|(i, item)| (i as u32, Item::from_wire(item))).collect();
        }
        self.usage = response.usage;
        self.end = Some(end);
    }

    /// Appends to the text (or the refusal) of the message at `index`.
    fn push_text(&mut self, index: u32, delta: &str, is_refusal: bool) {
        let item = self.items.entry(index).or_insert_with(Item::empty_message);
        if !matches!(item, Item::Message { .. }) {
            *item = Item::empty_message();
        }
        if let Item::Message { text, refusal, .. } = item {
            if is_refusal { refusal } else { text }.push_str(delta);
        }
    }

    /// Appends to (or, when `whole`, replaces) the arguments of the call at `index`.
    fn push_arguments(&mut self, index: u32, piece: String, whole: bool) {
        let item = self.items.entry(index).or_insert_with(Item::empty_call);
        if !matches!(item, Item::Call { .. }) {
            *item = Item::empty_call();
        }
        if let Item::Call { arguments, .. } = item {
            if whole {
                *arguments = piece;
            } else {
                arguments.push_str(&piece);
            }
        }
    }

    /// Appends a piece of a reasoning item's summary (`is_summary`) or raw text part.
    fn reasoning_delta(&mut self, index: u32, part: u32, is_summary: bool, delta: String) {
        let item = self.items.entry(index).or_insert_with(|| Item::Reasoning {
            id: String::new(),
            summary: Vec::new(),
            encrypted: String::new(),
            text: Vec::new(),
        });
        if let Item::Reasoning { summary, text, .. } = item {
            let parts = if is_summary { summary } else { text };
            let part_index = part as usize;
            if parts.len() <= part_index {
                parts.resize(part_index + 1, String::new());
            }
            parts[part_index].push_str(&delta);
        }
        // A new part (or a new reasoning item) is shown as a new paragraph.
        let shown = match self.last_part {
            Some(last) if last != (index, part, is_summary) => format!("\n\n{delta}"),
            _ => delta,
        };
        self.last_part = Some((index, part, is_summary));
        self.reasoning.push(shown);
    }

    /// The reasoning summary text that arrived since the last call, for streaming it.
    pub fn take_reasoning(&mut self) -> Vec<String> {
        std::mem::take(&mut self.reasoning)
    }

    /// Whether `response.completed` or `response.incomplete` arrived.
    pub fn is_done(&self) -> bool {
        self.end.is_some()
    }

    /// The assembled response. Arguments that are not valid JSON are kept as a JSON string.
    pub fn finish(&self) -> ChatResponse {
        let (mut text, mut refusal) = (String::new(), String::new());
        let mut calls = Vec::new();
        let mut reasoning = Vec::new();
        let mut phases = Vec::new();
        for (index, item) in &self.items {
            match item {
                Item::Message { text: t, refusal: r, phase: p } => {
                    push_paragraph(&mut text, t);
                    push_paragraph(&mut refusal, r);
                    phases.push(p.clone());
                }
                Item::Reasoning { id, summary, encrypted, text: raw } => reasoning.push(Reasoning {
                    // The summary where there is one, else the raw reasoning text.
                    text: paragraphs(if summary.iter().any(|s| !s.is_empty()) { summary } else { raw }),
                    signature: encrypted.clone(),
                    id: id.clone(),
                    redacted: false,
                }),
                Item::Call { call_id, name, arguments } => calls.push(ToolCall {
                    id: if call_id.is_empty() { format!("call_{index}") } else { call_id.clone() },
                    name: name.clone(),
                    arguments: crate::openai::parse_arguments(arguments),
                }),
                Item::Other => {}
            }
        }
        let stop_reason = match &self.end {
            Some(End::Incomplete(reason)) => incomplete_reason(reason.as_deref()),
            _ if !refusal.is_empty() => StopReason::Refusal,
            _ if !calls.is_empty() => StopReason::ToolUse,
            _ => StopReason::EndTurn,
        };
        push_paragraph(&mut text, &refusal);
        let mut message = Message::assistant_with_tools(text, calls);
        message.reasoning = reasoning;
        // A label goes back only where it holds for the whole text: messages of one phase (or
        // one message). Commentary and an answer joined into one text are labelled neither.
        message.phase = phases.first().cloned().flatten().filter(|p| phases.iter().all(|q| q.as_deref() == Some(p)));
        sse::assembled(message, stop_reason, self.usage.as_ref().map(usage).unwrap_or_default(), &self.model)
    }
}

/// Appends `more` to `text` as a paragraph of its own.
fn push_paragraph(text: &mut String, more: &str) {
    if more.is_empty() {
        return;
    }
    if !text.is_empty() {
        text.push_str("\n\n");
    }
    text.push_str(more);
}

/// Non-empty parts as paragraphs.
fn paragraphs(parts: &[String]) -> String {
    parts.iter().filter(|s| !s.is_empty()).cloned().collect::<Vec<_>>().join("\n\n")
}

/// Parses a complete (non-streamed) response object.
pub fn parse_response(provider: &str, body: &[u8]) -> Result<ChatResponse, ProviderError> {
    let response: wire::Response = sse::parse_body(provider, "response", body)?;
    let mut acc = ResponseAccumulator::new();
    let event = match response.status.as_deref() {
        Some("failed") => wire::StreamEvent::Failed { response },
        Some("incomplete") => wire::StreamEvent::Incomplete { response },
        Some("completed") => wire::StreamEvent::Completed { response },
        _ if response.output.is_empty() => {
            return Err(sse::not_an_answer(provider, "the response has no output and no final status", body));
        }
        _ => wire::StreamEvent::Completed { response },
    };
    acc.push(provider, event)?;
    Ok(acc.finish())
}
