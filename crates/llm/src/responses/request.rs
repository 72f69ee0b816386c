//! The request transform of the Responses API: a core [`ChatRequest`] becomes a
//! [`wire::ResponsesRequest`] — leading system messages as `instructions` (later ones as
//! developer messages), user and assistant messages as message items, an assistant turn's
//! reasoning items (with their encrypted content) and function calls as their own items, tool
//! results as `function_call_output` items paired by `call_id`; function tools (strict where
//! the schema allows), `store: false` with the encrypted reasoning included so the run is
//! stateless.

use recursive_core::{ChatRequest, Message, ProviderError, ResponseFormat, Role, ToolChoice, ToolSpec};
use serde_json::{Value, json};

use super::wire;

/// What a request is built with besides the request itself.
pub(crate) struct Defaults<'c> {
    /// Provider name, for errors.
    pub name: &'c str,
    /// Model used when the request names none.
    pub model: &'c str,
    /// Token cap used when the request sets none.
    pub max_tokens: Option<u32>,
    /// Stream the answer.
    pub stream: bool,
}

/// The wire body for a request.
pub(crate) fn request_body<'a>(
    defaults: &Defaults<'_>,
    request: &'a ChatRequest,
) -> Result<wire::ResponsesRequest<'a>, ProviderError> {
    let opts = &request.options;
    let model = if opts.model.is_empty() { defaults.model.to_string() } else { opts.model.clone() };
    if model.is_empty() {
        return Err(ProviderError::Invalid(format!(
            "{}: no model given and no default model configured",
            defaults.name
        )));
    }
    let reasons = reasons(&model, opts.reasoning_effort.as_deref());
    let (instructions, rest) = split_instructions(&request.messages);
    let has_tools = !request.tools.is_empty();
    Ok(wire::ResponsesRequest {
        instructions,
        input: input_items(rest),
        tools: request.tools.iter().map(function_tool).collect(),
        tool_choice: opts.tool_choice.as_ref().filter(|_| has_tools).map(tool_choice),
        parallel_tool_calls: has_tools.then_some(true),
        temperature: opts.temperature.filter(|_| !reasons),
        // The API refuses a cap under 16 tokens.
        max_output_tokens: opts.max_tokens.or(defaults.max_tokens).map(|n| n.max(16)),
        reasoning: opts
            .reasoning_effort
            .as_ref()
            .map(|effort| wire::ReasoningConfig { effort: effort.clone(), summary: "auto" }),
        text: opts.response_format.as_ref().and_then(text_format),
        store: false,
        include: if reasons { vec!["reasoning.encrypted_content"] } else { Vec::new() },
        prompt_cache_key: opts.prompt_cache_key.as_deref().filter(|k| !k.is_empty()).map(cache_key),
        stream: defaults.stream.then_some(true),
        model,
    })
}

/// A prompt cache key as the API takes it: at most 64 characters (a longer one is refused with a
/// 400), so a longer key goes as its SHA-256 in hex — the same key for the same text.
fn cache_key(key: &str) -> String {
    if key.len() <= 64 {
        return key.to_string();
    }
    use sha2::Digest;
    sha2::Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether the model reasons (so it takes no temperature and returns encrypted reasoning): a
/// reasoning effort was asked for, or the model is one of OpenAI's reasoning families (`o1`,
/// `o3`, `o4-mini`, `gpt-5` and its variants, `codex`).
fn reasons(model: &str, effort: Option<&str>) -> bool {
    if effort.is_some() || crate::models::is_reasoning_model(model) {
        return true;
    }
    let id = model.rsplit('/').next().unwrap_or(model);
    let o_series = id.strip_prefix('o').is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()));
    o_series || id.starts_with("gpt-5") || id.contains("codex")
}

/// The leading system messages joined as `instructions`, and the rest of the conversation.
fn split_instructions(messages: &[Message]) -> (Option<String>, &[Message]) {
    let lead = messages.iter().take_while(|m| m.role == Role::System).count();
    let texts: Vec<&str> =
        messages[..lead].iter().map(|m| m.content.as_str()).filter(|t| !t.trim().is_empty()).collect();
    ((!texts.is_empty()).then(|| texts.join("\n\n")), &messages[lead..])
}

