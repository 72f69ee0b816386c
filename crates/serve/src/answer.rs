//! The check a served run's final answer must pass when the client asked for structured
//! output (`response_format` / `text.format`): JSON, and for a schema, JSON valid against it.
//! The agent loop sends a failing answer back to the model to be redone; a schema that does not
//! compile is the client's error, found before any run.

use std::sync::Arc;

use recursive_core::{AnswerCheck, CheckAnswer, ResponseFormat};
use serde_json::Value;

/// The longest part of one violation shown to the model.
const MAX_VIOLATION_CHARS: usize = 300;

/// The check for a requested format (`None` for free text), or why the schema is unusable.
pub fn check_for(format: Option<&ResponseFormat>) -> Result<Option<AnswerCheck>, String> {
    let check: Arc<dyn CheckAnswer> = match format {
        None | Some(ResponseFormat::Text) => return Ok(None),
        Some(ResponseFormat::JsonObject) => Arc::new(JsonObject),
        Some(ResponseFormat::JsonSchema { schema, .. }) => Arc::new(Schema(
            jsonschema::validator_for(schema).map_err(|e| format!("the JSON schema does not compile: {e}"))?,
        )),
        Some(_) => return Ok(None),
    };
    Ok(Some(AnswerCheck(check)))
}

/// The answer as JSON, tolerating a Markdown code fence around it.
fn parse(text: &str) -> Result<Value, String> {
    let trimmed = text.trim();
    let inner = trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .and_then(|rest| rest.strip_suffix("```"))
        .unwrap_or(trimmed);
    serde_json::from_str(inner.trim()).map_err(|e| format!("the answer is not JSON ({e})"))
}

/// Any JSON object.
struct JsonObject;

impl CheckAnswer for JsonObject {
    fn check(&self, text: &str) -> Result<(), String> {
        match parse(text)? {
            Value::Object(_) => Ok(()),
            _ => Err("the answer must be a JSON object".into()),
        }
    }
}

/// JSON valid against a schema.
struct Schema(jsonschema::Validator);

impl CheckAnswer for Schema {
    fn check(&self, text: &str) -> Result<(), String> {
        let value = parse(text)?;
        let errors: Vec<String> = self
            .0
            .iter_errors(&value)
            .take(5)
            .map(|e| {
                let path = e.instance_path.to_string();
                let at = if path.is_empty() { "at the top level".to_string() } else { format!("at {path}") };
                let message: String = e.to_string().chars().take(MAX_VIOLATION_CHARS).collect();
                format!("{at}: {message}")
            })
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(format!("it does not match the JSON schema: {}", errors.join("; ")))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema_check() -> AnswerCheck {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
        check_for(Some(&ResponseFormat::JsonSchema { name: "n".into(), schema, strict: false })).unwrap().unwrap()
    }

    #[test]
    fn an_answer_is_checked_against_the_schema() {
        let check = schema_check();
        assert!(check.0.check(r#"{"n": 3}"#).is_ok());
        assert!(check.0.check("```json\n{\"n\": 3}\n```").is_ok());
        assert!(check.0.check(r#"{"n": "three"}"#).unwrap_err().contains("at /n"));
        assert!(check.0.check("three").unwrap_err().contains("not JSON"));
    }

    #[test]
    fn a_schema_that_does_not_compile_is_refused() {
        let bad = ResponseFormat::JsonSchema { name: "x".into(), schema: json!({"type": 12}), strict: false };
        assert!(check_for(Some(&bad)).unwrap_err().contains("does not compile"));
        assert!(check_for(Some(&ResponseFormat::Text)).unwrap().is_none());
    }
}
