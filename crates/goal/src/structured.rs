//! Structured model outputs: the JSON each phase asks for (assessment, decomposition,
//! achievement check, synthesis), their schemas, and a lenient parser that repairs the
//! common, safe-to-fix defects (code fences, prose around the object, trailing commas).

use recursive_core::reply::json_in_reply;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// The assess phase: is the goal directly executable, and with which action? If not, why it
/// must be decomposed (the decomposition hears it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Assessment {
    /// Why — first, so a model writes its reasoning before its decision.
    #[serde(default)]
    pub reasoning: String,
    /// True when one action can accomplish the goal directly.
    pub executable: bool,
    /// The action, when executable; null otherwise.
    #[serde(default)]
    pub action: Option<ActionPlan>,
    /// When not executable: what makes decomposition necessary (empty when executable).
    #[serde(default, deserialize_with = "text_or_json")]
    pub why_decompose: String,
}

/// One action chosen for an executable goal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ActionPlan {
    /// Action type, e.g. `tool`, `analyze`, `synthesize`, `delegate`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The tool or delegate to use; empty when the action type needs none.
    #[serde(default)]
    pub target: String,
    /// For `tool`: the arguments as a JSON object (text). Otherwise: instructions or the task.
    #[serde(default, deserialize_with = "text_or_json")]
    pub input: String,
}

/// The decompose phase: sub-goals of a goal that is not directly executable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Decomposition {
    /// How the goal was split.
    #[serde(default)]
    pub reasoning: String,
    /// The sub-goals, most important first (dependencies aside, they run in this order).
    pub sub_goals: Vec<SubGoalPlan>,
    /// How the sub-goals together cover the goal, and what they leave out.
    #[serde(default, deserialize_with = "text_or_json")]
    pub coverage: String,
}

/// One planned sub-goal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SubGoalPlan {
    /// The sub-goal, stated so it can be pursued on its own.
    pub goal: String,
    /// Why it is needed.
    #[serde(default)]
    pub rationale: String,
    /// 0-based indices of the sibling sub-goals whose results it needs.
    #[serde(default)]
    pub depends_on: Vec<i64>,
    /// Estimated complexity.
    #[serde(default)]
    pub complexity: Complexity,
}

/// Estimated complexity of a sub-goal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Complexity {
    /// One indivisible step.
    Atomic,
    /// A single simple step or two.
    Simple,
    /// A few steps.
    #[default]
    Moderate,
    /// Many steps or much uncertainty.
    Complex,
}

impl<'de> Deserialize<'de> for Complexity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Models write "Simple", "HIGH", 2 or 7 as often as "simple"; all are unambiguous.
        let v = Value::deserialize(d)?;
        let parsed = match &v {
            Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
                "atomic" | "trivial" => Some(Complexity::Atomic),
                "simple" | "low" | "easy" => Some(Complexity::Simple),
                "moderate" | "medium" => Some(Complexity::Moderate),
                "complex" | "high" | "hard" => Some(Complexity::Complex),
                _ => None,
            },
            Value::Number(n) => n.as_f64().map(|x| match x {
                x if x <= 1.0 => Complexity::Atomic,
                x if x <= 3.0 => Complexity::Simple,
                x if x <= 6.0 => Complexity::Moderate,
                _ => Complexity::Complex,
            }),
            Value::Null => Some(Complexity::Moderate),
            _ => None,
        };
        parsed.ok_or_else(|| {
            serde::de::Error::custom(format!("complexity must be atomic, simple, moderate or complex, got {v}"))
        })
    }
}

/// The achieved check: is the goal accomplished by the sub-goal results so far?
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AchievedCheck {
    /// Why — first, so a model writes its reasoning before its verdict.
    #[serde(default)]
    pub reasoning: String,
    /// True when the goal is achieved with the results so far.
    pub achieved: bool,
    /// Confidence in that judgement, 0 to 1.
    #[serde(default, deserialize_with = "confidence")]
    pub confidence: f64,
    /// What is still missing (empty when achieved).
    #[serde(default, alias = "gaps")]
    pub remaining_gaps: Vec<String>,
}

/// The synthesize phase: the sub-results merged into the parent's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SynthesisOutput {
    /// The answer to the goal.
    pub summary: String,
    /// The key findings.
    #[serde(default)]
    pub key_findings: Vec<String>,
    /// Confidence in the result, 0 to 1.
    #[serde(default, deserialize_with = "confidence")]
    pub confidence: f64,
    /// What the result does not cover or may get wrong.
    #[serde(default)]
    pub limitations: Vec<String>,
    /// Where sub-results disagree, and how the summary resolved it.
    #[serde(default)]
    pub contradictions: Vec<String>,
}

fn text_or_json<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => s,
        Value::Null => String::new(),
        other => other.to_string(),
    })
}