/// The conversation as input items.
fn input_items(messages: &[Message]) -> Vec<wire::InputItem<'_>> {
    let mut items = Vec::with_capacity(messages.len());
    for m in messages {
        match m.role {
            Role::System => items.push(text_message("developer", &m.content)),
            Role::User => items.push(text_message("user", &m.content)),
            Role::Tool => items.push(wire::InputItem::FunctionCallOutput {
                call_id: m.tool_call_id.as_deref().unwrap_or_default(),
                output: &m.content,
            }),
            Role::Assistant => assistant_items(m, &mut items),
        }
    }
    items
}

fn text_message<'a>(role: &'static str, text: &'a str) -> wire::InputItem<'a> {
    wire::InputItem::Message { role, content: wire::MessageContent::Text(text), phase: None }
}

/// Whether a reasoning entry is a Responses reasoning item (an `rs_…` id): Anthropic thinking has
/// no id, and Gemini's thought signatures are named `gemini:…` — neither is sent to OpenAI.
fn is_responses_reasoning(r: &recursive_core::Reasoning) -> bool {
    !r.id.is_empty() && !r.id.starts_with("gemini:")
}

/// An assistant turn: its reasoning items, its text, its function calls, in the order the
/// model produced them.
fn assistant_items<'a>(m: &'a Message, items: &mut Vec<wire::InputItem<'a>>) {
    // Reasoning without an item id is another provider's (Anthropic thinking), and an item
    // without its encrypted content cannot be resolved by a stateless (`store: false`) API.
    // Reasoning with nothing after it (a response cut off while the model reasoned) is refused
    // ("provided without its required following item"): it is left out.
    let followed = !m.content.is_empty() || !m.tool_calls.is_empty();
    let carried = m.reasoning.iter().filter(|r| followed && is_responses_reasoning(r) && !r.signature.is_empty());
    items.extend(carried.map(|r| wire::InputItem::Reasoning {
        id: &r.id,
        summary: if r.text.is_empty() {
            Vec::new()
        } else {
            vec![wire::SummaryPart { kind: "summary_text".into(), text: r.text.clone() }]
        },
        encrypted_content: Some(r.signature.as_str()),
    }));
    if !m.content.is_empty() {
        items.push(wire::InputItem::Message {
            role: "assistant",
            content: wire::MessageContent::Parts(vec![wire::OutputText { kind: "output_text", text: &m.content }]),
            phase: m.phase.as_deref(),
        });
    }
    items.extend(m.tool_calls.iter().map(|c| wire::InputItem::FunctionCall {
        call_id: &c.id,
        name: &c.name,
        arguments: arguments_text(&c.arguments),
    }));
}

/// Arguments as the JSON text the API expects; text kept from an unparseable call goes back
/// verbatim.
fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(raw) => raw.clone(),
        Value::Null => "{}".into(),
        v => v.to_string(),
    }
}

fn function_tool(spec: &ToolSpec) -> wire::FunctionTool {
    wire::FunctionTool {
        kind: "function",
        name: spec.name.clone(),
        description: spec.description.clone(),
        parameters: spec.parameters.clone(),
        strict: strict_compatible(&spec.parameters),
    }
}

/// Whether a JSON Schema meets what strict mode demands: an object at the root (not a union),
/// every object listing each of its properties as required and forbidding others
/// (`additionalProperties: false`), all the way down, and no keyword outside the subset strict
/// mode supports (`oneOf`, `allOf`, `not`, `default`, string lengths… are refused there with a
/// 400 that fails every request naming the tool). A schema that does not is sent non-strict
/// rather than rejected.
pub(crate) fn strict_compatible(schema: &Value) -> bool {
    let root_is_object =
        schema.as_object().is_some_and(|m| m.get("type") == Some(&json!("object")) && !m.contains_key("anyOf"));
    root_is_object && strict_subschema(schema)
}

/// The keywords strict mode accepts in a schema (OpenAI's structured-outputs subset).
const STRICT_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "anyOf",
    "$defs",
    "definitions",
    "$ref",
    "enum",
    "const",
    "description",
    "title",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
];

/// The string formats strict mode accepts (schemars' `uint32`, say, is not one of them).
const STRICT_FORMATS: &[&str] = &["date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"];

