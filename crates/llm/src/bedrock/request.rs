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
    /// Claude's extended thinking (`thinking` in `additionalModelRequestFields`).
    thinks: bool,
}

fn family(model: &str) -> Family {
    let id = model.to_ascii_lowercase();
    let claude = id.contains("anthropic.claude");
    let nova = id.contains("amazon.nova");
    Family { caches_prompt: claude || nova, caches_tools: claude, thinks: claude }
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
    let messages = request_messages(&request.messages);
    let mut body = wire::ConverseRequest {
        system: system_blocks(request),
        tool_config: tool_config(&request.tools, opts.tool_choice.as_ref(), &messages),
        messages,
        inference_config: None,
        additional_model_request_fields: None,
    };
    let mut inference = wire::InferenceConfig {
        max_tokens: opts.max_tokens.or(defaults.max_tokens),
        temperature: opts.temperature,
        top_p: None,
        stop_sequences: opts.stop.clone(),
    };
    if let Some(budget) = opts.reasoning_effort.as_deref().and_then(thinking_budget).filter(|_| family.thinks) {
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
        .filter(|m| m.role == Role::System && !m.content.is_empty())
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

/// Thinking tokens for a reasoning effort (`None` for an unknown level): the Anthropic
/// provider's levels.
fn thinking_budget(effort: &str) -> Option<u32> {
    match effort {
        "minimal" => Some(1024),
        "low" => Some(2048),
        "medium" => Some(8192),
        "high" => Some(24_576),
        _ => None,
    }
}

/// The non-system messages: user and tool-result messages become user turns, and adjacent
/// turns of one role are merged (so consecutive tool results share one user message).
fn request_messages(messages: &[Message]) -> Vec<wire::Message> {
    let mut turns: Vec<wire::Message> = Vec::new();
    for m in messages {
        let (role, content) = match m.role {
            Role::System => continue,
            Role::User => ("user", text_block(&m.content).into_iter().collect::<Vec<_>>()),
            Role::Tool => ("user", vec![tool_result(m)]),
            Role::Assistant => ("assistant", assistant_blocks(m)),
        };
        if content.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some(last) if last.role == role => last.content.extend(content),
            _ => turns.push(wire::Message { role, content }),
        }
    }
    turns
}

/// An assistant turn: its reasoning (Claude's, as the Anthropic provider keeps it: no item id),
/// then its text, then its calls.
fn assistant_blocks(m: &Message) -> Vec<wire::ContentBlock> {
    let mut blocks: Vec<_> = m.reasoning.iter().filter(|r| r.id.is_empty()).map(reasoning_block).collect();
    blocks.extend(text_block(&m.content));
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

/// A tool result: its output as text, `status: error` when the tool failed.
fn tool_result(m: &Message) -> wire::ContentBlock {
    let content = text_block(&m.content).map(|_| wire::ToolResultContent::Text(m.content.clone()));
    wire::ContentBlock::ToolResult(wire::ToolResult {
        tool_use_id: m.tool_call_id.clone().unwrap_or_default(),
        content: content.into_iter().collect(),
        status: m.is_error.then_some("error"),
    })
}

/// A text block, or none for empty text (the API refuses blank text blocks).
fn text_block(text: &str) -> Option<wire::ContentBlock> {
    (!text.is_empty()).then(|| wire::ContentBlock::Text(text.to_string()))
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
        assert!(b.get("inferenceConfig").is_none() && b.get("toolConfig").is_none(), "{b}");
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
    fn no_model_is_an_error() {
        let d = Defaults { model: "", ..defaults(false) };
        assert!(matches!(request_body(&d, &ChatRequest::default()), Err(ProviderError::Invalid(_))));
    }
}
