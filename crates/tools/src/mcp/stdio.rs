//! The child process of a stdio MCP server: started in its own process group, stopped with
//! the connection (the group is killed synchronously when its [`GroupKiller`] drops, and by
//! [`crate::kill_running_commands`] when the program exits at once, so a server that
//! ignores the closing of its stdin does not outlive the run), and read through
//! [`MessageCap`], which keeps any one message from the server under [`MAX_MESSAGE_BYTES`].

use std::pin::Pin;
use std::process::Stdio;
use std::task::{Context, Poll};
use std::time::Duration;

use nix::sys::signal::Signal;
use process_wrap::tokio::{ChildWrapper, CommandWrap, ProcessGroup};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};

use crate::process::GroupKiller;

/// Most bytes of one message (one line) from a stdio server. A longer message is dropped; if it
/// was the answer to a request, that request fails with an error saying so.
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;

/// How long a server may take to exit once its stdin is closed, before it is signalled.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// A running server process; its process group is killed when this is dropped.
pub(super) struct ServerProcess {
    child: Box<dyn ChildWrapper>,
    group: GroupKiller,
}

/// The parts of a started server.
pub(super) struct Started {
    pub process: ServerProcess,
    pub stdout: MessageCap<ChildStdout>,
    pub stdin: ChildStdin,
    pub stderr: Option<ChildStderr>,
}

/// Starts `cmd` in its own process group with piped stdio.
pub(super) fn spawn(mut cmd: tokio::process::Command) -> std::io::Result<Started> {
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let mut wrapped = CommandWrap::from(cmd);
    wrapped.wrap(ProcessGroup::leader());
    let mut child = wrapped.spawn()?;
    let group = GroupKiller::new(child.id());
    let missing = || std::io::Error::other("the server's stdio was not piped");
    let stdin = child.stdin().take().ok_or_else(missing)?;
    let stdout = child.stdout().take().ok_or_else(missing)?;
    let stderr = child.stderr().take();
    Ok(Started { process: ServerProcess { child, group }, stdout: MessageCap::new(stdout), stdin, stderr })
}

impl ServerProcess {
    /// Waits briefly for the server to exit (its stdin should be closed by now), then
    /// terminates its process group, then kills it; what is left of the group goes with it.
    pub(super) async fn stop(mut self) {
        if !self.exits_within(EXIT_GRACE).await {
            self.group.signal(Signal::SIGTERM);
            if !self.exits_within(EXIT_GRACE).await {
                self.group.signal(Signal::SIGKILL);
                self.exits_within(EXIT_GRACE).await;
            }
        }
        self.group.kill();
    }

    async fn exits_within(&mut self, grace: Duration) -> bool {
        tokio::time::timeout(grace, self.child.wait()).await.is_ok()
    }
}

impl Drop for ServerProcess {
    /// The group itself goes with [`GroupKiller`]'s drop.
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// Reads a server's stdout, passing messages (lines) through until one passes
/// [`MAX_MESSAGE_BYTES`]: that one is cut off with a newline (the client ignores the broken
/// line), the rest of it is skipped, and if its top-level `id` was seen an error response for
/// that id is passed on instead, so the waiting request fails at once with the reason.
pub(super) struct MessageCap<R> {
    inner: R,
    max: usize,
    scratch: Vec<u8>,
    out: Vec<u8>,
    sent: usize,
    line: usize,
    skipping: bool,
    id: IdScan,
}

impl<R> MessageCap<R> {
    pub(super) fn new(inner: R) -> Self {
        Self::with_max(inner, MAX_MESSAGE_BYTES)
    }

    fn with_max(inner: R, max: usize) -> Self {
        MessageCap {
            inner,
            max,
            scratch: vec![0; 64 * 1024],
            out: Vec::new(),
            sent: 0,
            line: 0,
            skipping: false,
            id: IdScan::default(),
        }
    }

    /// Filters freshly read bytes into `out`.
    fn filter(&mut self, n: usize) {
        let mut start = 0;
        while start < n {
            let rest = &self.scratch[start..n];
            let (piece, ends_line) = match rest.iter().position(|b| *b == b'\n') {
                Some(i) => (&rest[..=i], true),
                None => (rest, false),
            };
            let len = piece.len();
            self.id.feed(piece);
            if !self.skipping {
                let room = self.max.saturating_sub(self.line);
                if len <= room || (ends_line && len == room + 1) {
                    self.out.extend_from_slice(piece);
                    self.line += len;
                } else {
                    self.out.extend_from_slice(&piece[..room]);
                    self.out.push(b'\n');
                    self.skipping = true;
                }
            }
            if ends_line {
                self.end_line();
            }
            start += len;
        }
    }

    /// A line ended: an over-long one is answered with an error for its id.
    fn end_line(&mut self) {
        if self.skipping {
            let id = self.id.id();
            tracing::warn!(id = ?id, "an MCP server sent a message over {} bytes; dropped", self.max);
            if let Some(id) = id {
                let message = format!(
                    "the server's answer is larger than {} bytes (the client's limit for one message); it was dropped",
                    self.max
                );
                let error = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": message}});
                self.out.extend_from_slice(error.to_string().as_bytes());
                self.out.push(b'\n');
            }
        }
        self.skipping = false;
        self.line = 0;
        self.id = IdScan::default();
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for MessageCap<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.sent < this.out.len() {
                let take = (this.out.len() - this.sent).min(buf.remaining());
                buf.put_slice(&this.out[this.sent..this.sent + take]);
                this.sent += take;
                if this.sent == this.out.len() {
                    this.out.clear();
                    this.sent = 0;
                }
                return Poll::Ready(Ok(()));
            }
            let mut read = ReadBuf::new(&mut this.scratch);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) => {
                    let n = read.filled().len();
                    if n == 0 {
                        return Poll::Ready(Ok(()));
                    }
                    this.filter(n);
                }
                other => return other,
            }
        }
    }
}

