//! The inputs of an RLM run (named text or JSON values, bound as `inputs` in the sandbox) and
//! the [`InputsSummary`] the primary model sees in their place: type, size and a short
//! head-and-tail preview of each.

pub(crate) use recursive_core::text::group_thousands as group;
use std::borrow::Cow;
use std::path::Path;

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::convert::{json_to_monty, python_type_name};
use crate::error::RlmError;
use crate::sandbox::Global;

/// One input value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
#[non_exhaustive]
pub enum InputValue {
    /// Text, bound as a Python `str`.
    Text(String),
    /// JSON, bound as Python dicts/lists/scalars.
    Json(Value),
}

impl InputValue {
    /// The value as JSON (a text is a string).
    pub fn to_json(&self) -> Value {
        match self {
            InputValue::Text(t) => Value::String(t.clone()),
            InputValue::Json(v) => v.clone(),
        }
    }

    /// Loads a file: `.json` files are parsed as JSON, anything else is read as text. Bytes
    /// that are not UTF-8 in a text file become U+FFFD (so a log with a stray Latin-1 byte
    /// still loads); a `.json` file must be valid UTF-8 JSON. Only regular files are read: a
    /// FIFO would block until a writer comes, a device might never end.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, RlmError> {
        let path = path.as_ref();
        let meta =
            std::fs::metadata(path).map_err(|e| RlmError::Input(format!("cannot read {}: {e}", path.display())))?;
        if !meta.is_file() {
            return Err(RlmError::Input(format!(
                "{} is not a regular file (a directory, FIFO, socket or device); pipe its contents to stdin and \
                 pass `-` instead",
                path.display()
            )));
        }
        let bytes = std::fs::read(path).map_err(|e| RlmError::Input(format!("cannot read {}: {e}", path.display())))?;
        let is_json = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json"));
        if is_json {
            let v = serde_json::from_slice(&bytes)
                .map_err(|e| RlmError::Input(format!("{} is not valid JSON: {e}", path.display())))?;
            Ok(InputValue::Json(v))
        } else {
            let text = match String::from_utf8(bytes) {
                Ok(text) => text,
                Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
            };
            Ok(InputValue::Text(text))
        }
    }
}

impl From<String> for InputValue {
    fn from(s: String) -> Self {
        InputValue::Text(s)
    }
}

impl From<&str> for InputValue {
    fn from(s: &str) -> Self {
        InputValue::Text(s.to_string())
    }
}

impl From<Value> for InputValue {
    fn from(v: Value) -> Self {
        InputValue::Json(v)
    }
}

/// The inputs of a run, in order: name → value.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Inputs {
    fields: Vec<(String, InputValue)>,
}

impl Inputs {
    /// No inputs.
    pub fn new() -> Self {
        Self::default()
    }

    /// One input.
    pub fn single(name: impl Into<String>, value: impl Into<InputValue>) -> Self {
        Self::new().with(name, value)
    }

    /// Adds (or replaces) an input, builder style.
    pub fn with(mut self, name: impl Into<String>, value: impl Into<InputValue>) -> Self {
        self.insert(name, value);
        self
    }

    /// Adds (or replaces, keeping its position) an input.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<InputValue>) {
        let name = name.into();
        let value = value.into();
        match self.fields.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.fields.push((name, value)),
        }
    }

    /// One input loaded from a file (see [`InputValue::from_file`]).
    pub fn from_file(name: impl Into<String>, path: impl AsRef<Path>) -> Result<Self, RlmError> {
        Ok(Self::single(name, InputValue::from_file(path)?))
    }

    /// Adds an input loaded from a file.
    pub fn add_file(&mut self, name: impl Into<String>, path: impl AsRef<Path>) -> Result<(), RlmError> {
        self.insert(name, InputValue::from_file(path)?);
        Ok(())
    }

    /// The value of an input.
    pub fn get(&self, name: &str) -> Option<&InputValue> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Names and values, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &InputValue)> {
        self.fields.iter().map(|(n, v)| (n.as_str(), v))
    }

    /// Number of inputs.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Whether there are no inputs.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// How the inputs enter a sandbox: one global per input (texts as raw text, JSON as Python
    /// values), and the setup code that gathers them into the `inputs` dict and unbinds them.
    /// Texts move into the bindings without a copy.
    pub(crate) fn into_bindings(self) -> (Vec<(String, Global)>, String) {
        let mut globals = Vec::with_capacity(self.fields.len());
        let mut entries = Vec::with_capacity(self.fields.len());
        let mut unbind = String::new();
        for (i, (name, value)) in self.fields.into_iter().enumerate() {
            let var = format!("__rlm_input_{i}");
            let global = match value {
                InputValue::Text(s) => Global::Text(Arc::new(s)),
                InputValue::Json(v) => Global::Value(json_to_monty(&v)),
            };
            entries.push(format!("{}: {var}", Value::String(name)));
            unbind.push_str(&format!("{var} = None\n"));
            globals.push((var, global));
        }
        (globals, format!("inputs = {{{}}}\n{unbind}", entries.join(", ")))
    }

    /// What the primary model is told about the inputs.
    pub fn summary(&self, preview_chars: usize) -> InputsSummary {
        InputsSummary {
            fields: self.fields.iter().map(|(n, v)| InputSummary::of(n, v, preview_chars)).collect(),
            context_alias: (self.fields.len() == 1).then(|| self.fields[0].0.clone()),
        }
    }
}

/// What the model sees of one input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputSummary {
    /// The input's name (its key in `inputs`).
    pub name: String,
    /// Its Python type (`str`, `dict`, `list`...).
    pub python_type: String,
    /// Characters of text (for a `str`), or of its JSON form.
    pub chars: usize,
    /// Lines of text (for a `str`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<usize>,
    /// Items (for a `list` or `dict`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<usize>,
    /// The beginning of the value.
    pub head: String,
    /// The end of the value (empty when the head shows all of it).
    pub tail: String,
    /// Whether the preview leaves part of the value out.
    pub truncated: bool,
}

