//! Cassettes: [`RecordingProvider`] appends every interaction (the request and its response,
//! or the error) to a JSONL file as it happens; [`ReplayProvider`] serves them offline.
//!
//! A request is matched by content against the interactions not used yet: the first unused
//! interaction whose request is equal (messages, tools, options — JSON key order does not
//! matter) answers it. System messages are left out of the comparison (they carry the
//! machine's workspace path and the date), and a request without a model takes the recorded one. Matching by content rather than position
//! lets concurrent sub-calls arrive in any order. When nothing matches, the error names the
//! cassette and shows where the request differs from the nearest unused recording.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::StreamExt;
use recursive_core::{ChatProvider, ChatRequest, ChatResponse, ChatStream, Message, ProviderError, StreamEvent};
use serde::{Deserialize, Serialize};

use crate::error::LlmError;
use crate::http::clip;

/// A provider error in a form that can be written to a cassette.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RecordedError {
    /// [`ProviderError::Http`].
    Http {
        /// Provider name.
        provider: String,
        /// HTTP status.
        status: u16,
        /// Message.
        message: String,
        /// `Retry-After`.
        #[serde(default)]
        retry_after_secs: Option<f64>,
    },
    /// [`ProviderError::Connection`].
    Connection {
        /// Provider name.
        provider: String,
        /// Message.
        message: String,
    },
    /// [`ProviderError::Timeout`].
    Timeout {
        /// Provider name.
        provider: String,
        /// The timeout.
        secs: f64,
    },
    /// [`ProviderError::Malformed`].
    Malformed {
        /// Provider name.
        provider: String,
        /// Message.
        message: String,
    },
    /// [`ProviderError::Truncated`].
    Truncated {
        /// Provider name.
        provider: String,
        /// Message.
        message: String,
    },
    /// [`ProviderError::Invalid`] (and any kind this version does not know).
    Invalid {
        /// Message.
        message: String,
    },
}

impl From<&ProviderError> for RecordedError {
    fn from(e: &ProviderError) -> Self {
        match e.clone() {
            ProviderError::Http { provider, status, message, retry_after_secs } => {
                RecordedError::Http { provider, status, message, retry_after_secs }
            }
            ProviderError::Connection { provider, message } => RecordedError::Connection { provider, message },
            ProviderError::Timeout { provider, secs } => RecordedError::Timeout { provider, secs },
            ProviderError::Malformed { provider, message } => RecordedError::Malformed { provider, message },
            ProviderError::Truncated { provider, message } => RecordedError::Truncated { provider, message },
            ProviderError::Invalid(message) => RecordedError::Invalid { message },
            other => RecordedError::Invalid { message: other.to_string() },
        }
    }
}

impl From<RecordedError> for ProviderError {
    fn from(e: RecordedError) -> Self {
        match e {
            RecordedError::Http { provider, status, message, retry_after_secs } => {
                ProviderError::Http { provider, status, message, retry_after_secs }
            }
            RecordedError::Connection { provider, message } => ProviderError::Connection { provider, message },
            RecordedError::Timeout { provider, secs } => ProviderError::Timeout { provider, secs },
            RecordedError::Malformed { provider, message } => ProviderError::Malformed { provider, message },
            RecordedError::Truncated { provider, message } => ProviderError::Truncated { provider, message },
            RecordedError::Invalid { message } => ProviderError::Invalid(message),
        }
    }
}

/// One line of a cassette: a request and what came back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interaction {
    /// The request as the provider received it.
    pub request: ChatRequest,
    /// The assembled response, when the call succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<ChatResponse>,
    /// The error, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RecordedError>,
}

impl Interaction {
    fn outcome(&self) -> Result<ChatResponse, ProviderError> {
        match (&self.response, &self.error) {
            (Some(r), _) => Ok(r.clone()),
            (None, Some(e)) => Err(e.clone().into()),
            (None, None) => Err(ProviderError::Invalid("cassette interaction has neither response nor error".into())),
        }
    }
}

