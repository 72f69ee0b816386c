//! The request transform of the Converse API: a core [`ChatRequest`] becomes the model id of
//! the path and a [`wire::ConverseRequest`] — system messages as `system` blocks, user text,
//! assistant turns as their reasoning (with its signature, or redacted), text and `toolUse`
//! blocks, tool results as `toolResult` blocks of one user message (so parallel calls' results
//! travel together), tools as `toolSpec`s, `inferenceConfig`, and Claude's extended thinking in
//! `additionalModelRequestFields`.
//!
//! Prompt caching follows the Anthropic provider's rule: a cache point after the system prompt,
//! after the tools, and after the last message's last block, so the stable prefix and the
//! conversation so far are read from the cache by the next turn — for the model families that
//! take cache points (Claude everywhere; Amazon Nova in the system prompt and messages only).

use recursive_core::{ChatRequest, Message, ProviderError, Reasoning, ResponseFormat, Role, ToolChoice, ToolSpec};
use serde_json::json;

use super::wire::{self, CachePoint};

/// Token cap used with thinking when neither the request nor the configuration sets one.
pub const THINKING_MAX_TOKENS: u32 = 4096;

/// What the configuration supplies where a request leaves something out.
#[derive(Debug, Clone, Copy)]
pub struct Defaults<'a> {
    /// Provider name, for errors.
    pub name: &'a str,
    /// Model used when a request names none.
    pub model: &'a str,
    /// Token cap used when a request sets none.
    pub max_tokens: Option<u32>,
    /// Place cache points where the model takes them.
    pub prompt_caching: bool,
}

/// What a model family accepts beyond the common Converse fields, told from its id (an
/// inference profile's or ARN's id names its model too; an application inference profile's
/// ARN does not, and gets none of these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Family {
    /// Cache points in the system prompt and messages.
    caches_prompt: bool,
    /// A cache point after the tools.
    caches_tools: bool,
    /// Claude's extended thinking (`thinking` in `additionalModelRequestFields`): Claude 3.7
    /// and later (Claude 3 and 3.5 refuse the field).
    thinks: bool,
    /// A tool result's `status` (only Claude and Nova take it; other models may refuse it).
    tool_status: bool,
}

fn family(model: &str) -> Family {
    let id = model.to_ascii_lowercase();
    let claude = id.contains("anthropic.claude");
    let nova = id.contains("amazon.nova");
    let before_thinking = (id.contains("claude-3-") && !id.contains("claude-3-7"))
        || id.contains("claude-v2")
        || id.contains("claude-instant");
    Family {
        caches_prompt: claude || nova,
        caches_tools: claude,
        thinks: claude && !before_thinking,
        tool_status: claude || nova,
    }
}

/// The model a request goes to and its wire body.
pub fn request_body(
    defaults: &Defaults<'_>,
    request: &ChatRequest,
) -> Result<(String, wire::ConverseRequest), ProviderError> {
    let opts = &request.options;
    let model = if opts.model.is_empty() { defaults.model } else { opts.model.as_str() };
    if model.is_empty() {
        return Err(ProviderError::Invalid(format!(
            "{}: no model given and no default model configured",
            defaults.name
        )));
    }
    let family = family(model);
    let messages = request_messages(&request.messages, family, !request.tools.is_empty());
    let mut body = wire::ConverseRequest {
        system: system_blocks(request),
        tool_config: tool_config(&request.tools, opts.tool_choice.as_ref(), &messages),
        messages,
        inference_config: None,
        additional_model_request_fields: None,
    };
    let mut inference = wire::InferenceConfig {
        max_tokens: opts.max_tokens.or(defaults.max_tokens),
        // Converse's range (an OpenAI-style 2.0 is refused); an empty stop sequence is refused.
        temperature: opts.temperature.map(|t| t.clamp(0.0, 1.0)),
        top_p: None,
        stop_sequences: opts.stop.iter().filter(|s| !s.is_empty()).cloned().collect(),
    };
    // Claude's rules for thinking are the Anthropic API's (a forced tool choice wins; a tool loop
    // begun without thinking goes on without it).
    let forced =
        !request.tools.is_empty() && matches!(opts.tool_choice, Some(ToolChoice::Required | ToolChoice::Tool(_)));
    let thinking = opts
        .reasoning_effort
        .as_deref()
        .and_then(crate::models::thinking_budget)
        .filter(|_| family.thinks && crate::anthropic::thinking_allowed(&request.messages, forced));
    if let Some(budget) = thinking {
        body.additional_model_request_fields = Some(json!({"thinking": {"type": "enabled", "budget_tokens": budget}}));
        // The budget must stay below the token cap, and thinking takes no temperature.
        inference.max_tokens = Some(inference.max_tokens.unwrap_or(THINKING_MAX_TOKENS).max(budget + 4096));
        inference.temperature = None;
    }
    body.inference_config = (inference != wire::InferenceConfig::default()).then_some(inference);
    if defaults.prompt_caching {
        mark_cache_points(&mut body, family);
    }
    Ok((model.to_string(), body))
}