fn strict_subschema(schema: &Value) -> bool {
    let Some(map) = schema.as_object() else { return schema.is_boolean() };
    if !map.keys().all(|k| STRICT_KEYWORDS.contains(&k.as_str())) {
        return false;
    }
    if map.get("format").is_some_and(|f| !f.as_str().is_some_and(|f| STRICT_FORMATS.contains(&f))) {
        return false;
    }
    let is_object =
        map.get("type").is_some_and(|t| t == "object" || t.as_array().is_some_and(|a| a.contains(&json!("object"))))
            || map.contains_key("properties");
    if is_object && !object_is_strict(map) {
        return false;
    }
    let nested = |key: &str| -> Vec<&Value> {
        match map.get(key) {
            Some(Value::Object(m)) if key != "items" => m.values().collect(),
            Some(Value::Array(a)) => a.iter().collect(),
            Some(v @ Value::Object(_)) => vec![v],
            _ => Vec::new(),
        }
    };
    ["properties", "items", "anyOf", "$defs", "definitions"].iter().flat_map(|k| nested(k)).all(strict_subschema)
}

fn object_is_strict(map: &serde_json::Map<String, Value>) -> bool {
    if map.get("additionalProperties") != Some(&Value::Bool(false)) {
        return false;
    }
    let required: Vec<&str> = map
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let properties = map.get("properties").and_then(Value::as_object);
    properties.is_none_or(|p| p.keys().all(|k| required.contains(&k.as_str())))
}

/// `tool_choice` on the wire.
fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Tool(name) => json!({"type": "function", "name": name}),
        _ => json!("auto"),
    }
}

