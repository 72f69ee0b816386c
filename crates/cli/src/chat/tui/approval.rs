//! Tool approvals in the terminal UI: the policy's question travels to the UI as an [`Ask`],
//! shown with what the call would do — a coloured diff for `apply_patch` and `write_file`, the
//! parsed commands for `run_shell`, the arguments otherwise — and answered with a key.

use std::path::Path;

use async_trait::async_trait;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use recursive_core::ToolCall;
use recursive_tools::{Approval, ApprovalHandler};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

/// A question for the person.
pub struct Ask {
    /// The call.
    pub call: ToolCall,
    /// Which rule or default asked.
    pub reason: String,
    /// Where the answer goes.
    pub reply: oneshot::Sender<Approval>,
}

/// Sends the policy's questions to the UI and waits for the answer (declined when the UI is
/// gone).
pub struct TuiApprover {
    asks: mpsc::UnboundedSender<Ask>,
}

impl TuiApprover {
    /// The approver and the receiving end the UI reads.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<Ask>) {
        let (asks, rx) = mpsc::unbounded_channel();
        (Self { asks }, rx)
    }
}

#[async_trait]
impl ApprovalHandler for TuiApprover {
    async fn approve(&self, call: &ToolCall, reason: &str) -> Approval {
        let (reply, answer) = oneshot::channel();
        if self.asks.send(Ask { call: call.clone(), reason: reason.to_string(), reply }).is_err() {
            return Approval::No;
        }
        answer.await.unwrap_or(Approval::No)
    }
}

/// Most lines of a diff or argument listing shown in a question.
const MAX_SHOWN_LINES: usize = 60;

/// Most bytes of a file read to show a `write_file` diff.
const MAX_DIFF_SOURCE: u64 = 1024 * 1024;

/// What `call` would do, as lines for the question (`root`: the workspace, for `write_file`'s
/// current file).
pub fn describe(call: &ToolCall, root: &Path) -> Vec<Line<'static>> {
    let args = match &call.arguments {
        Value::String(s) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
        v => v.clone(),
    };
    let str_arg = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_string);
    let mut lines = match (call.name.as_str(), str_arg("patch"), str_arg("path"), str_arg("command")) {
        ("apply_patch", Some(patch), _, _) => patch.lines().map(patch_line).collect(),
        ("write_file", _, Some(path), _) => write_diff(root, &path, &str_arg("content").unwrap_or_default()),
        ("run_shell", _, _, Some(command)) => shell_lines(&command),
        _ => pretty(&args),
    };
    if lines.len() > MAX_SHOWN_LINES {
        let more = lines.len() - MAX_SHOWN_LINES;
        lines.truncate(MAX_SHOWN_LINES);
        lines.push(Line::styled(format!("… {more} more line(s)"), Style::new().fg(Color::DarkGray)));
    }
    lines
}

/// A line of a patch or unified diff, coloured by its kind.
pub(super) fn patch_line(line: &str) -> Line<'static> {
    let style = if line.starts_with("***") || line.starts_with("---") || line.starts_with("+++") {
        Style::new().add_modifier(Modifier::BOLD)
    } else if line.starts_with('+') {
        Style::new().fg(Color::Green)
    } else if line.starts_with('-') {
        Style::new().fg(Color::Red)
    } else if line.starts_with("@@") {
        Style::new().fg(Color::Cyan)
    } else {
        Style::new()
    };
    Line::styled(line.to_string(), style)
}

/// The unified diff from the file at `path` (if any) to `content`.
fn write_diff(root: &Path, path: &str, content: &str) -> Vec<Line<'static>> {
    let real = root.join(path);
    let old = std::fs::metadata(&real)
        .ok()
        .filter(|m| m.is_file() && m.len() <= MAX_DIFF_SOURCE)
        .and_then(|_| std::fs::read_to_string(&real).ok());
    let header = match &old {
        Some(_) => format!("*** overwrite {path}"),
        None => format!("*** create {path}"),
    };
    let diff = similar::TextDiff::from_lines(old.as_deref().unwrap_or(""), content);
    let unified = diff.unified_diff().context_radius(3).header(path, path).to_string();
    std::iter::once(patch_line(&header)).chain(unified.lines().map(patch_line)).collect()
}

/// A shell line and the simple commands it parses into.
fn shell_lines(command: &str) -> Vec<Line<'static>> {
    let mut lines = vec![Line::from(vec![
        Span::styled("$ ", Style::new().fg(Color::DarkGray)),
        Span::styled(command.to_string(), Style::new().add_modifier(Modifier::BOLD)),
    ])];
    match recursive_tools::command::parse(command) {
        recursive_tools::command::Parsed::Commands(commands) => {
            for c in commands {
                let words = c.argv.iter().map(|w| shell_words::quote(w).into_owned()).collect::<Vec<_>>().join(" ");
                lines.push(Line::styled(format!("  runs: {words}"), Style::new().fg(Color::Yellow)));
            }
        }
        _ => lines.push(Line::styled(
            "  (the line could not be taken apart into commands)".to_string(),
            Style::new().fg(Color::Red),
        )),
    }
    lines
}

/// Arguments as pretty JSON.
fn pretty(args: &Value) -> Vec<Line<'static>> {
    serde_json::to_string_pretty(args)
        .unwrap_or_else(|_| args.to_string())
        .lines()
        .map(|l| Line::raw(l.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(lines: &[Line]) -> String {
        lines.iter().map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect::<String>() + "\n").collect()
    }

    #[test]
    fn a_write_is_shown_as_a_diff_against_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\nthree\n").unwrap();
        let call = ToolCall {
            id: "c".into(),
            name: "write_file".into(),
            arguments: serde_json::json!({"path": "a.txt", "content": "one\nTWO\nthree\n"}),
        };
        let lines = describe(&call, dir.path());
        let shown = text(&lines);
        assert!(shown.contains("-two\n") && shown.contains("+TWO\n"), "{shown}");
        let added = lines.iter().find(|l| l.spans.iter().any(|s| s.content == "+TWO")).unwrap();
        assert_eq!(added.style.fg, Some(Color::Green));
    }

    #[test]
    fn a_shell_call_shows_its_parsed_commands() {
        let call = ToolCall {
            id: "c".into(),
            name: "run_shell".into(),
            arguments: serde_json::json!({"command": "ls -la && rm 'my file'"}),
        };
        let shown = text(&describe(&call, Path::new("/")));
        assert!(shown.contains("runs: ls -la") && shown.contains("runs: rm 'my file'"), "{shown}");
    }
}