/// The system messages' text (and a requested answer format, as an instruction: Converse has
/// no JSON mode), one block each.
fn system_blocks(request: &ChatRequest) -> Vec<wire::SystemBlock> {
    let mut blocks: Vec<wire::SystemBlock> = request
        .messages
        .iter()
        .filter(|m| m.role == Role::System && !is_blank(&m.content))
        .map(|m| wire::SystemBlock::Text(m.content.clone()))
        .collect();
    if let Some(instruction) = request.options.response_format.as_ref().and_then(format_instruction) {
        blocks.push(wire::SystemBlock::Text(instruction));
    }
    blocks
}

fn format_instruction(format: &ResponseFormat) -> Option<String> {
    match format {
        ResponseFormat::JsonObject => Some("Answer with a single JSON object and nothing else.".into()),
        ResponseFormat::JsonSchema { name, schema, .. } => Some(format!(
            "Answer with a single JSON object (`{name}`) that matches this JSON Schema, and nothing else:\n{schema}"
        )),
        _ => None,
    }
}

/// The non-system messages: user and tool-result messages become user turns, and adjacent
/// turns of one role are merged (so consecutive tool results share one user message). Without
/// `tools`, calls and results of earlier turns go as text: the API takes tool blocks only with
/// a `toolConfig`, and a request offering no tools has none. A conversation starts with the
/// user, as the API demands.
fn request_messages(messages: &[Message], family: Family, tools: bool) -> Vec<wire::Message> {
    let mut turns: Vec<wire::Message> = Vec::new();
    for m in messages {
        let (role, content) = match m.role {
            Role::System => continue,
            Role::User => ("user", text_block(&m.content).into_iter().collect::<Vec<_>>()),
            Role::Tool if !tools => ("user", text_block(&result_as_text(m)).into_iter().collect()),
            Role::Tool => ("user", vec![tool_result(m, family)]),
            Role::Assistant => ("assistant", assistant_blocks(m, tools)),
        };
        if content.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some(last) if last.role == role => last.content.extend(content),
            _ => turns.push(wire::Message { role, content }),
        }
    }
    if turns.first().is_some_and(|t| t.role == "assistant") {
        turns.insert(0, wire::Message { role: "user", content: vec![wire::ContentBlock::Text("(continue)".into())] });
    }
    turns
}

/// A tool result as text, for a request without tools.
fn result_as_text(m: &Message) -> String {
    let what = if m.is_error { "failed" } else { "returned" };
    format!("[tool call {} {what}]\n{}", m.tool_call_id.as_deref().unwrap_or_default(), m.content)
}

/// A call as text, for a request without tools.
fn call_as_text(c: &recursive_core::ToolCall) -> String {
    format!("[tool call {}: {}({})]", c.id, c.name, crate::anthropic::input_object(&c.arguments))
}