fn confidence<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = Value::deserialize(d)?;
    let x = match &v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().trim_end_matches('%').trim().parse::<f64>().ok(),
        Value::Null => Some(0.0),
        _ => None,
    }
    .ok_or_else(|| serde::de::Error::custom(format!("confidence must be a number from 0 to 1, got {v}")))?;
    // A percentage (e.g. 85) is read as 0.85.
    let x = if x > 1.0 && x <= 100.0 { x / 100.0 } else { x };
    Ok(x.clamp(0.0, 1.0))
}

/// A reply that could not be turned into the expected structure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ParseError {
    /// What was wrong, worded for the model that has to fix it.
    pub message: String,
}

/// Parses a model reply into `T`, repairing what is safe to repair: code fences, prose around
/// the JSON object, and trailing commas ([`recursive_core::reply::json_in_reply`]). Nothing is
/// guessed: a reply with other defects, or with valid JSON of the wrong shape, is an error
/// naming the problem.
pub fn parse_lenient<T: DeserializeOwned>(raw: &str) -> Result<T, ParseError> {
    if let Ok(v) = serde_json::from_str::<T>(raw.trim()) {
        return Ok(v);
    }
    let value = json_in_reply(raw).map_err(|message| ParseError { message })?;
    serde_json::from_value::<T>(value)
        .map_err(|e| ParseError { message: format!("JSON does not match the schema: {e}") })
}

/// The JSON Schema of `T` shaped for providers' strict structured-output modes: every object
/// lists all its properties as required and allows no others; a choice of string constants
/// becomes an `enum` written in place; keywords those modes reject (`format`, `default`,
/// `$schema`, `title`) are removed. Parsing stays lenient either way.
pub fn output_schema<T: JsonSchema>() -> Value {
    let mut v = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_else(|_| serde_json::json!({}));
    strictify(&mut v);
    if let Some(o) = v.as_object_mut() {
        o.remove("$schema");
        o.remove("title");
    }
    inline_enums(&mut v);
    v
}

/// Replaces each `$ref` to a string enum with the enum itself (keeping the referring
/// schema's description) and drops such definitions: strict modes accept `$ref` only alone.
fn inline_enums(root: &mut Value) {
    let Some(defs) = root.get("$defs").and_then(Value::as_object).cloned() else { return };
    let enums: serde_json::Map<String, Value> =
        defs.into_iter().filter(|(_, d)| d.get("enum").is_some() && d.get("properties").is_none()).collect();
    if enums.is_empty() {
        return;
    }
    replace_refs(root, &enums);
    if let Some(Value::Object(defs)) = root.get_mut("$defs") {
        defs.retain(|name, _| !enums.contains_key(name));
    }
}

fn replace_refs(v: &mut Value, enums: &serde_json::Map<String, Value>) {
    match v {
        Value::Object(o) => {
            let target = o.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix("#/$defs/"));
            if let Some(def) = target.and_then(|name| enums.get(name)) {
                let description = o.get("description").cloned();
                *o = def.as_object().cloned().unwrap_or_default();
                if let Some(d) = description {
                    o.insert("description".into(), d);
                }
                return;
            }
            o.values_mut().for_each(|c| replace_refs(c, enums));
        }
        Value::Array(a) => a.iter_mut().for_each(|c| replace_refs(c, enums)),
        _ => {}
    }
}

/// `oneOf` of string constants (how a documented enum comes out) as one `enum`, with each
/// constant's description kept in the schema's description.
fn constants_as_enum(o: &mut serde_json::Map<String, Value>) {
    let Some(Value::Array(options)) = o.get("oneOf") else { return };
    let constants: Option<Vec<(Value, Option<String>)>> = options
        .iter()
        .map(|opt| {
            opt.get("const").cloned().map(|c| (c, opt.get("description").and_then(Value::as_str).map(str::to_string)))
        })
        .collect();
    let Some(constants) = constants else { return };
    let notes: Vec<String> = constants
        .iter()
        .filter_map(|(c, d)| d.as_ref().map(|d| format!("{}: {d}", c.as_str().unwrap_or_default())))
        .collect();
    o.remove("oneOf");
    o.insert("type".into(), Value::String("string".into()));
    o.insert("enum".into(), Value::Array(constants.into_iter().map(|(c, _)| c).collect()));
    if !notes.is_empty() {
        let lead = o.get("description").and_then(Value::as_str).unwrap_or_default().to_string();
        o.insert("description".into(), Value::String(format!("{lead} ({})", notes.join("; ")).trim().to_string()));
    }
}