/// `text.format` for a requested answer format.
fn text_format(format: &ResponseFormat) -> Option<Value> {
    let format = match format {
        ResponseFormat::JsonObject => json!({"type": "json_object"}),
        ResponseFormat::JsonSchema { name, schema, strict } => {
            json!({"type": "json_schema", "name": name, "schema": schema, "strict": strict})
        }
        _ => return None,
    };
    Some(json!({ "format": format }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use recursive_core::{ChatOptions, Reasoning, ToolCall};

    fn defaults() -> Defaults<'static> {
        Defaults { name: "openai-responses", model: "gpt-5-mini", max_tokens: None, stream: true }
    }

    fn body(request: &ChatRequest) -> Value {
        serde_json::to_value(request_body(&defaults(), request).unwrap()).unwrap()
    }

    #[test]
    fn leading_system_messages_become_instructions_and_later_ones_developer_messages() {
        let request = ChatRequest {
            messages: vec![Message::system("Be brief."), Message::user("hi"), Message::system("Now in French.")],
            ..Default::default()
        };
        let b = body(&request);
        assert_eq!(b["instructions"], "Be brief.");
        assert_eq!(
            b["input"],
            json!([
                {"type": "message", "role": "user", "content": "hi"},
                {"type": "message", "role": "developer", "content": "Now in French."}
            ])
        );
        assert_eq!(b["store"], false);
        assert_eq!(b["stream"], true);
    }

    #[test]
    fn an_assistant_turn_becomes_reasoning_text_and_calls_then_outputs_pair_by_call_id() {
        let mut turn = Message::assistant_with_tools(
            "Checking.",
            vec![ToolCall { id: "call_1".into(), name: "f".into(), arguments: json!({"x": 1}) }],
        );
        turn.reasoning = vec![
            Reasoning { id: "rs_1".into(), text: "Plan.".into(), signature: "enc-1".into(), ..Default::default() },
            Reasoning { text: "anthropic thinking".into(), signature: "sig".into(), ..Default::default() },
            Reasoning { id: "rs_stored".into(), text: "no encrypted content".into(), ..Default::default() },
            Reasoning {
                id: "gemini:thought".into(),
                text: "gemini".into(),
                signature: "g".into(),
                ..Default::default()
            },
        ];
        let request = ChatRequest {
            messages: vec![Message::user("go"), turn, Message::tool_result("call_1", "one", false)],
            ..Default::default()
        };
        assert_eq!(
            body(&request)["input"],
            json!([
                {"type": "message", "role": "user", "content": "go"},
                {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Plan."}],
                 "encrypted_content": "enc-1"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
                {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{\"x\":1}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "one"}
            ])
        );
    }

    #[test]
    fn a_reasoning_effort_asks_for_summaries_and_encrypted_reasoning_without_temperature() {
        let options = ChatOptions {
            model: "gpt-5".into(),
            reasoning_effort: Some("high".into()),
            temperature: Some(0.3),
            max_tokens: Some(900),
            prompt_cache_key: Some("run-1".into()),
            ..Default::default()
        };
        let b = body(&ChatRequest { messages: vec![Message::user("x")], options, ..Default::default() });
        assert_eq!(b["reasoning"], json!({"effort": "high", "summary": "auto"}));
        assert_eq!(b["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(b["max_output_tokens"], 900);
        assert_eq!(b["prompt_cache_key"], "run-1");
        assert!(b.get("temperature").is_none(), "{b}");
    }

    #[test]
    fn a_long_cache_key_goes_hashed_to_the_sixty_four_characters_the_api_takes_and_a_tiny_cap_goes_as_sixteen() {
        let long = "k".repeat(200);
        let options = ChatOptions {
            model: "gpt-5".into(),
            prompt_cache_key: Some(long.clone()),
            max_tokens: Some(5),
            ..Default::default()
        };
        let b = body(&ChatRequest { messages: vec![Message::user("x")], options, ..Default::default() });
        let key = b["prompt_cache_key"].as_str().unwrap();
        assert_eq!(key.len(), 64);
        assert!(key.chars().all(|c| c.is_ascii_hexdigit()), "{key}");
        assert_ne!(key, cache_key(&"j".repeat(200)));
        assert_eq!(b["max_output_tokens"], 16);
    }

    #[test]
    fn an_assistant_messages_phase_goes_back_as_it_came() {
        let mut turn = Message::assistant("Checking.");
        turn.phase = Some("commentary".into());
        let request = ChatRequest { messages: vec![Message::user("go"), turn], ..Default::default() };
        assert_eq!(
            body(&request)["input"][1],
            json!({"type": "message", "role": "assistant", "phase": "commentary",
                "content": [{"type": "output_text", "text": "Checking."}]})
        );
    }

    #[test]
    fn reasoning_cut_off_with_nothing_after_it_is_not_sent_back() {
        let mut turn = Message::assistant("");
        turn.reasoning = vec![Reasoning {
            id: "rs_1".into(),
            text: "Thinking".into(),
            signature: "enc".into(),
            ..Default::default()
        }];
        let request =
            ChatRequest { messages: vec![Message::user("go"), turn, Message::user("go on")], ..Default::default() };
        assert_eq!(
            body(&request)["input"],
            json!([
                {"type": "message", "role": "user", "content": "go"},
                {"type": "message", "role": "user", "content": "go on"}
            ])
        );
    }

    #[test]
    fn a_non_reasoning_model_keeps_its_temperature_and_asks_for_no_encrypted_reasoning() {
        let options = ChatOptions { model: "gpt-4.1".into(), temperature: Some(0.3), ..Default::default() };
        let b = body(&ChatRequest { messages: vec![Message::user("x")], options, ..Default::default() });
        assert_eq!(b["temperature"], 0.3f32 as f64);
        assert!(b.get("include").is_none() && b.get("reasoning").is_none(), "{b}");
        assert!(b.get("prompt_cache_key").is_none());
    }

    #[test]
    fn only_openai_reasoning_families_count_as_reasoning_without_an_effort() {
        for model in ["o3", "o4-mini", "gpt-5", "gpt-5.1-codex", "openai/gpt-5-mini", "codex-mini-latest"] {
            assert!(reasons(model, None), "{model}");
        }
        for model in ["gpt-4.1", "gpt-4o-mini", "llama3.2", "qwen3", "omni-model"] {
            assert!(!reasons(model, None), "{model}");
        }
        assert!(reasons("llama3.2", Some("low")));
    }

    #[test]
    fn tools_are_strict_only_where_the_schema_allows() {
        let strict = json!({"type": "object", "properties": {"a": {"type": "string"},
            "b": {"type": "object", "properties": {"c": {"type": "integer"}}, "required": ["c"], "additionalProperties": false}},
            "required": ["a", "b"], "additionalProperties": false});
        let optional_field = json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": [],
            "additionalProperties": false});
        let open_nested = json!({"type": "object", "properties": {"b": {"type": "object", "properties": {}}},
            "required": ["b"], "additionalProperties": false});
        let open_items = json!({"type": "object", "properties": {"l": {"type": "array", "items": {"type": "object",
            "properties": {"x": {"type": "string"}}}}}, "required": ["l"], "additionalProperties": false});
        assert!(strict_compatible(&strict));
        assert!(!strict_compatible(&optional_field));
        assert!(!strict_compatible(&open_nested));
        assert!(!strict_compatible(&open_items));
        assert!(!strict_compatible(&json!({"type": "object"})));
        // Keywords strict mode refuses, anywhere, and a union at the root.
        let one_of = json!({"type": "object", "properties": {"a": {"oneOf": [{"type": "string"}, {"type": "integer"}]}},
            "required": ["a"], "additionalProperties": false});
        let defaulted = json!({"type": "object", "properties": {"a": {"type": "string", "default": "x"}},
            "required": ["a"], "additionalProperties": false});
        let root_union = json!({"type": "object", "anyOf": [strict.clone()]});
        let uint = json!({"type": "object", "properties": {"n": {"type": "integer", "format": "uint32", "minimum": 0}},
            "required": ["n"], "additionalProperties": false});
        for refused in [one_of, defaulted, root_union, uint, json!({"allOf": [strict.clone()]})] {
            assert!(!strict_compatible(&refused), "{refused}");
        }
        let nullable = json!({"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
            "required": ["a"], "additionalProperties": false});
        assert!(strict_compatible(&nullable), "a union below the root is allowed");
        let request = ChatRequest {
            messages: vec![Message::user("x")],
            tools: vec![ToolSpec { name: "f".into(), description: "does f".into(), parameters: strict.clone() }],
            options: ChatOptions { tool_choice: Some(ToolChoice::Tool("f".into())), ..Default::default() },
        };
        let b = body(&request);
        assert_eq!(
            b["tools"],
            json!([{"type": "function", "name": "f", "description": "does f", "parameters": strict, "strict": true}])
        );
        assert_eq!(b["parallel_tool_calls"], true);
        assert_eq!(b["tool_choice"], json!({"type": "function", "name": "f"}));
    }

    #[test]
    fn a_json_schema_format_goes_in_text_format() {
        let schema = json!({"type": "object"});
        let options = ChatOptions {
            response_format: Some(ResponseFormat::JsonSchema {
                name: "out".into(),
                schema: schema.clone(),
                strict: true,
            }),
            ..Default::default()
        };
        let b = body(&ChatRequest { messages: vec![Message::user("x")], options, ..Default::default() });
        assert_eq!(
            b["text"],
            json!({"format": {"type": "json_schema", "name": "out", "schema": schema, "strict": true}})
        );
    }

    #[test]
    fn a_turn_read_back_from_its_saved_form_sends_the_same_reasoning() {
        let mut turn = Message::assistant_with_tools(
            "",
            vec![ToolCall { id: "call_1".into(), name: "f".into(), arguments: json!({}) }],
        );
        turn.reasoning = vec![Reasoning {
            id: "rs_1".into(),
            text: "Plan.".into(),
            signature: "enc-1".into(),
            ..Default::default()
        }];
        let saved = serde_json::to_string(&turn).unwrap();
        let resumed: Message = serde_json::from_str(&saved).unwrap();
        let request = |m: Message| ChatRequest {
            messages: vec![Message::user("go"), m, Message::tool_result("call_1", "one", false)],
            ..Default::default()
        };
        assert_eq!(body(&request(resumed))["input"], body(&request(turn))["input"]);
        assert!(saved.contains("\"id\":\"rs_1\"") && saved.contains("enc-1"), "{saved}");
    }

    #[test]
    fn no_model_anywhere_is_an_error() {
        let d = Defaults { model: "", ..defaults() };
        let err = request_body(&d, &ChatRequest::default()).unwrap_err();
        assert!(matches!(err, ProviderError::Invalid(_)), "{err:?}");
    }
}