/// An assistant turn: its reasoning (Claude's, as the Anthropic provider keeps it: no item id),
/// then its text, then its calls.
fn assistant_blocks(m: &Message, tools: bool) -> Vec<wire::ContentBlock> {
    let mut blocks: Vec<_> = m.reasoning.iter().filter(|r| r.id.is_empty()).map(reasoning_block).collect();
    blocks.extend(text_block(&m.content));
    if !tools {
        blocks.extend(m.tool_calls.iter().filter_map(|c| text_block(&call_as_text(c))));
        return blocks;
    }
    blocks.extend(m.tool_calls.iter().map(|c| {
        wire::ContentBlock::ToolUse(wire::ToolUse {
            tool_use_id: c.id.clone(),
            name: c.name.clone(),
            input: crate::anthropic::input_object(&c.arguments),
        })
    }));
    blocks
}

/// A reasoning block sent back as the API gave it.
fn reasoning_block(r: &Reasoning) -> wire::ContentBlock {
    let content = if r.redacted {
        wire::ReasoningContent::RedactedContent(r.text.clone())
    } else {
        let signature = (!r.signature.is_empty()).then(|| r.signature.clone());
        wire::ReasoningContent::ReasoningText(wire::ReasoningText { text: r.text.clone(), signature })
    };
    wire::ContentBlock::ReasoningContent(content)
}

/// A tool result: its output as text, `status: error` when the tool failed (for the models
/// that take a status).
fn tool_result(m: &Message, family: Family) -> wire::ContentBlock {
    let content = text_block(&m.content).map(|_| wire::ToolResultContent::Text(m.content.clone()));
    wire::ContentBlock::ToolResult(wire::ToolResult {
        tool_use_id: m.tool_call_id.clone().unwrap_or_default(),
        content: content.into_iter().collect(),
        status: (m.is_error && family.tool_status).then_some("error"),
    })
}

/// A text block, or none for blank text (the API refuses a blank text block, whitespace
/// included).
fn text_block(text: &str) -> Option<wire::ContentBlock> {
    (!is_blank(text)).then(|| wire::ContentBlock::Text(text.to_string()))
}

fn is_blank(text: &str) -> bool {
    text.trim().is_empty()
}

/// `toolConfig`: the tools and the choice. Converse has no "no tool" choice: with
/// [`ToolChoice::None`] the tools are left out — unless the conversation already holds tool
/// blocks, which the API accepts only with a `toolConfig`.
fn tool_config(
    tools: &[ToolSpec],
    choice: Option<&ToolChoice>,
    messages: &[wire::Message],
) -> Option<wire::ToolConfig> {
    if tools.is_empty() {
        return None;
    }
    let has_tool_blocks = || {
        messages
            .iter()
            .flat_map(|m| &m.content)
            .any(|b| matches!(b, wire::ContentBlock::ToolUse(_) | wire::ContentBlock::ToolResult(_)))
    };
    if choice == Some(&ToolChoice::None) && !has_tool_blocks() {
        return None;
    }
    let tool_choice = match choice {
        Some(ToolChoice::Required) => Some(json!({"any": {}})),
        Some(ToolChoice::Tool(name)) => Some(json!({"tool": {"name": name}})),
        Some(ToolChoice::Auto) => Some(json!({"auto": {}})),
        _ => None,
    };
    Some(wire::ToolConfig { tools: tools.iter().map(tool_spec).collect(), tool_choice })
}

fn tool_spec(spec: &ToolSpec) -> wire::Tool {
    wire::Tool::ToolSpec(wire::ToolSpec {
        name: spec.name.clone(),
        description: (!spec.description.is_empty()).then(|| spec.description.clone()),
        input_schema: wire::InputSchema { json: spec.parameters.clone() },
    })
}