/// Finds the value of the top-level `"id"` member of a JSON object read byte by byte,
/// without holding the object.
#[derive(Debug, Default)]
struct IdScan {
    depth: u32,
    in_string: bool,
    escaped: bool,
    expect_key: bool,
    in_key: bool,
    key: Vec<u8>,
    capture: Option<Vec<u8>>,
    found: Option<Vec<u8>>,
}

/// Longest id value kept (JSON-RPC ids are short numbers or strings).
const MAX_ID_BYTES: usize = 256;

/// Longest key remembered: only `id` matters.
const MAX_KEY_BYTES: usize = 4;

impl IdScan {
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.byte(b);
        }
    }

    fn byte(&mut self, b: u8) {
        if self.in_string {
            self.string_byte(b);
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.expect_key {
                    self.in_key = true;
                    self.key.clear();
                }
                self.keep(b);
            }
            b'{' | b'[' => {
                self.depth += 1;
                self.expect_key = self.depth == 1 && b == b'{';
                self.keep(b);
            }
            b'}' | b']' => {
                if self.depth == 1 {
                    self.finish_value();
                }
                self.depth = self.depth.saturating_sub(1);
                self.keep(b);
            }
            b':' if self.depth == 1 => {
                self.expect_key = false;
                if self.key == b"id" && self.found.is_none() {
                    self.capture = Some(Vec::new());
                }
            }
            b',' if self.depth == 1 => {
                self.finish_value();
                self.expect_key = true;
            }
            b' ' | b'\t' | b'\r' | b'\n' => {}
            _ => self.keep(b),
        }
    }

    fn string_byte(&mut self, b: u8) {
        self.keep(b);
        if self.escaped {
            self.escaped = false;
        } else if b == b'\\' {
            self.escaped = true;
        } else if b == b'"' {
            self.in_string = false;
            self.in_key = false;
            return;
        }
        if self.in_key && self.key.len() <= MAX_KEY_BYTES {
            self.key.push(b);
        }
    }

    /// Adds a byte to the id value being captured (dropping an implausibly long one).
    fn keep(&mut self, b: u8) {
        if let Some(value) = &mut self.capture {
            if value.len() < MAX_ID_BYTES {
                value.push(b);
            } else {
                self.capture = None;
            }
        }
    }

    fn finish_value(&mut self) {
        if let Some(value) = self.capture.take() {
            self.found = Some(value);
        }
    }

    /// The id, if one was seen and is a number or a string.
    fn id(&mut self) -> Option<Value> {
        self.finish_value();
        let value: Value = serde_json::from_slice(self.found.as_deref()?).ok()?;
        (value.is_number() || value.is_string()).then_some(value)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    fn id_of(line: &str) -> Option<Value> {
        let mut scan = IdScan::default();
        scan.feed(line.as_bytes());
        scan.id()
    }

    #[test]
    fn the_top_level_id_is_found_wherever_it_stands() {
        assert_eq!(id_of(r#"{"jsonrpc":"2.0","id":7,"result":{"id":9}}"#), Some(json!(7)));
        assert_eq!(id_of(r#"{"result":{"id":9,"x":"\"id\":3"},"jsonrpc":"2.0","id":"a\"b"}"#), Some(json!("a\"b")));
        assert_eq!(id_of(r#"{ "id" : 12 , "result": [1, {"id": 2}] }"#), Some(json!(12)));
        assert_eq!(id_of(r#"{"method":"notifications/progress","params":{"id":1}}"#), None);
        assert_eq!(id_of(r#"{"jsonrpc":"2.0","id":7,"result":{"text":"zzzz"#), Some(json!(7)), "cut before the end");
    }

    async fn read_through(input: Vec<u8>, max: usize) -> String {
        let mut cap = MessageCap::with_max(std::io::Cursor::new(input), max);
        let mut out = Vec::new();
        cap.read_to_end(&mut out).await.unwrap();
        String::from_utf8(out).unwrap()
    }

    #[tokio::test]
    async fn short_messages_pass_unchanged() {
        let input = "{\"id\":1,\"result\":{}}\n{\"id\":2,\"result\":{}}\n";
        assert_eq!(read_through(input.into(), 64).await, input);
        let exact = format!("{{\"id\":1,\"r\":\"{}\"}}\n", "x".repeat(10));
        let len = exact.len() - 1;
        assert_eq!(read_through(exact.clone().into(), len).await, exact, "a message of exactly the limit passes");
    }

    #[tokio::test]
    async fn an_over_long_answer_becomes_an_error_for_its_id() {
        let big = format!("{{\"result\":{{\"text\":\"{}\"}},\"jsonrpc\":\"2.0\",\"id\":5}}\n", "z".repeat(5000));
        let next = "{\"jsonrpc\":\"2.0\",\"id\":6,\"result\":{}}\n";
        let out = read_through(format!("{big}{next}").into_bytes(), 100).await;
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert_eq!(lines[0].len(), 100, "the cut-off prefix, which the client ignores");
        let error: Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(error["id"], 5);
        assert!(error["error"]["message"].as_str().unwrap().contains("larger than 100 bytes"));
        assert_eq!(format!("{}\n", lines[2]), next, "what follows is untouched");
    }
}
