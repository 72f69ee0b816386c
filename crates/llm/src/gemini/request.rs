//! The request transform of the Gemini API: a core [`ChatRequest`] becomes a
//! [`wire::GenerateContentRequest`] — leading system messages as `systemInstruction` (later
//! ones as user text), user turns as `user` contents, an assistant turn as a `model` content
//! whose parts come back as the model produced them (thought parts, text, function calls), each
//! with the thought signature it carried; tool results as `functionResponse` parts paired with
//! their call by name (and id when the call had one), the results of one turn's parallel calls
//! in one `user` content; tools as `functionDeclarations` in Gemini's schema subset
//! ([`gemini_schema`]), `toolConfig` for the tool choice, and `generationConfig` for caps,
//! sampling, stop sequences, structured output and thinking.

use std::collections::HashMap;

use recursive_core::{ChatRequest, Message, ProviderError, Reasoning, ResponseFormat, Role, ToolChoice, ToolSpec};
use serde_json::{Map, Value, json};

use super::{CALL_SIGNATURE_PREFIX, SYNTHETIC_CALL_PREFIX, TEXT_SIGNATURE_ID, THOUGHT_ID, wire};

/// Provider defaults applied to a request.
#[derive(Debug, Clone)]
pub struct Defaults<'a> {
    /// Provider name, for errors.
    pub name: &'a str,
    /// Model when the request names none.
    pub model: &'a str,
    /// Token cap when the request sets none.
    pub max_tokens: Option<u32>,
}

/// The model a request goes to (without a `models/` prefix) and its wire body.
pub fn request_body<'a>(
    defaults: &Defaults<'_>,
    request: &'a ChatRequest,
) -> Result<(String, wire::GenerateContentRequest<'a>), ProviderError> {
    let opts = &request.options;
    let model = if opts.model.is_empty() { defaults.model } else { opts.model.as_str() };
    let model = model.strip_prefix("models/").unwrap_or(model).to_string();
    if model.is_empty() {
        return Err(ProviderError::Invalid(format!("{}: no model given and no default model set", defaults.name)));
    }
    let (system, rest) = split_system(&request.messages);
    let has_tools = !request.tools.is_empty();
    let body = wire::GenerateContentRequest {
        contents: contents(rest, checks_signatures(&model)),
        system_instruction: system.map(|parts| wire::Content { role: None, parts }),
        tools: if has_tools {
            vec![wire::Tool { function_declarations: request.tools.iter().map(declaration).collect() }]
        } else {
            Vec::new()
        },
        tool_config: opts.tool_choice.as_ref().filter(|_| has_tools).map(tool_config),
        generation_config: generation_config(request, defaults.max_tokens),
        cached_content: None,
    };
    Ok((model, body))
}

/// The leading system messages as the parts of `systemInstruction`, and the rest.
fn split_system(messages: &[Message]) -> (Option<Vec<wire::Part<'_>>>, &[Message]) {
    let lead = messages.iter().take_while(|m| m.role == Role::System).count();
    let parts: Vec<wire::Part<'_>> =
        messages[..lead].iter().filter(|m| !m.content.trim().is_empty()).map(|m| text_part(&m.content)).collect();
    ((!parts.is_empty()).then_some(parts), &messages[lead..])
}

fn text_part(text: &str) -> wire::Part<'_> {
    wire::Part { text: Some(text), ..Default::default() }
}

/// A call as the model made it: its name, and its id when the API gave one.
struct CallRef<'a> {
    name: &'a str,
    id: Option<&'a str>,
}

/// Whether the model may refuse a function call sent back without its thought signature: all
/// but those known to be older than Gemini 3 (1.x and 2.x only warn) — an alias without a
/// version (`gemini-pro-latest`) may be a Gemini 3, and the skip value is harmless to the others.
fn checks_signatures(model: &str) -> bool {
    let id = model.rsplit('/').next().unwrap_or(model);
    let version = id.strip_prefix("gemini-").and_then(|v| v.split(['-', '.']).next());
    version.and_then(|v| v.parse::<u32>().ok()).is_none_or(|major| major >= 3)
}