/// Reads every interaction of a cassette.
pub fn read_cassette(path: impl AsRef<Path>) -> Result<Vec<Interaction>, LlmError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|e| LlmError::io(path, e))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let interaction: Interaction = serde_json::from_str(line).map_err(|e| LlmError::Cassette {
            path: path.to_path_buf(),
            line: i + 1,
            message: e.to_string(),
        })?;
        if interaction.response.is_none() && interaction.error.is_none() {
            return Err(LlmError::Cassette {
                path: path.to_path_buf(),
                line: i + 1,
                message: "an interaction needs a `response` or an `error`".into(),
            });
        }
        out.push(interaction);
    }
    Ok(out)
}

struct Cassette {
    path: PathBuf,
    file: Mutex<File>,
}

impl Cassette {
    fn append(&self, interaction: &Interaction) {
        let Ok(mut line) = serde_json::to_vec(interaction) else { return };
        line.push(b'\n');
        match self.file.lock() {
            Ok(mut f) => {
                if let Err(e) = f.write_all(&line).and_then(|()| f.flush()) {
                    tracing::warn!("cassette {}: write failed: {e}", self.path.display());
                }
            }
            Err(_) => tracing::warn!("cassette {}: lock poisoned", self.path.display()),
        }
    }
}

/// A provider that records every interaction of another one to a cassette as it happens.
/// A call is written when its stream completes or fails; a stream dropped halfway is not.
#[derive(Clone)]
pub struct RecordingProvider {
    inner: Arc<dyn ChatProvider>,
    cassette: Arc<Cassette>,
}

impl RecordingProvider {
    /// Wraps `inner`, appending to the cassette at `path` (created with its directories).
    pub fn new(inner: Arc<dyn ChatProvider>, path: impl AsRef<Path>) -> Result<Self, LlmError> {
        let path = path.as_ref();
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| LlmError::io(parent, e))?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path).map_err(|e| LlmError::io(path, e))?;
        Ok(Self { inner, cassette: Arc::new(Cassette { path: path.to_path_buf(), file: Mutex::new(file) }) })
    }

    /// The cassette file.
    pub fn path(&self) -> &Path {
        &self.cassette.path
    }
}

#[async_trait]
impl ChatProvider for RecordingProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn default_model(&self) -> &str {
        self.inner.default_model()
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ProviderError> {
        let stream = match self.inner.stream(request.clone()).await {
            Ok(s) => s,
            Err(e) => {
                self.cassette.append(&Interaction { request, response: None, error: Some((&e).into()) });
                return Err(e);
            }
        };
        let cassette = self.cassette.clone();
        let mut pending = Some(request);
        Ok(stream
            .map(move |item| {
                match &item {
                    Ok(StreamEvent::Completed(r)) => {
                        if let Some(request) = pending.take() {
                            cassette.append(&Interaction { request, response: Some(r.clone()), error: None });
                        }
                    }
                    Err(e) => {
                        if let Some(request) = pending.take() {
                            cassette.append(&Interaction { request, response: None, error: Some(e.into()) });
                        }
                    }
                    _ => {}
                }
                item
            })
            .boxed())
    }
}

/// A provider that answers from a cassette, offline.
pub struct ReplayProvider {
    path: PathBuf,
    interactions: Vec<Interaction>,
    used: Mutex<Vec<bool>>,
    model: String,
}

impl std::fmt::Debug for ReplayProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayProvider")
            .field("path", &self.path)
            .field("interactions", &self.interactions.len())
            .finish()
    }
}