fn strictify(v: &mut Value) {
    match v {
        Value::Object(o) => {
            o.remove("format");
            o.remove("default");
            constants_as_enum(o);
            if let Some(Value::Object(props)) = o.get("properties") {
                let names: Vec<Value> = props.keys().cloned().map(Value::String).collect();
                o.insert("required".into(), Value::Array(names));
                o.insert("additionalProperties".into(), Value::Bool(false));
            }
            for (key, child) in o.iter_mut() {
                // Property maps hold names, not keywords: recurse into their values only.
                if key == "properties" || key == "$defs" {
                    if let Value::Object(m) = child {
                        m.values_mut().for_each(strictify);
                    }
                } else {
                    strictify(child);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(strictify),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repairs_code_fence_prose_and_trailing_commas() {
        let raw = "Here is the plan:\n```json\n{\"reasoning\": \"r\", \"sub_goals\": [\n  {\"goal\": \"a\", \
                   \"depends_on\": [],},\n  {\"goal\": \"b, c\", \"depends_on\": [0,]},\n],}\n```\nHope it helps.";
        let d: Decomposition = parse_lenient(raw).unwrap();
        assert_eq!(d.sub_goals.len(), 2);
        assert_eq!(d.sub_goals[1].goal, "b, c");
        assert_eq!(d.sub_goals[1].depends_on, vec![0]);
    }

    #[test]
    fn keeps_commas_and_brackets_inside_strings() {
        let raw = r#"{"summary": "a,} b,]", "key_findings": ["x, }"]}"#;
        let s: SynthesisOutput = parse_lenient(raw).unwrap();
        assert_eq!(s.summary, "a,} b,]");
        assert_eq!(s.key_findings, vec!["x, }"]);
    }

    #[test]
    fn wrong_shape_is_reported_not_guessed() {
        let err = parse_lenient::<Decomposition>(r#"{"steps": ["a"]}"#).unwrap_err();
        assert!(err.message.contains("sub_goals"), "{err}");
        let err = parse_lenient::<Decomposition>("I cannot do that.").unwrap_err();
        assert!(err.message.contains("no JSON object"), "{err}");
        let err = parse_lenient::<Decomposition>(r#"{"sub_goals": [{"goal": 'a'}]}"#).unwrap_err();
        assert!(err.message.starts_with("invalid JSON"), "{err}");
    }

    #[test]
    fn lenient_fields_accept_common_model_spellings() {
        let a: AchievedCheck = parse_lenient(r#"{"achieved": true, "confidence": 85}"#).unwrap();
        assert!((a.confidence - 0.85).abs() < 1e-9);
        let p: SubGoalPlan = parse_lenient(r#"{"goal": "g", "complexity": "HIGH"}"#).unwrap();
        assert_eq!(p.complexity, Complexity::Complex);
        let a: AchievedCheck = parse_lenient(r#"{"achieved": false, "gaps": ["x"]}"#).unwrap();
        assert_eq!(a.remaining_gaps, vec!["x"], "`gaps` is read as `remaining_gaps`");
        let a: Assessment = parse_lenient(
            r#"{"executable": true, "action": {"type": "tool", "target": "read", "input": {"path": "a"}}}"#,
        )
        .unwrap();
        assert_eq!(a.action.unwrap().input, r#"{"path":"a"}"#);
    }

    #[test]
    fn output_schema_requires_every_property_and_forbids_others() {
        let s = output_schema::<Decomposition>();
        assert_eq!(s["additionalProperties"], false);
        let mut required: Vec<&str> = s["required"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        required.sort_unstable();
        assert_eq!(required, vec!["coverage", "reasoning", "sub_goals"]);
        let item = &s["$defs"]["SubGoalPlan"];
        assert_eq!(item["required"].as_array().unwrap().len(), 4);
        assert!(!s.to_string().contains("\"format\""));
        // Strict modes take `enum`, not `oneOf` of constants, and `$ref` only alone.
        let text = s.to_string();
        assert!(!text.contains("oneOf") && !text.contains("const"), "{text}");
        assert_eq!(
            item["properties"]["complexity"]["enum"],
            serde_json::json!(["atomic", "simple", "moderate", "complex"])
        );
        assert!(s["$defs"].get("Complexity").is_none());
    }

    #[test]
    fn reasoning_comes_before_the_decision_in_the_schemas() {
        for schema in [output_schema::<Assessment>(), output_schema::<AchievedCheck>()] {
            let first = schema["properties"].as_object().unwrap().keys().next().unwrap().clone();
            assert_eq!(first, "reasoning", "{schema}");
        }
        let p: SubGoalPlan = parse_lenient(r#"{"goal": "g", "complexity": "atomic"}"#).unwrap();
        assert_eq!(p.complexity, Complexity::Atomic, "the seed's own word for a one-step goal");
        let keys = |s: Value| s["properties"].as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(output_schema::<Assessment>()), ["reasoning", "executable", "action", "why_decompose"]);
        assert_eq!(
            keys(output_schema::<SynthesisOutput>()),
            ["summary", "key_findings", "confidence", "limitations", "contradictions"]
        );
        assert_eq!(
            keys(output_schema::<Decomposition>()["$defs"]["SubGoalPlan"].clone()),
            ["goal", "rationale", "depends_on", "complexity"]
        );
    }
}
