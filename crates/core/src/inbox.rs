//! An inbox of user messages for a run under way: whoever drives the run from outside (a chat's
//! person steering the running turn) puts messages in, and the agent loop drains them before
//! each model call — each one becomes a user message of the transcript, announced by an
//! [`InboxEvent::Delivered`] event. What the run did not take before it ended stays in the inbox
//! for the caller to [`take`](Inbox::take).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::{EventKind, Extension, ExtensionEvent};
use crate::message::Message;
use crate::run::RunScope;

/// User messages waiting for the next model call of a run; cheap to clone (shared).
#[derive(Clone, Debug, Default)]
pub struct Inbox(Arc<Mutex<VecDeque<String>>>);

impl Inbox {
    /// An empty inbox.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a message for the run's next model call.
    pub fn push(&self, text: impl Into<String>) {
        if let Ok(mut waiting) = self.0.lock() {
            waiting.push_back(text.into());
        }
    }

    /// Takes every waiting message out, oldest first.
    pub fn take(&self) -> Vec<String> {
        self.0.lock().map(|mut waiting| waiting.drain(..).collect()).unwrap_or_default()
    }

    /// How many messages wait.
    pub fn len(&self) -> usize {
        self.0.lock().map(|waiting| waiting.len()).unwrap_or_default()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The waiting messages as user messages for the transcript, each announced on `scope`.
    pub(crate) fn deliver(&self, scope: &RunScope, step: u32) -> Vec<Message> {
        let texts = self.take();
        for text in &texts {
            scope.emit(step, EventKind::Extension(Extension::new(InboxEvent::Delivered { text: text.clone() })));
        }
        texts.into_iter().map(Message::user).collect()
    }
}

/// The events of an [`Inbox`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum InboxEvent {
    /// A message of the inbox joined the transcript, before the run's next model call.
    #[serde(rename = "inbox_delivered")]
    Delivered {
        /// The message.
        text: String,
    },
}

impl ExtensionEvent for InboxEvent {
    fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    fn render(&self) -> Option<String> {
        match self {
            InboxEvent::Delivered { text } => Some(format!("user message added: {}", crate::text::one_line(text, 100))),
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
