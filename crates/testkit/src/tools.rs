//! Tool fixtures for tests of the agent loop, the tool executor and the tools that wrap other
//! tools: they implement only [`Tool::spec`], [`Tool::call`] and [`Tool::read_only`].
//!
//! - [`EchoTool`] returns its `text` argument;
//! - [`SlowTool`] sleeps, then answers, counting starts and finishes (a cancelled call starts
//!   but never finishes);
//! - [`FailingTool`] always fails with its message;
//! - [`CountingTool`] counts its calls and keeps their arguments.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use recursive_core::{Tool, ToolContext, ToolError, ToolSpec};
use serde_json::{Value, json};

/// A parameter schema with one optional string property.
fn one_string(property: &str, description: &str) -> Value {
    json!({
        "type": "object",
        "properties": {property: {"type": "string", "description": description}}
    })
}

/// Returns its `text` argument (read-only; name `echo` unless renamed).
#[derive(Debug, Clone)]
pub struct EchoTool {
    name: String,
}

impl Default for EchoTool {
    fn default() -> Self {
        Self::new()
    }
}

impl EchoTool {
    /// The tool named `echo`.
    pub fn new() -> Self {
        Self { name: "echo".into() }
    }

    /// The same tool under another name.
    pub fn named(name: impl Into<String>) -> Self {
        Self { name: name.into() }
    }
}

#[async_trait]
impl Tool for EchoTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            description: "Returns the text it is given.".into(),
            parameters: one_string("text", "The text to return."),
        }
    }

    async fn call(&self, arguments: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        match &arguments["text"] {
            Value::String(s) => Ok(s.clone()),
            Value::Null => Ok(String::new()),
            other => Err(ToolError::InvalidArguments {
                tool: self.name.clone(),
                message: format!("`text` must be a string, got {other}"),
            }),
        }
    }

    fn read_only(&self) -> bool {
        true
    }
}

/// Sleeps for its delay, then returns `slept <ms>ms` (name `slow` unless renamed). Clones
/// share the counters.
#[derive(Debug, Clone)]
pub struct SlowTool {
    name: String,
    delay: Duration,
    started: Arc<AtomicUsize>,
    finished: Arc<AtomicUsize>,
}

impl SlowTool {
    /// The tool named `slow`, sleeping `delay` on each call.
    pub fn new(delay: Duration) -> Self {
        Self {
            name: "slow".into(),
            delay,
            started: Arc::new(AtomicUsize::new(0)),
            finished: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The same tool under another name.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Calls that started.
    pub fn started(&self) -> usize {
        self.started.load(Ordering::SeqCst)
    }

    /// Calls that slept their whole delay and returned.
    pub fn finished(&self) -> usize {
        self.finished.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Tool for SlowTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            description: format!("Waits {} ms, then answers.", self.delay.as_millis()),
            parameters: one_string("note", "Ignored."),
        }
    }

    async fn call(&self, _arguments: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        self.started.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        self.finished.fetch_add(1, Ordering::SeqCst);
        Ok(format!("slept {}ms", self.delay.as_millis()))
    }

    fn read_only(&self) -> bool {
        true
    }
}

/// Always fails with [`ToolError::Failed`] and its message (name `fail` unless renamed).
#[derive(Debug, Clone)]
pub struct FailingTool {
    name: String,
    message: String,
}

impl FailingTool {
    /// The tool named `fail`, failing with `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self { name: "fail".into(), message: message.into() }
    }

    /// The same tool under another name.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }
}

#[async_trait]
impl Tool for FailingTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            description: "Always fails.".into(),
            parameters: one_string("note", "Ignored."),
        }
    }

    async fn call(&self, _arguments: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        Err(ToolError::Failed(self.message.clone()))
    }
}

/// Counts its calls and keeps their arguments; answers `call #<n>` (name `count` unless
/// renamed; not read-only, so permission policies ask about it). Clones share the record.
#[derive(Debug, Clone)]
pub struct CountingTool {
    name: String,
    calls: Arc<Mutex<Vec<Value>>>,
}

impl Default for CountingTool {
    fn default() -> Self {
        Self::new()
    }
}

impl CountingTool {
    /// The tool named `count`.
    pub fn new() -> Self {
        Self { name: "count".into(), calls: Arc::new(Mutex::new(Vec::new())) }
    }

    /// The same tool under another name.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// How many times it was called.
    pub fn calls(&self) -> usize {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// The arguments of every call, in order.
    pub fn arguments(&self) -> Vec<Value> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

#[async_trait]
impl Tool for CountingTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            description: "Counts its calls.".into(),
            parameters: json!({"type": "object", "properties": {}}),
        }
    }

    async fn call(&self, arguments: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        calls.push(arguments);
        Ok(format!("call #{}", calls.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn echo_returns_its_text_and_is_read_only() {
        let echo = EchoTool::new();
        assert_eq!(echo.call(json!({"text": "hi"}), &ToolContext::detached()).await.unwrap(), "hi");
        assert!(echo.read_only());
        assert_eq!(EchoTool::named("say").spec().name, "say");
        let err = echo.call(json!({"text": 3}), &ToolContext::detached()).await.unwrap_err();
        assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err:?}");
    }

    #[tokio::test]
    async fn a_slow_call_dropped_midway_starts_but_does_not_finish() {
        let slow = SlowTool::new(Duration::from_secs(30));
        let ctx = ToolContext::detached();
        assert!(tokio::time::timeout(Duration::from_millis(20), slow.call(json!({}), &ctx)).await.is_err());
        assert_eq!((slow.started(), slow.finished()), (1, 0));
        let quick = SlowTool::new(Duration::from_millis(1));
        assert_eq!(quick.call(json!({}), &ToolContext::detached()).await.unwrap(), "slept 1ms");
        assert_eq!((quick.started(), quick.finished()), (1, 1));
    }

    #[tokio::test]
    async fn failing_fails_with_its_message() {
        let err = FailingTool::new("disk on fire").call(json!({}), &ToolContext::detached()).await.unwrap_err();
        assert_eq!(err, ToolError::Failed("disk on fire".into()));
    }

    #[tokio::test]
    async fn counting_counts_and_keeps_arguments_across_clones() {
        let counter = CountingTool::new();
        let clone = counter.clone();
        assert_eq!(clone.call(json!({"a": 1}), &ToolContext::detached()).await.unwrap(), "call #1");
        assert_eq!(counter.call(json!({"a": 2}), &ToolContext::detached()).await.unwrap(), "call #2");
        assert_eq!(counter.calls(), 2);
        assert_eq!(counter.arguments(), vec![json!({"a": 1}), json!({"a": 2})]);
    }
}