impl ReplayProvider {
    /// Loads a cassette.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, LlmError> {
        let path = path.as_ref();
        let interactions = read_cassette(path)?;
        Ok(Self::from_interactions(path, interactions))
    }

    /// Serves these interactions; `path` is only used in messages.
    pub fn from_interactions(path: impl Into<PathBuf>, interactions: Vec<Interaction>) -> Self {
        let model = interactions.iter().find_map(|i| i.response.as_ref().map(|r| r.model.clone())).unwrap_or_default();
        let used = Mutex::new(vec![false; interactions.len()]);
        Self { path: path.into(), interactions, used, model }
    }

    /// Recorded interactions not served yet.
    pub fn remaining(&self) -> usize {
        self.used.lock().map(|u| u.iter().filter(|x| !**x).count()).unwrap_or(0)
    }

    /// Recorded interactions in all.
    pub fn len(&self) -> usize {
        self.interactions.len()
    }

    /// Whether the cassette is empty.
    pub fn is_empty(&self) -> bool {
        self.interactions.is_empty()
    }

    fn take(&self, request: &ChatRequest) -> Result<Result<ChatResponse, ProviderError>, ProviderError> {
        let mut used = self.used.lock().map_err(|_| ProviderError::Invalid("replay state poisoned".into()))?;
        let found = self.interactions.iter().enumerate().position(|(i, rec)| !used[i] && same(&rec.request, request));
        if let Some(i) = found {
            used[i] = true;
            return Ok(self.interactions[i].outcome());
        }
        Err(ProviderError::Invalid(self.no_match_message(request, &used)))
    }

    fn no_match_message(&self, request: &ChatRequest, used: &[bool]) -> String {
        let unused: Vec<usize> = (0..self.interactions.len()).filter(|i| !used[*i]).collect();
        let mut msg = format!(
            "replay: the cassette {} has no recorded interaction for this request ({} recorded, {} unused)",
            self.path.display(),
            self.interactions.len(),
            unused.len()
        );
        let nearest = unused.iter().copied().max_by_key(|i| {
            let rec = &self.interactions[*i].request;
            let prefix = common_prefix(&rec.messages, &request.messages);
            // Prefer the longest shared history, then the earliest recording.
            (prefix, rec.tools == request.tools, rec.options == request.options, std::cmp::Reverse(*i))
        });
        match nearest {
            Some(i) => {
                msg.push_str(&format!(
                    "; nearest unused recording is interaction #{}: {}",
                    i + 1,
                    describe_difference(&self.interactions[i].request, request)
                ));
            }
            None if !self.interactions.is_empty() => msg.push_str("; every recorded interaction was already used"),
            None => {}
        }
        msg
    }
}

/// Whether `request` is the recorded one. System messages are not compared: they carry the
/// machine's facts (the workspace path, the date), so a cassette recorded on one machine replays
/// on another. Nor is the prompt-cache key, which names the run that made the call. A request
/// that names no model (the provider's default, as when a cassette is replayed without
/// `--model`) matches whatever model was recorded.
fn same(recorded: &ChatRequest, request: &ChatRequest) -> bool {
    let mut request = comparable(request);
    if request.options.model.is_empty() {
        request.options.model = recorded.options.model.clone();
    }
    comparable(recorded) == request
}

/// A request without what differs from run to run: system messages and the prompt-cache key.
fn comparable(request: &ChatRequest) -> ChatRequest {
    let mut r = request.clone();
    r.messages.retain(|m| m.role != recursive_core::Role::System);
    r.options.prompt_cache_key = None;
    r
}

fn common_prefix(a: &[Message], b: &[Message]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn summarize(m: &Message) -> String {
    let mut s = format!("{:?} {:?}", m.role, clip(&m.content, 160));
    for c in &m.tool_calls {
        s.push_str(&format!(" +call {}({})", c.name, clip(&c.arguments.to_string(), 80)));
    }
    if let Some(id) = &m.tool_call_id {
        s.push_str(&format!(" (result of {id})"));
    }
    s
}

/// Where two texts first differ: the character position and a short excerpt of each from a
/// little before it, so a change past the point where summaries are clipped is still visible.
fn text_difference(recorded: &str, request: &str) -> String {
    let at = recorded.chars().zip(request.chars()).take_while(|(x, y)| x == y).count();
    let start = at.saturating_sub(20);
    let excerpt = |t: &str| {
        let tail: String = t.chars().skip(start).collect();
        let lead = if start > 0 { "…" } else { "" };
        format!("{lead}{}", clip(&tail, 60))
    };
    format!(
        "differs from character {at} ({} vs {} characters): recorded {:?} vs request {:?}",
        recorded.chars().count(),
        request.chars().count(),
        excerpt(recorded),
        excerpt(request)
    )
}

/// Where two requests first differ, in one short paragraph.
fn describe_difference(recorded: &ChatRequest, request: &ChatRequest) -> String {
    let prefix = common_prefix(&recorded.messages, &request.messages);
    let (nr, nq) = (recorded.messages.len(), request.messages.len());
    if prefix < nr && prefix < nq {
        let (a, b) = (&recorded.messages[prefix], &request.messages[prefix]);
        let mut out =
            format!("first difference at messages[{prefix}]: recorded {} vs request {}", summarize(a), summarize(b));
        if a.role == b.role && a.content != b.content {
            out.push_str(&format!("; the content {}", text_difference(&a.content, &b.content)));
        }
        return out;
    }
    if nr != nq {
        let (who, extra) =
            if nq > nr { ("request", &request.messages[prefix]) } else { ("recording", &recorded.messages[prefix]) };
        return format!(
            "the recording has {nr} messages and the request {nq}; messages[{prefix}] only in the {who}: {}",
            summarize(extra)
        );
    }
    if recorded.tools != request.tools {
        let names = |r: &ChatRequest| r.tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>().join(", ");
        let (a, b) = (names(recorded), names(request));
        return if a == b {
            let changed = recorded.tools.iter().zip(&request.tools).find(|(x, y)| x != y);
            match changed {
                Some((x, y)) => {
                    let what = if x.description != y.description {
                        format!("description {}", text_difference(&x.description, &y.description))
                    } else {
                        let (pa, pb) = (x.parameters.to_string(), y.parameters.to_string());
                        format!("parameters {}", text_difference(&pa, &pb))
                    };
                    format!("same messages; the spec of tool `{}` differs: {what}", x.name)
                }
                None => format!("same messages; the tool specs differ (tools: {a})"),
            }
        } else {
            format!("same messages; tools differ: recorded [{a}] vs request [{b}]")
        };
    }
    let json = |r: &ChatRequest| serde_json::to_string(&r.options).unwrap_or_default();
    format!("same messages and tools; options differ: recorded {} vs request {}", json(recorded), json(request))
}

/// Splits text into word-sized deltas (each after the first starts at a space).
fn deltas(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if c == ' ' && i > start {
            out.push(text[start..i].to_string());
            start = i;
        }
    }
    if start < text.len() {
        out.push(text[start..].to_string());
    }
    out
}

