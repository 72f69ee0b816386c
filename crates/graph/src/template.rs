//! Text templates of node inputs: `{channel}` is replaced by the channel's value (text as is,
//! anything else as compact JSON); `{{` and `}}` stand for literal braces. A template is
//! parsed once, so a blueprint names every channel it reads before anything runs.

use serde_json::Value;

use crate::state::State;

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Channel { name: String, offset: usize },
}

/// A template that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (at character {offset} of the template)")]
pub struct TemplateError {
    /// What is wrong.
    pub message: String,
    /// Byte offset in the template text.
    pub offset: usize,
}

impl Template {
    /// Parses `text`.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut chars = text.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            match c {
                '{' if chars.peek().is_some_and(|&(_, n)| n == '{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek().is_some_and(|&(_, n)| n == '}') => {
                    chars.next();
                    literal.push('}');
                }
                '{' => {
                    let end = text[i + 1..].find('}').ok_or_else(|| TemplateError {
                        message: "`{` is never closed (write `{{` for a brace)".into(),
                        offset: i,
                    })?;
                    let name = text[i + 1..i + 1 + end].trim();
                    if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                        return Err(TemplateError {
                            message: format!("`{{{name}}}` is not a channel name (write `{{{{` for a brace)"),
                            offset: i,
                        });
                    }
                    if !literal.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut literal)));
                    }
                    parts.push(Part::Channel { name: name.to_string(), offset: i });
                    while chars.peek().is_some_and(|&(j, _)| j <= i + 1 + end) {
                        chars.next();
                    }
                }
                '}' => {
                    return Err(TemplateError { message: "a lone `}` (write `}}` for a brace)".into(), offset: i });
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Ok(Self { parts })
    }

    /// A template of plain text.
    pub fn literal(text: &str) -> Self {
        Self { parts: vec![Part::Text(text.to_string())] }
    }

    /// The channels it reads, with their byte offsets, in order.
    pub fn channels(&self) -> impl Iterator<Item = (&str, usize)> {
        self.parts.iter().filter_map(|p| match p {
            Part::Channel { name, offset } => Some((name.as_str(), *offset)),
            Part::Text(_) => None,
        })
    }

    /// The text with each channel's value in place.
    pub fn render(&self, state: &State) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Channel { name, .. } => match state.get(name) {
                    Some(Value::String(s)) => out.push_str(s),
                    Some(Value::Null) | None => {}
                    Some(other) => out.push_str(&other.to_string()),
                },
            }
        }
        out
    }
}

/// Renders every string inside `value` as a template (for tool arguments).
pub fn render_json(value: &Value, state: &State) -> Result<Value, TemplateError> {
    Ok(match value {
        Value::String(s) => {
            let t = Template::parse(s)?;
            // A string that is exactly one placeholder keeps the channel's JSON type.
            match t.parts.as_slice() {
                [Part::Channel { name, .. }] => state.get(name).cloned().unwrap_or(Value::Null),
                _ => Value::String(t.render(state)),
            }
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| render_json(v, state)).collect::<Result<_, _>>()?),
        Value::Object(map) => Value::Object(
            map.iter().map(|(k, v)| Ok((k.clone(), render_json(v, state)?))).collect::<Result<_, TemplateError>>()?,
        ),
        other => other.clone(),
    })
}

/// The channels read by every string inside `value`, with their offsets within that string.
pub fn json_channels(value: &Value) -> Result<Vec<String>, TemplateError> {
    let mut out = Vec::new();
    match value {
        Value::String(s) => out.extend(Template::parse(s)?.channels().map(|(n, _)| n.to_string())),
        Value::Array(items) => {
            for v in items {
                out.extend(json_channels(v)?);
            }
        }
        Value::Object(map) => {
            for v in map.values() {
                out.extend(json_channels(v)?);
            }
        }
        _ => {}
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn state() -> State {
        json!({"topic": "tides", "notes": ["a", "b"], "n": 3}).as_object().cloned().unwrap()
    }

    #[test]
    fn renders_text_and_json_values_and_escaped_braces() {
        let t = Template::parse("About {topic}; notes {notes}, n={ n } {{literal}}").unwrap();
        assert_eq!(t.render(&state()), r#"About tides; notes ["a","b"], n=3 {literal}"#);
        assert_eq!(t.channels().map(|(n, _)| n).collect::<Vec<_>>(), ["topic", "notes", "n"]);
    }

    #[test]
    fn an_unclosed_or_odd_brace_is_an_error_with_its_offset() {
        assert_eq!(Template::parse("ab {topic").unwrap_err().offset, 3);
        assert_eq!(Template::parse("x } y").unwrap_err().offset, 2);
        assert!(Template::parse("{a b}").is_err());
    }

    #[test]
    fn a_json_string_that_is_one_placeholder_keeps_the_type() {
        let v = render_json(&json!({"count": "{n}", "label": "n is {n}", "all": ["{notes}"]}), &state()).unwrap();
        assert_eq!(v, json!({"count": 3, "label": "n is 3", "all": [["a", "b"]]}));
    }
}