/// Cache points after the system prompt, the tools and the last message's last block, where
/// the model family takes them (three, within Claude's limit of four).
fn mark_cache_points(body: &mut wire::ConverseRequest, family: Family) {
    if !family.caches_prompt {
        return;
    }
    if !body.system.is_empty() {
        body.system.push(wire::SystemBlock::CachePoint(CachePoint::DEFAULT));
    }
    if family.caches_tools
        && let Some(config) = body.tool_config.as_mut()
    {
        config.tools.push(wire::Tool::CachePoint(CachePoint::DEFAULT));
    }
    if let Some(last) = body.messages.last_mut() {
        last.content.push(wire::ContentBlock::CachePoint(CachePoint::DEFAULT));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recursive_core::{ChatOptions, ToolCall};
    use serde_json::Value;

    const CLAUDE: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";

    fn defaults(prompt_caching: bool) -> Defaults<'static> {
        Defaults { name: "bedrock", model: CLAUDE, max_tokens: None, prompt_caching }
    }

    fn body(request: &ChatRequest, caching: bool) -> Value {
        serde_json::to_value(request_body(&defaults(caching), request).unwrap().1).unwrap()
    }

    fn call(id: &str) -> ToolCall {
        ToolCall { id: id.into(), name: "f".into(), arguments: json!({"x": 1}) }
    }

    #[test]
    fn parallel_calls_go_in_one_assistant_turn_and_their_results_in_one_user_turn() {
        let mut turn = Message::assistant_with_tools("", vec![call("a"), call("b")]);
        turn.reasoning = vec![
            Reasoning { text: "Plan.".into(), signature: "sig".into(), ..Default::default() },
            Reasoning { text: "b64==".into(), redacted: true, ..Default::default() },
            Reasoning { id: "gemini:thought".into(), text: "other provider".into(), ..Default::default() },
        ];
        let request = ChatRequest {
            messages: vec![
                Message::system("sys"),
                Message::user("go"),
                turn,
                Message::tool_result("a", "one", false),
                Message::tool_result("b", "boom", true),
            ],
            tools: vec![ToolSpec { name: "f".into(), description: "d".into(), parameters: json!({"type": "object"}) }],
            ..Default::default()
        };
        let b = body(&request, false);
        assert_eq!(b["system"], json!([{"text": "sys"}]));
        assert_eq!(
            b["messages"],
            json!([
                {"role": "user", "content": [{"text": "go"}]},
                {"role": "assistant", "content": [
                    {"reasoningContent": {"reasoningText": {"text": "Plan.", "signature": "sig"}}},
                    {"reasoningContent": {"redactedContent": "b64=="}},
                    {"toolUse": {"toolUseId": "a", "name": "f", "input": {"x": 1}}},
                    {"toolUse": {"toolUseId": "b", "name": "f", "input": {"x": 1}}}]},
                {"role": "user", "content": [
                    {"toolResult": {"toolUseId": "a", "content": [{"text": "one"}]}},
                    {"toolResult": {"toolUseId": "b", "content": [{"text": "boom"}], "status": "error"}}]}
            ])
        );
        assert!(b.get("inferenceConfig").is_none(), "{b}");
    }

    #[test]
    fn cache_points_follow_the_system_prompt_the_tools_and_the_last_message() {
        let tool = ToolSpec { name: "f".into(), description: "d".into(), parameters: json!({"type": "object"}) };
        let request = ChatRequest {
            messages: vec![Message::system("sys"), Message::user("go")],
            tools: vec![tool],
            ..Default::default()
        };
        let cache = json!({"cachePoint": {"type": "default"}});
        let b = body(&request, true);
        assert_eq!(b["system"], json!([{"text": "sys"}, cache]));
        assert_eq!(
            b["toolConfig"]["tools"],
            json!([{"toolSpec": {"name": "f", "description": "d", "inputSchema": {"json": {"type": "object"}}}}, cache])
        );
        assert_eq!(b["messages"], json!([{"role": "user", "content": [{"text": "go"}, cache]}]));
        let nova = ChatRequest {
            options: ChatOptions { model: "amazon.nova-pro-v1:0".into(), ..Default::default() },
            ..request.clone()
        };
        let n = body(&nova, true);
        assert_eq!(n.to_string().matches("cachePoint").count(), 2, "no tools cache point for Nova: {n}");
        let llama = ChatRequest {
            options: ChatOptions { model: "meta.llama3-70b-instruct-v1:0".into(), ..Default::default() },
            ..request
        };
        assert!(!body(&llama, true).to_string().contains("cachePoint"));
    }

    #[test]
    fn options_fill_the_inference_config_and_the_tool_choice() {
        let tool = ToolSpec { name: "f".into(), description: "".into(), parameters: json!({"type": "object"}) };
        let options = ChatOptions {
            max_tokens: Some(900),
            temperature: Some(0.5),
            stop: vec!["END".into()],
            tool_choice: Some(ToolChoice::Tool("f".into())),
            ..Default::default()
        };
        let request = ChatRequest { messages: vec![Message::user("x")], tools: vec![tool], options };
        let b = body(&request, false);
        assert_eq!(b["inferenceConfig"], json!({"maxTokens": 900, "temperature": 0.5, "stopSequences": ["END"]}));
        assert_eq!(b["toolConfig"]["toolChoice"], json!({"tool": {"name": "f"}}));
        assert!(b["toolConfig"]["tools"][0]["toolSpec"].get("description").is_none());
    }

    #[test]
    fn no_tool_choice_leaves_the_tools_out_unless_the_conversation_has_tool_blocks() {
        let tool = ToolSpec { name: "f".into(), description: "d".into(), parameters: json!({"type": "object"}) };
        let options = ChatOptions { tool_choice: Some(ToolChoice::None), ..Default::default() };
        let fresh = ChatRequest { messages: vec![Message::user("x")], tools: vec![tool.clone()], options };
        assert!(body(&fresh, false).get("toolConfig").is_none());
        let mut looped = fresh.clone();
        looped.messages.push(Message::assistant_with_tools("", vec![call("a")]));
        looped.messages.push(Message::tool_result("a", "one", false));
        let b = body(&looped, false);
        assert!(b["toolConfig"].get("toolChoice").is_none(), "{b}");
        assert_eq!(b["toolConfig"]["tools"][0]["toolSpec"]["name"], "f");
    }

    #[test]
    fn a_reasoning_effort_turns_claude_thinking_on_within_the_token_cap() {
        let options = ChatOptions {
            reasoning_effort: Some("low".into()),
            temperature: Some(0.5),
            max_tokens: Some(1000),
            ..Default::default()
        };
        let request = ChatRequest { messages: vec![Message::user("x")], options, ..Default::default() };
        let b = body(&request, false);
        assert_eq!(b["additionalModelRequestFields"], json!({"thinking": {"type": "enabled", "budget_tokens": 2048}}));
        assert_eq!(b["inferenceConfig"], json!({"maxTokens": 2048 + 4096}));
        let nova = ChatRequest {
            options: ChatOptions { model: "amazon.nova-lite-v1:0".into(), ..request.options.clone() },
            ..request
        };
        let n = body(&nova, false);
        assert!(n.get("additionalModelRequestFields").is_none(), "{n}");
        assert_eq!(n["inferenceConfig"], json!({"maxTokens": 1000, "temperature": 0.5}));
    }

    #[test]
    fn thinking_gives_way_to_a_forced_tool_choice_and_to_claude_models_before_three_seven() {
        let tool = ToolSpec { name: "f".into(), description: "d".into(), parameters: json!({"type": "object"}) };
        let with = |model: &str, choice: Option<ToolChoice>| {
            let options = ChatOptions {
                model: model.into(),
                reasoning_effort: Some("low".into()),
                tool_choice: choice,
                ..Default::default()
            };
            let request = ChatRequest { messages: vec![Message::user("x")], tools: vec![tool.clone()], options };
            body(&request, false).get("additionalModelRequestFields").is_some()
        };
        assert!(with(CLAUDE, Some(ToolChoice::Auto)));
        assert!(!with(CLAUDE, Some(ToolChoice::Required)));
        assert!(!with(CLAUDE, Some(ToolChoice::Tool("f".into()))));
        assert!(with("anthropic.claude-3-7-sonnet-20250219-v1:0", None));
        assert!(!with("anthropic.claude-3-5-haiku-20241022-v1:0", None));
        assert!(!with("anthropic.claude-v2:1", None));
        let options = ChatOptions {
            reasoning_effort: Some("low".into()),
            tool_choice: Some(ToolChoice::Required),
            ..Default::default()
        };
        let no_tools = ChatRequest { messages: vec![Message::user("x")], options, ..Default::default() };
        assert!(body(&no_tools, false).get("additionalModelRequestFields").is_some(), "nothing forced without tools");
    }

    #[test]
    fn blank_text_is_not_sent_and_a_conversation_starts_with_the_user() {
        let request = ChatRequest {
            messages: vec![
                Message::system("  "),
                Message::assistant("Earlier answer."),
                Message::user("\n\n"),
                Message::assistant_with_tools("\n", vec![call("a")]),
                Message::tool_result("a", " ", false),
            ],
            tools: vec![ToolSpec { name: "f".into(), description: "d".into(), parameters: json!({"type": "object"}) }],
            ..Default::default()
        };
        let b = body(&request, false);
        assert!(b.get("system").is_none_or(|s| s.as_array().is_some_and(Vec::is_empty)), "{b}");
        assert_eq!(
            b["messages"],
            json!([
                {"role": "user", "content": [{"text": "(continue)"}]},
                {"role": "assistant", "content": [{"text": "Earlier answer."},
                    {"toolUse": {"toolUseId": "a", "name": "f", "input": {"x": 1}}}]},
                {"role": "user", "content": [{"toolResult": {"toolUseId": "a", "content": []}}]}
            ])
        );
    }

    #[test]
    fn without_tools_earlier_calls_and_results_go_as_text() {
        let request = ChatRequest {
            messages: vec![
                Message::user("go"),
                Message::assistant_with_tools("", vec![call("a")]),
                Message::tool_result("a", "one", true),
                Message::user("and now?"),
            ],
            ..Default::default()
        };
        let b = body(&request, false);
        assert!(b.get("toolConfig").is_none());
        assert_eq!(
            b["messages"],
            json!([
                {"role": "user", "content": [{"text": "go"}]},
                {"role": "assistant", "content": [{"text": "[tool call a: f({\"x\":1})]"}]},
                {"role": "user", "content": [{"text": "[tool call a failed]\none"}, {"text": "and now?"}]}
            ])
        );
    }

    #[test]
    fn a_failed_results_status_goes_only_to_models_that_take_one_and_temperature_stays_in_range() {
        let messages = vec![
            Message::user("go"),
            Message::assistant_with_tools("", vec![call("a")]),
            Message::tool_result("a", "boom", true),
        ];
        let tools = vec![ToolSpec { name: "f".into(), description: "d".into(), parameters: json!({"type": "object"}) }];
        let status = |model: &str| {
            let options = ChatOptions {
                model: model.into(),
                temperature: Some(1.7),
                stop: vec![String::new()],
                ..Default::default()
            };
            let b = body(&ChatRequest { messages: messages.clone(), tools: tools.clone(), options }, false);
            assert_eq!(b["inferenceConfig"], json!({"temperature": 1.0}), "{b}");
            b["messages"][2]["content"][0]["toolResult"].get("status").cloned()
        };
        assert_eq!(status(CLAUDE), Some(json!("error")));
        assert_eq!(status("amazon.nova-pro-v1:0"), Some(json!("error")));
        assert_eq!(status("writer.palmyra-x5-v1:0"), None);
    }

    #[test]
    fn no_model_is_an_error() {
        let d = Defaults { model: "", ..defaults(false) };
        assert!(matches!(request_body(&d, &ChatRequest::default()), Err(ProviderError::Invalid(_))));
    }
}
