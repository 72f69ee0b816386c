//! The output schema: the JSON Schema a `submit`ted (or extracted) result must match, with the
//! lenient forms accepted before validation.

use serde_json::{Value, json};

use crate::error::RlmError;
use crate::prompt::truncate_middle;

/// Characters of one violation message kept (the validator quotes the offending value, which
/// may be huge or deeply nested; the middle is cut).
const MAX_VIOLATION_CHARS: usize = 300;

/// The default output schema: an object with a required string property `answer`.
pub fn default_output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"answer": {"type": "string", "description": "The answer to the question."}},
        "required": ["answer"]
    })
}

/// The default schema's validator, compiled once per process, when first needed.
static DEFAULT_VALIDATOR: std::sync::OnceLock<Result<jsonschema::Validator, String>> = std::sync::OnceLock::new();

/// The default schema's validator (compiled on first use; a caller meanwhile waits for it). It is
/// compiled as draft 7, which means the same for this schema as 2020-12 (the draft of a schema
/// without `$schema`) and compiles in about a fifth of the time: its meta-schema has no dynamic
/// references.
fn default_validator() -> Result<&'static jsonschema::Validator, RlmError> {
    DEFAULT_VALIDATOR
        .get_or_init(|| jsonschema::draft7::new(&default_output_schema()).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| RlmError::InvalidSchema(e.clone()))
}

/// Compiling a schema the first time in a process also compiles the JSON Schema meta-schema
/// it is checked against (many regular expressions): about 15 ms of one core for draft 2020-12,
/// 3 ms for the default schema's draft 7. A run with the
/// default schema needs its validator only when a result is submitted, so this compiles it on
/// a thread of its own while the run starts and goes on.
pub fn warm_up() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        std::thread::spawn(|| {
            let _ = default_validator();
        });
    });
}

/// How values are checked: a schema's own compiled validator, or the default schema's shared one.
enum Check {
    Own(jsonschema::Validator),
    Default,
}

/// A compiled output schema.
pub struct OutputSchema {
    schema: Value,
    check: Check,
    wrap_key: Option<String>,
}

impl std::fmt::Debug for OutputSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputSchema").field("schema", &self.schema).finish()
    }
}

impl OutputSchema {
    /// Compiles a schema (an invalid one is an error here, before any run). The default schema
    /// is known valid: its validator is shared and compiled when first needed.
    pub fn new(schema: Value) -> Result<Self, RlmError> {
        let check = match schema == default_output_schema() {
            true => {
                warm_up();
                Check::Default
            }
            false => {
                Check::Own(jsonschema::validator_for(&schema).map_err(|e| RlmError::InvalidSchema(e.to_string()))?)
            }
        };
        let wants_object = schema.get("type").and_then(Value::as_str) == Some("object");
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let wrap_key = (wants_object && required.len() == 1).then(|| required[0].to_string());
        Ok(Self { schema, check, wrap_key })
    }

    /// The schema as JSON.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// The property a bare (non-object) value is wrapped as, if any (see [`Self::normalize`]).
    pub fn wrap_key(&self) -> Option<&str> {
        self.wrap_key.as_deref()
    }

    /// Applies the lenient form: when the schema is an object with exactly one required
    /// property and the value is not an object, the value is wrapped as that property
    /// (so with the default schema `submit("text")` means `submit({"answer": "text"})`).
    pub fn normalize(&self, value: Value) -> Value {
        match (&self.wrap_key, value) {
            (Some(key), v) if !v.is_object() => json!({ key.as_str(): v }),
            (_, v) => v,
        }
    }

    /// Checks a value; on failure, one line per violation (`at /path: message`, each at most a
    /// few hundred characters).
    pub fn validate(&self, value: &Value) -> Result<(), Vec<String>> {
        let validator = match &self.check {
            Check::Own(v) => v,
            Check::Default => default_validator().map_err(|e| vec![e.to_string()])?,
        };
        let errors: Vec<String> = validator
            .iter_errors(value)
            .map(|e| {
                let path = e.instance_path.to_string();
                let at = if path.is_empty() { "at the top level".to_string() } else { format!("at {path}") };
                format!("{at}: {}", truncate_middle(&e.to_string(), MAX_VIOLATION_CHARS))
            })
            .collect();
        if errors.is_empty() { Ok(()) } else { Err(errors) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_schema_requires_a_string_answer() {
        let s = OutputSchema::new(default_output_schema()).unwrap();
        assert!(s.validate(&json!({"answer": "x"})).is_ok());
        let errs = s.validate(&json!({"answer": 5})).unwrap_err();
        assert!(errs[0].contains("/answer"), "{errs:?}");
        assert!(s.validate(&json!({})).is_err());
    }

    #[test]
    fn bare_value_is_wrapped_for_single_required_property() {
        let s = OutputSchema::new(default_output_schema()).unwrap();
        assert_eq!(s.normalize(json!("text")), json!({"answer": "text"}));
        assert_eq!(s.normalize(json!({"answer": "a"})), json!({"answer": "a"}));
        let multi = OutputSchema::new(json!({"type": "object", "required": ["a", "b"]})).unwrap();
        assert_eq!(multi.normalize(json!("t")), json!("t"));
    }

    #[test]
    fn violations_of_huge_values_stay_short() {
        let s = OutputSchema::new(default_output_schema()).unwrap();
        let huge = json!({"answer": vec!["x".repeat(100); 1000]});
        let errs = s.validate(&huge).unwrap_err();
        assert_eq!(errs.len(), 1);
        assert!(errs[0].starts_with("at /answer: "), "{}", errs[0]);
        assert!(errs[0].ends_with("is not of type \"string\""), "{}", errs[0]);
        assert!(errs[0].chars().count() < 400, "{} chars", errs[0].chars().count());
    }

    #[test]
    fn invalid_schema_is_an_error() {
        assert!(matches!(OutputSchema::new(json!({"type": 12})), Err(RlmError::InvalidSchema(_))));
    }
}
