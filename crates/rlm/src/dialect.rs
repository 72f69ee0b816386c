//! The conventions of the RLM libraries models were trained or prompted on, and which one a run
//! presents. Every run understands all of them — `submit(...)`, `SUBMIT(...)`, `FINAL(...)`,
//! `FINAL_VAR(name)` (called in code or written on its own line of the reply), and an
//! `answer = {"content": ..., "ready": True}` dict — so a model that writes another library's
//! idiom still finishes. The dialect picks what the sandbox's functions return and what the
//! prompt teaches.

use serde::{Deserialize, Serialize};

/// The shape a run presents to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// This project's: sub-calls return `{"result": text}` or `{"error": message}`; the model
    /// finishes with `submit(result)`.
    #[default]
    Recursive,
    /// The RLM paper's and its reference library's: sub-calls return text (errors as
    /// `"[error] Type: message"`); the model finishes with `FINAL(answer)` or
    /// `FINAL_VAR(variable)`; the input is `context`.
    Rlm,
    /// DSPy's `RLM` module's: sub-calls return text; each input is a variable of its own name;
    /// the model finishes with `SUBMIT(field=value, ...)`.
    Dspy,
}

impl Dialect {
    /// Every dialect, for help texts.
    pub const ALL: [Dialect; 3] = [Dialect::Recursive, Dialect::Rlm, Dialect::Dspy];

    /// Parses a dialect's name.
    pub fn parse(name: &str) -> Result<Self, String> {
        Self::ALL.into_iter().find(|d| d.as_str() == name).ok_or_else(|| {
            format!("unknown dialect `{name}` (expected one of: {})", Self::ALL.map(|d| d.as_str()).join(", "))
        })
    }

    /// The dialect's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Recursive => "recursive",
            Dialect::Rlm => "rlm",
            Dialect::Dspy => "dspy",
        }
    }

    /// Whether sub-calls answer `{"result": ...}` / `{"error": ...}` dicts (else plain text).
    pub fn wraps_results(self) -> bool {
        self == Dialect::Recursive
    }

    /// Whether each input is also a variable of its own name.
    pub fn binds_inputs_by_name(self) -> bool {
        self == Dialect::Dspy
    }
}

/// The names that end a run with a result, in every dialect.
pub const FINISHERS: [&str; 4] = ["submit", "SUBMIT", "FINAL", "FINAL_VAR"];

/// A finishing line written in a reply outside its code: `FINAL(text)` or `FINAL_VAR(name)` on
/// a line of its own. Returns the Python code that finishes with it (through the sandbox, so
/// the result is validated like a `submit`).
pub fn final_in_text(prose: &str) -> Option<String> {
    prose.lines().rev().find_map(|line| {
        let t = line.trim().trim_matches('*').trim_matches('`').trim();
        if let Some(inner) = t.strip_prefix("FINAL_VAR(").and_then(|r| r.strip_suffix(')')) {
            let name = inner.trim().trim_matches(|c| c == '"' || c == '\'');
            return is_identifier(name).then(|| format!("FINAL({name})"));
        }
        let inner = t.strip_prefix("FINAL(").and_then(|r| r.strip_suffix(')'))?;
        let text = inner.trim();
        let unquoted = strip_quotes(text).unwrap_or(text);
        Some(format!("FINAL({})", serde_json::Value::String(unquoted.to_string())))
    })
}

fn strip_quotes(s: &str) -> Option<&str> {
    ['"', '\''].into_iter().find_map(|q| s.strip_prefix(q).and_then(|r| r.strip_suffix(q)))
}

/// Whether `s` is a Python identifier (ASCII letters, digits and `_`, not starting with a digit).
pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The reply without its `<think>...</think>` blocks (an unclosed one runs to the end): code
/// a model drafts while thinking never runs.
pub fn strip_thinking(reply: &str) -> std::borrow::Cow<'_, str> {
    if !reply.contains("<think>") {
        return std::borrow::Cow::Borrowed(reply);
    }
    let mut out = String::with_capacity(reply.len());
    let mut rest = reply;
    while let Some(start) = rest.find("<think>") {
        out.push_str(&rest[..start]);
        match rest[start..].find("</think>") {
            Some(end) => rest = &rest[start + end + "</think>".len()..],
            None => rest = "",
        }
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}

/// The reply's text outside its fenced code blocks.
pub fn prose(reply: &str) -> String {
    let mut out = String::new();
    let mut in_fence = false;
    for line in reply.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if !in_fence {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_var_on_its_own_line_reads_the_variable() {
        assert_eq!(final_in_text("Done.\nFINAL_VAR(answer)\n").as_deref(), Some("FINAL(answer)"));
        assert_eq!(final_in_text("FINAL_VAR(\"result\")").as_deref(), Some("FINAL(result)"));
        assert_eq!(final_in_text("FINAL_VAR(not a name)"), None);
    }

    #[test]
    fn final_with_text_becomes_a_string_result() {
        assert_eq!(final_in_text("**FINAL(The code is 42)**").as_deref(), Some("FINAL(\"The code is 42\")"));
        assert_eq!(final_in_text("FINAL('quoted')").as_deref(), Some("FINAL(\"quoted\")"));
        assert_eq!(final_in_text("I will call FINAL(x) later, once I know."), None);
    }

    #[test]
    fn thinking_is_removed_closed_or_not() {
        assert_eq!(strip_thinking("a<think>```python\nx=1\n```</think>b"), "ab");
        assert_eq!(strip_thinking("a<think>never closed ```python\nx\n```"), "a");
        assert_eq!(strip_thinking("plain"), "plain");
    }

    #[test]
    fn prose_leaves_out_code() {
        assert_eq!(prose("say\n```python\nFINAL(x)\n```\nend"), "say\nend\n");
    }

    #[test]
    fn dialect_names_parse_and_unknown_ones_are_listed() {
        assert_eq!(Dialect::parse("dspy"), Ok(Dialect::Dspy));
        assert!(Dialect::parse("x").unwrap_err().contains("recursive, rlm, dspy"));
    }
}