/// What a function call carries back when its signature is not known (a call another model or
/// the client made, or one whose reasoning was compacted away): the value the API documents for
/// skipping the signature check, so a model that checks signatures takes the history.
const NO_SIGNATURE: &str = "skip_thought_signature_validator";

/// The conversation as contents. Consecutive tool results (the answers to one turn's parallel
/// calls) share one `user` content. With `signed`, a turn's first function call always carries
/// a signature ([`NO_SIGNATURE`] when it has none).
fn contents(messages: &[Message], signed: bool) -> Vec<wire::Content<'_>> {
    let mut calls: HashMap<&str, CallRef<'_>> = HashMap::new();
    let mut out: Vec<wire::Content<'_>> = Vec::with_capacity(messages.len());
    let mut in_results = false;
    for m in messages {
        let results_before = std::mem::replace(&mut in_results, m.role == Role::Tool);
        match m.role {
            // An empty text part is refused ("required oneof field 'data'"); an empty message
            // says nothing.
            Role::System | Role::User if m.content.is_empty() => {}
            Role::System | Role::User => {
                out.push(wire::Content { role: Some("user"), parts: vec![text_part(&m.content)] })
            }
            Role::Assistant => {
                for c in &m.tool_calls {
                    calls.insert(&c.id, CallRef { name: &c.name, id: api_call_id(&c.id) });
                }
                let mut parts = model_parts(m);
                if signed
                    && let Some(first_call) = parts.iter_mut().find(|p| p.function_call.is_some())
                    && first_call.thought_signature.is_none()
                {
                    first_call.thought_signature = Some(NO_SIGNATURE);
                }
                if !parts.is_empty() {
                    out.push(wire::Content { role: Some("model"), parts });
                }
            }
            Role::Tool => {
                let part = response_part(m, &calls);
                match out.last_mut() {
                    Some(last) if results_before => last.parts.push(part),
                    _ => out.push(wire::Content { role: Some("user"), parts: vec![part] }),
                }
            }
        }
    }
    out
}

/// The id to send back for a call: the API's own, never one the client made up.
fn api_call_id(id: &str) -> Option<&str> {
    (!id.is_empty() && !id.starts_with(SYNTHETIC_CALL_PREFIX)).then_some(id)
}

/// A tool result as a `functionResponse` part.
fn response_part<'a>(m: &'a Message, calls: &HashMap<&str, CallRef<'a>>) -> wire::Part<'a> {
    let call_id = m.tool_call_id.as_deref().unwrap_or_default();
    let (name, id) = match calls.get(call_id) {
        Some(call) => (call.name, call.id),
        None => (call_id, api_call_id(call_id)),
    };
    let response = if m.is_error { json!({ "error": m.content }) } else { json!({ "output": m.content }) };
    wire::Part { function_response: Some(wire::FunctionResponse { id, name, response }), ..Default::default() }
}

/// An assistant turn's parts: its thoughts, its text and its calls, each with its signature.
/// Reasoning of other providers (no `gemini:` id) is not sent.
fn model_parts(m: &Message) -> Vec<wire::Part<'_>> {
    let signature = |id: &str| -> Option<&str> {
        m.reasoning.iter().find(|r| r.id == id && !r.signature.is_empty()).map(|r| r.signature.as_str())
    };
    let mut parts: Vec<wire::Part<'_>> = m.reasoning.iter().filter(|r| r.id == THOUGHT_ID).map(thought_part).collect();
    let text_signature = signature(TEXT_SIGNATURE_ID);
    if !m.content.is_empty() || text_signature.is_some() {
        parts.push(wire::Part { text: Some(&m.content), thought_signature: text_signature, ..Default::default() });
    }
    for c in &m.tool_calls {
        let key = format!("{CALL_SIGNATURE_PREFIX}{}", c.id);
        parts.push(wire::Part {
            thought_signature: signature(&key),
            function_call: Some(wire::FunctionCall {
                id: api_call_id(&c.id),
                name: &c.name,
                args: call_args(&c.arguments),
            }),
            ..Default::default()
        });
    }
    parts
}

