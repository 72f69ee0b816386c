//! What the [`ModelServer`](crate::ModelServer) answers: a scripted model turn (text, tool
//! calls, usage) rendered in the protocol and mode of the request, an HTTP error, a hang, or
//! exact bytes ([`Script`]) written in pieces.

use std::time::Duration;

use serde_json::Value;

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub(crate) kind: ReplyKind,
    pub(crate) delay: Duration,
}

#[derive(Debug, Clone)]
pub(crate) enum ReplyKind {
    Turn(Turn),
    Error { status: u16, body: String, retry_after: Option<String> },
    Raw(Script),
    Hang,
}

/// A model turn, rendered per protocol by the server.
#[derive(Debug, Clone)]
pub(crate) struct Turn {
    pub text: String,
    pub calls: Vec<Call>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub max_tokens: bool,
}

/// One scripted tool call; without an id the server numbers it (`call_<n>` for OpenAI,
/// `toolu_<n>` for Anthropic, counting calls across the server's life).
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub id: Option<String>,
    pub name: String,
    pub arguments: Value,
}

impl Reply {
    fn turn(text: String, calls: Vec<Call>) -> Self {
        Reply {
            kind: ReplyKind::Turn(Turn { text, calls, input_tokens: 10, output_tokens: 5, max_tokens: false }),
            delay: Duration::ZERO,
        }
    }

    /// A text answer that ends the turn (usage: 10 input, 5 output tokens).
    pub fn text(text: impl Into<String>) -> Self {
        Self::turn(text.into(), Vec::new())
    }

    /// One tool call.
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        Self::turn(String::new(), Vec::new()).with_call(name, arguments)
    }

    /// Several tool calls in one turn (parallel calls), in order.
    pub fn tool_calls<N: Into<String>>(calls: impl IntoIterator<Item = (N, Value)>) -> Self {
        calls.into_iter().fold(Self::turn(String::new(), Vec::new()), |r, (n, a)| r.with_call(n, a))
    }

    /// An HTTP error status with this body (JSON or text), e.g.
    /// `Reply::error(429, r#"{"error":{"message":"slow down"}}"#)`.
    pub fn error(status: u16, body: impl Into<String>) -> Self {
        Reply { kind: ReplyKind::Error { status, body: body.into(), retry_after: None }, delay: Duration::ZERO }
    }

    /// Reads the request and never answers (the connection stays open until the server is
    /// dropped), to provoke timeouts.
    pub fn hang() -> Self {
        Reply { kind: ReplyKind::Hang, delay: Duration::ZERO }
    }

    /// Exact bytes, whatever the request: a status line and headers, then body pieces each
    /// written and flushed separately.
    pub fn raw(script: Script) -> Self {
        Reply { kind: ReplyKind::Raw(script), delay: Duration::ZERO }
    }

    /// Adds text to a turn (before its tool calls).
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        if let ReplyKind::Turn(turn) = &mut self.kind {
            turn.text = text.into();
        }
        self
    }

    /// Adds a tool call to a turn; its id is numbered by the server.
    pub fn with_call(self, name: impl Into<String>, arguments: Value) -> Self {
        self.push_call(Call { id: None, name: name.into(), arguments })
    }

    /// Adds a tool call with a fixed id to a turn.
    pub fn with_call_id(self, id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        self.push_call(Call { id: Some(id.into()), name: name.into(), arguments })
    }

    fn push_call(mut self, call: Call) -> Self {
        if let ReplyKind::Turn(turn) = &mut self.kind {
            turn.calls.push(call);
        }
        self
    }

    /// Sets the usage a turn reports.
    pub fn with_usage(mut self, input_tokens: u64, output_tokens: u64) -> Self {
        if let ReplyKind::Turn(turn) = &mut self.kind {
            turn.input_tokens = input_tokens;
            turn.output_tokens = output_tokens;
        }
        self
    }

    /// Ends a turn because the token cap was reached (`length` / `max_tokens`).
    pub fn cut_at_max_tokens(mut self) -> Self {
        if let ReplyKind::Turn(turn) = &mut self.kind {
            turn.max_tokens = true;
        }
        self
    }

    /// Adds a `Retry-After` header to an error reply.
    pub fn with_retry_after(mut self, value: impl Into<String>) -> Self {
        if let ReplyKind::Error { retry_after, .. } = &mut self.kind {
            *retry_after = Some(value.into());
        }
        self
    }

    /// Waits this long after reading the request before answering.
    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// Exact bytes to answer with: what [`Reply::raw`] writes.
#[derive(Debug, Clone)]
pub struct Script {
    /// Status line and headers, without the final blank line.
    pub head: String,
    /// Body pieces, each written (and flushed) separately.
    pub pieces: Vec<Vec<u8>>,
    /// Pause after each piece (zero: yield to the scheduler only).
    pub pause: Duration,
}

impl Script {
    /// An SSE answer of `body` cut into pieces of `size` bytes, closed by ending the connection.
    pub fn sse(body: &[u8], size: usize) -> Self {
        Self::sse_pieces(body.chunks(size.max(1)).map(<[u8]>::to_vec).collect())
    }

    /// An SSE answer made of exactly these pieces.
    pub fn sse_pieces(pieces: Vec<Vec<u8>>) -> Self {
        Self {
            head: "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close"
                .into(),
            pieces,
            pause: Duration::ZERO,
        }
    }

    /// Replaces the status line and headers.
    pub fn with_head(mut self, head: impl Into<String>) -> Self {
        self.head = head.into();
        self
    }

    /// Pauses after each piece.
    pub fn with_pause(mut self, pause: Duration) -> Self {
        self.pause = pause;
        self
    }
}