#[async_trait]
impl ChatProvider for ReplayProvider {
    fn name(&self) -> &str {
        "replay"
    }

    fn default_model(&self) -> &str {
        &self.model
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ProviderError> {
        let response = self.take(&request)??;
        let mut events: Vec<Result<StreamEvent, ProviderError>> =
            deltas(&response.message.content).into_iter().map(|d| Ok(StreamEvent::TextDelta(d))).collect();
        events.push(Ok(StreamEvent::Completed(response)));
        Ok(futures::stream::iter(events).boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_rejoin_to_the_text() {
        let text = "héllo wörld  and more ";
        assert_eq!(deltas(text).concat(), text);
        assert!(deltas(text).len() > 2);
    }

    #[test]
    fn errors_round_trip_through_the_cassette_form() {
        let e = ProviderError::Http {
            provider: "p".into(),
            status: 429,
            message: "slow".into(),
            retry_after_secs: Some(1.0),
        };
        let back: ProviderError = RecordedError::from(&e).into();
        assert_eq!(back, e);
    }

    #[test]
    fn a_difference_past_the_clipped_summary_is_still_shown() {
        let long = "a".repeat(300);
        let a = ChatRequest { messages: vec![Message::user(format!("{long} paris"))], ..Default::default() };
        let b = ChatRequest { messages: vec![Message::user(format!("{long} rome"))], ..Default::default() };
        let d = describe_difference(&a, &b);
        assert!(d.contains("differs from character 301") && d.contains("paris") && d.contains("rome"), "{d}");
    }

    #[test]
    fn a_changed_tool_spec_is_named() {
        let spec = |description: &str| recursive_core::ToolSpec {
            name: "read_file".into(),
            description: description.into(),
            parameters: serde_json::json!({"type": "object"}),
        };
        let a = ChatRequest { tools: vec![spec("Reads a file.")], ..Default::default() };
        let b = ChatRequest { tools: vec![spec("Reads a text file.")], ..Default::default() };
        let d = describe_difference(&a, &b);
        assert!(d.contains("tool `read_file`") && d.contains("description"), "{d}");
    }

    #[test]
    fn the_difference_names_the_first_differing_message() {
        let a = ChatRequest { messages: vec![Message::user("x"), Message::user("paris")], ..Default::default() };
        let b = ChatRequest { messages: vec![Message::user("x"), Message::user("rome")], ..Default::default() };
        let d = describe_difference(&a, &b);
        assert!(d.contains("messages[1]") && d.contains("paris") && d.contains("rome"), "{d}");
    }
}