fn thought_part(r: &Reasoning) -> wire::Part<'_> {
    wire::Part {
        text: Some(&r.text),
        thought: true,
        thought_signature: (!r.signature.is_empty()).then_some(r.signature.as_str()),
        ..Default::default()
    }
}

/// Arguments as the object the API expects; arguments kept as text (they did not parse) are
/// parsed again or sent as an empty object.
fn call_args(arguments: &Value) -> Value {
    match arguments {
        Value::Object(_) => arguments.clone(),
        Value::String(raw) => {
            serde_json::from_str::<Value>(raw).ok().filter(Value::is_object).unwrap_or_else(|| json!({}))
        }
        _ => json!({}),
    }
}

fn declaration(spec: &ToolSpec) -> wire::FunctionDeclaration {
    let parameters = gemini_schema(&spec.parameters);
    let has_properties = parameters["properties"].as_object().is_some_and(|p| !p.is_empty());
    let (parameters, parameters_json_schema) = if says_all(&parameters, true) {
        // An object without properties is refused; a function without arguments sends none.
        let kept = (has_properties || parameters["type"] != "OBJECT").then_some(parameters).filter(|p| p != &json!({}));
        (kept, None)
    } else {
        (None, Some(plain_json_schema(&spec.parameters)))
    };
    wire::FunctionDeclaration {
        name: spec.name.clone(),
        description: spec.description.clone(),
        parameters,
        parameters_json_schema,
    }
}

/// Whether a converted schema is one the subset accepts: below the root, no object without
/// properties (a free-form object) and no array without `items` — both refused with a 400.
fn says_all(schema: &Value, root: bool) -> bool {
    let Some(map) = schema.as_object() else { return true };
    let empty = |key: &str| map.get(key).and_then(Value::as_object).is_none_or(|m| m.is_empty());
    match map.get("type").and_then(Value::as_str) {
        Some("OBJECT") if !root && empty("properties") => return false,
        Some("ARRAY") if empty("items") => return false,
        _ => {}
    }
    let children = map.get("properties").and_then(Value::as_object).into_iter().flat_map(|p| p.values());
    let options = map.get("anyOf").and_then(Value::as_array).into_iter().flatten();
    children.chain(options).chain(map.get("items")).all(|s| says_all(s, false))
}

/// A tool's JSON Schema as `parametersJsonSchema` takes it: without the keywords that name the
/// schema rather than describe the arguments (`$schema`, `$id`).
fn plain_json_schema(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Some(map) = schema.as_object_mut() {
        map.remove("$schema");
        map.remove("$id");
    }
    schema
}

fn tool_config(choice: &ToolChoice) -> wire::ToolConfig {
    let (mode, allowed) = match choice {
        ToolChoice::None => ("NONE", Vec::new()),
        ToolChoice::Required => ("ANY", Vec::new()),
        ToolChoice::Tool(name) => ("ANY", vec![name.clone()]),
        _ => ("AUTO", Vec::new()),
    };
    wire::ToolConfig { function_calling_config: wire::FunctionCallingConfig { mode, allowed_function_names: allowed } }
}

fn generation_config(request: &ChatRequest, default_max: Option<u32>) -> Option<wire::GenerationConfig> {
    let opts = &request.options;
    let (mime, schema) = match &opts.response_format {
        Some(ResponseFormat::JsonObject) => (Some("application/json"), None),
        Some(ResponseFormat::JsonSchema { schema, .. }) => (Some("application/json"), Some(gemini_schema(schema))),
        _ => (None, None),
    };
    let budget = opts.reasoning_effort.as_deref().and_then(crate::models::thinking_budget);
    let config = wire::GenerationConfig {
        stop_sequences: opts.stop.clone(),
        // As the API takes it (and the official SDK sends it): thinking tokens count against it.
        max_output_tokens: opts.max_tokens.or(default_max),
        temperature: opts.temperature,
        response_mime_type: mime,
        response_schema: schema,
        thinking_config: budget.map(|budget| wire::ThinkingConfig { thinking_budget: budget, include_thoughts: true }),
    };
    (config != wire::GenerationConfig::default()).then_some(config)
}

