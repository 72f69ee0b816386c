//! What the CLI shows while a run goes: the root run's text streamed to stdout, everything
//! else as readable lines on stderr, and the final `--json` object.

use std::io::Write;
use std::sync::Mutex;

use recursive_core::{AgentEvent, EventKind, EventSink, Message, RunResult, StderrSink, Usage};
use serde_json::{Value, json};

/// Streams the depth-0 run's text to stdout and prints other events on stderr.
pub struct CliSink {
    stream_text: bool,
    quiet: bool,
    stderr: StderrSink,
    at_line_start: Mutex<bool>,
}

impl CliSink {
    /// `stream_text`: print the root's text as it arrives (off for `--json`); `quiet`: no
    /// progress lines on stderr.
    pub fn new(stream_text: bool, quiet: bool) -> Self {
        Self { stream_text, quiet, stderr: StderrSink { show_text: !stream_text }, at_line_start: Mutex::new(true) }
    }

    fn end_line(&self) {
        if let Ok(mut start) = self.at_line_start.lock()
            && !*start
        {
            println!();
            *start = true;
        }
    }
}

impl EventSink for CliSink {
    fn emit(&self, event: &AgentEvent) {
        match &event.kind {
            EventKind::PartialText { delta } if event.ids.depth == 0 => {
                if self.stream_text {
                    print!("{delta}");
                    let _ = std::io::stdout().flush();
                    if let Ok(mut start) = self.at_line_start.lock() {
                        *start = delta.ends_with('\n');
                    }
                }
            }
            // Reasoning streams to stderr, apart from the answer on stdout.
            EventKind::PartialReasoning { delta } if event.ids.depth == 0 => {
                if self.stream_text && !self.quiet {
                    eprint!("{delta}");
                }
            }
            EventKind::AssistantText { .. } if event.ids.depth == 0 && self.stream_text => self.end_line(),
            // A fault of the root run is printed once, by the command, as its error line.
            EventKind::Error { .. } if event.ids.depth == 0 => {}
            _ => {
                if !self.quiet
                    && let Some(line) = self.stderr.format(event)
                {
                    self.end_line();
                    eprintln!("{line}");
                }
            }
        }
    }
}

/// One message in the `--json` shape: every key present.
pub fn message_json(m: &Message) -> Value {
    json!({
        "role": m.role,
        "content": m.content,
        "tool_calls": m.tool_calls.iter().map(|c| json!({"id": c.id, "name": c.name, "arguments": c.arguments})).collect::<Vec<_>>(),
        "tool_call_id": m.tool_call_id,
    })
}

/// Usage in the `--json` shape.
pub fn usage_json(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_read_tokens": u.cache_read_tokens,
        "cache_write_tokens": u.cache_write_tokens,
    })
}

/// The `recursive run --json` object: `outcome` is the finish reason (`error` after a fault,
/// with `error` saying which); everything gathered so far is there either way.
pub fn run_json(r: &RunResult, error: Option<&str>) -> Value {
    json!({
        "outcome": r.finish_reason.as_str(),
        "error": error,
        "finish_reason": r.finish_reason.as_str(),
        "finish_detail": match &r.finish_reason { recursive_core::FinishReason::ProviderStop(s) => Some(s.to_string()), _ => None },
        "output": r.output,
        "messages": r.messages.iter().map(message_json).collect::<Vec<_>>(),
        "usage": usage_json(&r.usage),
        "cost_usd": r.cost_usd,
        "steps": r.steps,
        "run_id": r.run_id,
    })
}

/// Makes a closed stdout or stderr (`recursive run … | head`) end the process quietly with
/// status 0, whatever the command and whichever thread was printing: `print!` and `eprint!`
/// panic on a broken pipe (the program ignores SIGPIPE, so that pipes to its child processes
/// cannot kill it); this hook turns exactly that panic into a quiet exit, and leaves every
/// other panic to the default hook.
pub fn end_quietly_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if is_broken_pipe_print(info.payload()) {
            std::process::exit(0);
        }
        default(info);
    }));
}

/// Whether a panic's payload is the standard library's "failed printing to stdout/stderr"
/// with a broken pipe as its cause.
fn is_broken_pipe_print(payload: &(dyn std::any::Any + Send)) -> bool {
    let message = match (payload.downcast_ref::<String>(), payload.downcast_ref::<&str>()) {
        (Some(text), _) => text.as_str(),
        (None, Some(text)) => text,
        (None, None) => return false,
    };
    let broken = std::io::Error::from_raw_os_error(nix::errno::Errno::EPIPE as i32).to_string();
    ["stdout", "stderr"]
        .iter()
        .any(|stream| message.strip_prefix(&format!("failed printing to {stream}: ")) == Some(broken.as_str()))
}

#[cfg(test)]
mod broken_pipe_tests {
    use super::*;

    #[test]
    fn only_a_print_to_a_broken_pipe_is_a_quiet_end() {
        let broken = std::io::Error::from_raw_os_error(nix::errno::Errno::EPIPE as i32);
        let quiet = format!("failed printing to stdout: {broken}");
        assert!(is_broken_pipe_print(&quiet));
        assert!(is_broken_pipe_print(&format!("failed printing to stderr: {broken}")));
        let full = std::io::Error::from_raw_os_error(nix::errno::Errno::ENOSPC as i32);
        assert!(!is_broken_pipe_print(&format!("failed printing to stdout: {full}")));
        assert!(!is_broken_pipe_print(&"index out of bounds"));
        assert!(!is_broken_pipe_print(&format!("write to child: {broken}")));
    }
}