impl InputSummary {
    fn of(name: &str, value: &InputValue, preview_chars: usize) -> Self {
        // Text is previewed in place: a huge input is not copied to build its summary.
        let (python_type, text, lines, items): (_, Cow<'_, str>, _, _) = match value {
            InputValue::Text(s) => ("str", Cow::Borrowed(s.as_str()), Some(s.lines().count()), None),
            InputValue::Json(v) => {
                let items = match v {
                    Value::Array(a) => Some(a.len()),
                    Value::Object(o) => Some(o.len()),
                    _ => None,
                };
                (python_type_name(v), Cow::Owned(v.to_string()), None, items)
            }
        };
        let chars = text.chars().count();
        let half = (preview_chars / 2).max(1);
        let truncated = chars > preview_chars;
        let (head, tail) = if truncated {
            let head: String = text.chars().take(half).collect();
            let tail: String = text.chars().skip(chars - half).collect();
            (head, tail)
        } else {
            (text.into_owned(), String::new())
        };
        Self {
            name: name.to_string(),
            python_type: python_type.to_string(),
            chars,
            lines,
            items,
            head,
            tail,
            truncated,
        }
    }
}

/// What the primary model is told about all inputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputsSummary {
    /// One entry per input, in order.
    pub fields: Vec<InputSummary>,
    /// The input also bound as `context` (when there is exactly one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_alias: Option<String>,
}

impl InputsSummary {
    /// The summary as prompt text.
    pub fn render(&self) -> String {
        if self.fields.is_empty() {
            return "There are no inputs: `inputs` is an empty dict.".to_string();
        }
        let mut out = String::new();
        for f in &self.fields {
            let mut size = format!("{} chars", group(f.chars));
            if let Some(l) = f.lines {
                size.push_str(&format!(", {} lines", group(l)));
            }
            if let Some(i) = f.items {
                size = format!("{} items, {size} as JSON", group(i));
            }
            let alias =
                if self.context_alias.as_deref() == Some(f.name.as_str()) { " (also bound as `context`)" } else { "" };
            out.push_str(&format!("- inputs[{:?}]{alias}: {}, {size}\n", f.name, f.python_type));
            if f.truncated {
                let omitted = f.chars.saturating_sub(f.head.chars().count() + f.tail.chars().count());
                out.push_str(&format!(
                    "  preview (truncated; {} chars omitted between head and tail):\n  <head>{}</head>\n  <tail>{}</tail>\n",
                    group(omitted),
                    f.head,
                    f.tail
                ));
            } else {
                out.push_str(&format!("  full value: <value>{}</value>\n", f.head));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn summary_previews_head_and_tail_of_long_text() {
        let text = format!("{}{}{}", "a".repeat(100), "b".repeat(1000), "c".repeat(100));
        let s = Inputs::single("doc", text).summary(200);
        let f = &s.fields[0];
        assert_eq!(f.python_type, "str");
        assert_eq!(f.chars, 1200);
        assert!(f.truncated);
        assert_eq!(f.head, "a".repeat(100));
        assert_eq!(f.tail, "c".repeat(100));
        assert_eq!(s.context_alias.as_deref(), Some("doc"));
        assert!(s.render().contains("1,000 chars omitted"), "{}", s.render());
    }

    #[test]
    fn summary_counts_json_items() {
        let s = Inputs::new().with("rows", json!([1, 2, 3])).with("q", "short").summary(100);
        assert_eq!(s.fields[0].python_type, "list");
        assert_eq!(s.fields[0].items, Some(3));
        assert!(!s.fields[1].truncated);
        assert_eq!(s.context_alias, None);
    }

    #[test]
    fn json_files_are_parsed_and_others_read_as_text() {
        let dir = tempfile::tempdir().unwrap();
        let j = dir.path().join("d.json");
        std::fs::write(&j, r#"{"k": [1]}"#).unwrap();
        let t = dir.path().join("d.txt");
        std::fs::write(&t, "{not json").unwrap();
        assert_eq!(Inputs::from_file("d", &j).unwrap().get("d"), Some(&InputValue::Json(json!({"k": [1]}))));
        assert_eq!(Inputs::from_file("d", &t).unwrap().get("d"), Some(&InputValue::Text("{not json".into())));
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{oops").unwrap();
        assert!(matches!(Inputs::from_file("d", &bad), Err(RlmError::Input(_))));
    }

    #[test]
    fn non_utf8_text_file_is_read_lossily_and_non_utf8_json_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("latin1.log");
        std::fs::write(&t, b"caf\xe9 ok\n\xff\xfe end").unwrap();
        assert_eq!(
            Inputs::from_file("log", &t).unwrap().get("log"),
            Some(&InputValue::Text("caf\u{fffd} ok\n\u{fffd}\u{fffd} end".into()))
        );
        let j = dir.path().join("bad.json");
        std::fs::write(&j, b"{\"k\": \"\xe9\"}").unwrap();
        let err = Inputs::from_file("j", &j).unwrap_err().to_string();
        assert!(err.contains("is not valid JSON"), "{err}");
    }

    #[test]
    fn fifos_and_devices_are_refused_without_reading() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        for path in [fifo.as_path(), Path::new("/dev/zero"), dir.path()] {
            let e = InputValue::from_file(path).unwrap_err();
            assert!(e.to_string().contains("not a regular file"), "{e}");
        }
    }

    #[test]
    fn group_inserts_thousands_separators() {
        assert_eq!(group(0), "0");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(1234567), "1,234,567");
    }
}