/// Keywords of Gemini's schema subset (an OpenAPI 3.0 schema object); everything else
/// (`additionalProperties`, `$schema`, `$id`, `examples`, `const`...) is converted or dropped.
const KEPT: &[&str] = &[
    "format",
    "title",
    "description",
    "nullable",
    "maxItems",
    "minItems",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "propertyOrdering",
    "default",
    "minimum",
    "maximum",
];

/// How deep `$ref`s are inlined before a (recursive) reference is cut to an empty schema.
const MAX_REF_DEPTH: usize = 8;

/// A JSON Schema in Gemini's schema subset: types in upper case (`["string", "null"]` becomes
/// `STRING` with `nullable`), `$ref`s to `$defs`/`definitions` inlined, `const` and `oneOf`
/// as `enum` and `anyOf`, non-string enums and unknown keywords dropped, `required` limited
/// to the properties declared.
pub fn gemini_schema(schema: &Value) -> Value {
    let defs = schema
        .get("$defs")
        .or_else(|| schema.get("definitions"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    convert(schema, &defs, 0)
}

fn convert(schema: &Value, defs: &Map<String, Value>, depth: usize) -> Value {
    let Some(map) = schema.as_object() else { return json!({}) };
    if let Some(target) = map.get("$ref").and_then(Value::as_str) {
        let name = target.rsplit('/').next().unwrap_or_default();
        return match defs.get(name) {
            Some(def) if depth < MAX_REF_DEPTH => convert(def, defs, depth + 1),
            _ => json!({}),
        };
    }
    let mut out = Map::new();
    convert_type(map, &mut out);
    for key in KEPT {
        if let Some(v) = map.get(*key) {
            out.insert((*key).to_string(), v.clone());
        }
    }
    if !out.get("format").is_some_and(|f| format_accepted(out.get("type"), f)) {
        out.remove("format");
    }
    if let Some(values) = map.get("enum").and_then(Value::as_array).filter(|v| v.iter().all(Value::is_string)) {
        out.insert("enum".into(), Value::Array(values.clone()));
    } else if let Some(value @ Value::String(_)) = map.get("const") {
        out.insert("enum".into(), json!([value]));
    }
    if let Some(props) = map.get("properties").and_then(Value::as_object) {
        let converted: Map<String, Value> = props.iter().map(|(k, v)| (k.clone(), convert(v, defs, depth))).collect();
        if let Some(required) = map.get("required").and_then(Value::as_array) {
            let kept: Vec<Value> =
                required.iter().filter(|r| r.as_str().is_some_and(|r| converted.contains_key(r))).cloned().collect();
            if !kept.is_empty() {
                out.insert("required".into(), Value::Array(kept));
            }
        }
        out.insert("properties".into(), Value::Object(converted));
    }
    if let Some(items) = map.get("items").filter(|i| i.is_object()) {
        out.insert("items".into(), convert(items, defs, depth));
    }
    if let Some(options) = map.get("anyOf").or_else(|| map.get("oneOf")).and_then(Value::as_array) {
        out.insert("anyOf".into(), Value::Array(options.iter().map(|o| convert(o, defs, depth)).collect()));
    }
    if let Some([single]) = map.get("allOf").and_then(Value::as_array).map(Vec::as_slice)
        && let Value::Object(merged) = convert(single, defs, depth)
    {
        for (k, v) in merged {
            out.entry(k).or_insert(v);
        }
    }
    Value::Object(out)
}

/// Whether the API accepts `format` on a schema of type `kind`: for strings only `enum` and
/// `date-time`, for numbers their widths; any other (`uri`, `email`…) is refused with a 400.
fn format_accepted(kind: Option<&Value>, format: &Value) -> bool {
    let accepted: &[&str] = match kind.and_then(Value::as_str) {
        Some("STRING") => &["enum", "date-time"],
        Some("INTEGER") => &["int32", "int64"],
        Some("NUMBER") => &["float", "double"],
        _ => &[],
    };
    format.as_str().is_some_and(|f| accepted.contains(&f))
}

/// `type` in upper case; a list of types with `null` becomes the other type and `nullable`,
/// a list of several types an `anyOf`.
fn convert_type(map: &Map<String, Value>, out: &mut Map<String, Value>) {
    let upper = |t: &str| Value::String(t.to_ascii_uppercase());
    match map.get("type") {
        Some(Value::String(t)) => {
            out.insert("type".into(), upper(t));
        }
        Some(Value::Array(types)) => {
            let names: Vec<&str> = types.iter().filter_map(Value::as_str).filter(|t| *t != "null").collect();
            if names.len() < types.len() {
                out.insert("nullable".into(), Value::Bool(true));
            }
            match names.as_slice() {
                [one] => {
                    out.insert("type".into(), upper(one));
                }
                [] => {}
                many => {
                    out.insert("anyOf".into(), many.iter().map(|t| json!({ "type": upper(t) })).collect());
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recursive_core::{ChatOptions, ToolCall};

    fn defaults() -> Defaults<'static> {
        Defaults { name: "gemini", model: "gemini-2.5-flash", max_tokens: None }
    }

    fn body(request: &ChatRequest) -> Value {
        serde_json::to_value(request_body(&defaults(), request).unwrap().1).unwrap()
    }

    fn reasoning(id: &str, text: &str, signature: &str) -> Reasoning {
        Reasoning { id: id.into(), text: text.into(), signature: signature.into(), ..Default::default() }
    }

    #[test]
    fn leading_system_messages_become_the_system_instruction() {
        let request = ChatRequest {
            messages: vec![Message::system("Be brief."), Message::user("hi"), Message::system("Now in French.")],
            ..Default::default()
        };
        let b = body(&request);
        assert_eq!(b["systemInstruction"], json!({"parts": [{"text": "Be brief."}]}));
        assert_eq!(
            b["contents"],
            json!([{"role": "user", "parts": [{"text": "hi"}]}, {"role": "user", "parts": [{"text": "Now in French."}]}])
        );
        assert!(b.get("generationConfig").is_none() && b.get("tools").is_none(), "{b}");
    }

    #[test]
    fn signatures_go_back_on_the_parts_they_came_on_and_results_pair_by_name() {
        let mut turn = Message::assistant_with_tools(
            "",
            vec![
                ToolCall { id: "gemini-call-1".into(), name: "f".into(), arguments: json!({"x": 1}) },
                ToolCall { id: "api-id-2".into(), name: "g".into(), arguments: json!({}) },
            ],
        );
        turn.reasoning = vec![
            reasoning(THOUGHT_ID, "Plan.", ""),
            reasoning("gemini:call:gemini-call-1", "", "sig-1"),
            reasoning("", "anthropic thinking", "anthropic-sig"),
            reasoning("rs_1", "responses item", "enc"),
        ];
        let request = ChatRequest {
            messages: vec![
                Message::user("go"),
                turn,
                Message::tool_result("gemini-call-1", "one", false),
                Message::tool_result("api-id-2", "boom", true),
            ],
            ..Default::default()
        };
        assert_eq!(
            body(&request)["contents"],
            json!([
                {"role": "user", "parts": [{"text": "go"}]},
                {"role": "model", "parts": [
                    {"text": "Plan.", "thought": true},
                    {"functionCall": {"name": "f", "args": {"x": 1}}, "thoughtSignature": "sig-1"},
                    {"functionCall": {"id": "api-id-2", "name": "g", "args": {}}}]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "f", "response": {"output": "one"}}},
                    {"functionResponse": {"id": "api-id-2", "name": "g", "response": {"error": "boom"}}}]}
            ])
        );
    }

    #[test]
    fn a_text_signature_goes_back_on_the_text_part() {
        let mut turn = Message::assistant("Done.");
        turn.reasoning = vec![reasoning(TEXT_SIGNATURE_ID, "", "sig-t")];
        let request = ChatRequest { messages: vec![Message::user("go"), turn], ..Default::default() };
        assert_eq!(
            body(&request)["contents"][1],
            json!({"role": "model", "parts": [{"text": "Done.", "thoughtSignature": "sig-t"}]})
        );
    }

    #[test]
    fn options_fill_the_generation_config_and_tool_config() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
            "additionalProperties": false});
        let options = ChatOptions {
            max_tokens: Some(900),
            temperature: Some(0.5),
            stop: vec!["END".into()],
            reasoning_effort: Some("low".into()),
            tool_choice: Some(ToolChoice::Tool("f".into())),
            response_format: Some(ResponseFormat::JsonSchema {
                name: "out".into(),
                schema: schema.clone(),
                strict: true,
            }),
            ..Default::default()
        };
        let request = ChatRequest {
            messages: vec![Message::user("x")],
            tools: vec![ToolSpec { name: "f".into(), description: "does f".into(), parameters: schema }],
            options,
        };
        let b = body(&request);
        let converted = json!({"type": "OBJECT", "properties": {"a": {"type": "STRING"}}, "required": ["a"]});
        assert_eq!(
            b["generationConfig"],
            json!({"stopSequences": ["END"], "maxOutputTokens": 900, "temperature": 0.5,
                "responseMimeType": "application/json", "responseSchema": converted,
                "thinkingConfig": {"thinkingBudget": 2048, "includeThoughts": true}})
        );
        assert_eq!(
            b["tools"],
            json!([{"functionDeclarations": [{"name": "f", "description": "does f", "parameters": converted}]}])
        );
        assert_eq!(b["toolConfig"], json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f"]}}));
    }

    #[test]
    fn schemas_are_converted_to_the_gemini_subset() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object", "additionalProperties": false,
            "properties": {
                "name": {"type": ["string", "null"], "description": "Who."},
                "kind": {"const": "a"},
                "n": {"type": "integer", "enum": [1, 2], "minimum": 0},
                "item": {"$ref": "#/$defs/Item"},
                "either": {"oneOf": [{"type": "string"}, {"type": "number"}]},
                "list": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "boolean"}},
                    "additionalProperties": false}}
            },
            "required": ["name", "missing"],
            "$defs": {"Item": {"type": "object", "properties": {"id": {"type": "string"}}}}
        });
        assert_eq!(
            gemini_schema(&schema),
            json!({"type": "OBJECT", "required": ["name"], "properties": {
                "name": {"type": "STRING", "nullable": true, "description": "Who."},
                "kind": {"enum": ["a"]},
                "n": {"type": "INTEGER", "minimum": 0},
                "item": {"type": "OBJECT", "properties": {"id": {"type": "STRING"}}},
                "either": {"anyOf": [{"type": "STRING"}, {"type": "NUMBER"}]},
                "list": {"type": "ARRAY", "items": {"type": "OBJECT", "properties": {"x": {"type": "BOOLEAN"}}}}
            }})
        );
    }

    #[test]
    fn a_recursive_reference_is_cut_and_a_function_without_arguments_sends_no_parameters() {
        let schema = json!({"$ref": "#/$defs/Node", "$defs": {"Node": {"type": "object",
            "properties": {"child": {"$ref": "#/$defs/Node"}}}}});
        let converted = gemini_schema(&schema);
        let mut depth = 0;
        let mut node = &converted;
        while let Some(child) = node.get("properties").and_then(|p| p.get("child")) {
            node = child;
            depth += 1;
        }
        assert_eq!(depth, MAX_REF_DEPTH);
        let spec = ToolSpec {
            name: "now".into(),
            description: "".into(),
            parameters: json!({"type": "object", "properties": {}}),
        };
        assert_eq!(declaration(&spec).parameters, None);
    }

    #[test]
    fn a_format_the_api_refuses_is_dropped_and_one_it_takes_is_kept() {
        let schema = json!({"type": "object", "properties": {
            "url": {"type": "string", "format": "uri"},
            "at": {"type": "string", "format": "date-time"},
            "n": {"type": "integer", "format": "int64"},
            "x": {"type": "number", "format": "int64"}
        }});
        assert_eq!(
            gemini_schema(&schema)["properties"],
            json!({"url": {"type": "STRING"}, "at": {"type": "STRING", "format": "date-time"},
                "n": {"type": "INTEGER", "format": "int64"}, "x": {"type": "NUMBER"}})
        );
    }

    #[test]
    fn a_schema_the_subset_cannot_say_goes_as_a_plain_json_schema() {
        let free_object = json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
            "properties": {"headers": {"type": "object", "additionalProperties": {"type": "string"}}}});
        let bare_array = json!({"type": "object", "properties": {"rows": {"type": "array"}}});
        for schema in [free_object, bare_array] {
            let declared =
                declaration(&ToolSpec { name: "f".into(), description: "".into(), parameters: schema.clone() });
            assert_eq!(declared.parameters, None, "{schema}");
            let mut plain = schema.clone();
            plain.as_object_mut().unwrap().remove("$schema");
            assert_eq!(declared.parameters_json_schema, Some(plain));
        }
        let sayable = json!({"type": "object", "properties": {"rows": {"type": "array", "items": {"type": "string"}}}});
        let declared = declaration(&ToolSpec { name: "f".into(), description: "".into(), parameters: sayable });
        assert!(declared.parameters.is_some() && declared.parameters_json_schema.is_none());
    }

    #[test]
    fn an_empty_user_message_sends_no_empty_part() {
        let request = ChatRequest { messages: vec![Message::user(""), Message::user("hi")], ..Default::default() };
        assert_eq!(body(&request)["contents"], json!([{"role": "user", "parts": [{"text": "hi"}]}]));
    }

    #[test]
    fn a_call_without_its_signature_carries_the_skip_value_for_models_that_check_signatures() {
        let turn = Message::assistant_with_tools(
            "",
            vec![
                ToolCall { id: "call_a".into(), name: "f".into(), arguments: json!({}) },
                ToolCall { id: "call_b".into(), name: "f".into(), arguments: json!({}) },
            ],
        );
        let messages = vec![Message::user("go"), turn];
        let signatures = |model: &str| {
            let options = ChatOptions { model: model.into(), ..Default::default() };
            let b = body(&ChatRequest { messages: messages.clone(), options, ..Default::default() });
            let parts = b["contents"][1]["parts"].as_array().unwrap().clone();
            parts.iter().map(|p| p.get("thoughtSignature").cloned()).collect::<Vec<_>>()
        };
        assert_eq!(signatures("gemini-3-pro-preview"), [Some(json!(NO_SIGNATURE)), None], "the first call only");
        assert_eq!(signatures("gemini-2.5-flash"), [None, None]);
        assert_eq!(signatures("publishers/google/models/gemini-3-flash"), [Some(json!(NO_SIGNATURE)), None]);
        assert_eq!(signatures("gemini-flash-latest"), [Some(json!(NO_SIGNATURE)), None], "an alias may be a Gemini 3");
    }

    #[test]
    fn a_models_prefix_is_dropped_and_no_model_is_an_error() {
        let request = ChatRequest {
            options: ChatOptions { model: "models/gemini-2.5-pro".into(), ..Default::default() },
            ..Default::default()
        };
        assert_eq!(request_body(&defaults(), &request).unwrap().0, "gemini-2.5-pro");
        let d = Defaults { model: "", ..defaults() };
        assert!(matches!(request_body(&d, &ChatRequest::default()), Err(ProviderError::Invalid(_))));
    }
}
