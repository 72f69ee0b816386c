//! The fixtures the official MCP conformance suite (`@modelcontextprotocol/conformance`) reads
//! by name — static content of every kind (image, audio, embedded resources), `test://`
//! resources and a template, prompts with images and embedded resources, and elicitation forms
//! with defaults and enums — offered only when the environment variable [`ENV`] is `1`, so the
//! suite can check the server's resources, prompts, completion and content shapes end to end.
//! A server never offers them otherwise. What the suite checks of tools that run (text, progress,
//! logging, errors, elicitation of a permission ask) is checked on real served runnables instead.

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, ElicitRequestParams, ElicitationSchema, GetPromptResult,
    PromptArgument, PromptMessage, ReadResourceResult, Resource, ResourceContents, ResourceTemplate, Role, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use serde_json::{Map, Value, json};

/// The variable that turns the fixtures on.
pub const ENV: &str = "RECURSIVE_MCP_CONFORMANCE_FIXTURES";

/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC";
/// A short silent WAV.
const WAV: &str = "UklGRjQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YRAAAAAAAAAAAAAAAAAAAAAAAAAA";

/// Whether [`ENV`] turns the fixtures on.
pub fn enabled() -> bool {
    recursive_core::env::var(ENV).is_some_and(|v| v.trim() == "1")
}

fn no_arguments() -> std::sync::Arc<Map<String, Value>> {
    let Value::Object(schema) = json!({"type": "object", "properties": {}}) else { return Default::default() };
    std::sync::Arc::new(schema)
}

const TOOLS: &[(&str, &str)] = &[
    ("test_image_content", "Returns an image."),
    ("test_audio_content", "Returns audio."),
    ("test_embedded_resource", "Returns an embedded resource."),
    ("test_multiple_content_types", "Returns text, an image and an embedded resource."),
    ("test_elicitation_sep1034_defaults", "Asks the client in a form whose fields have defaults."),
    ("test_elicitation_sep1330_enums", "Asks the client in a form with every kind of enum."),
];

/// The fixture tools.
pub fn tools() -> Vec<Tool> {
    TOOLS.iter().map(|(name, description)| Tool::new(*name, *description, no_arguments())).collect()
}

fn mixed_resource() -> ContentBlock {
    ContentBlock::resource(
        ResourceContents::text(r#"{"test":"data","value":123}"#, "test://mixed-content-resource")
            .with_mime_type("application/json"),
    )
}

/// The result of a fixture tool call, or `None` when `params` names none.
pub async fn call(params: &CallToolRequestParams, context: &RequestContext<RoleServer>) -> Option<CallToolResult> {
    let content = match params.name.as_ref() {
        "test_image_content" => vec![ContentBlock::image(PNG, "image/png")],
        "test_audio_content" => vec![ContentBlock::audio(WAV, "audio/wav")],
        "test_embedded_resource" => {
            vec![ContentBlock::embedded_text("test://embedded-resource", "This is an embedded resource content.")]
        }
        "test_multiple_content_types" => vec![
            ContentBlock::text("Multiple content types test:"),
            ContentBlock::image(PNG, "image/png"),
            mixed_resource(),
        ],
        "test_elicitation_sep1034_defaults" => vec![ContentBlock::text(elicit(&context.peer, defaults_form()).await)],
        "test_elicitation_sep1330_enums" => vec![ContentBlock::text(elicit(&context.peer, enums_form()).await)],
        _ => return None,
    };
    Some(CallToolResult::success(content))
}

fn defaults_form() -> Value {
    json!({"type": "object", "properties": {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {"type": "string", "description": "User status", "enum": ["active", "inactive", "pending"],
                   "default": "active"},
        "verified": {"type": "boolean", "description": "Verification status", "default": true}
    }})
}

fn enums_form() -> Value {
    json!({"type": "object", "properties": {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {"type": "string", "oneOf": [
            {"const": "value1", "title": "First Option"}, {"const": "value2", "title": "Second Option"},
            {"const": "value3", "title": "Third Option"}]},
        "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                       "enumNames": ["Option One", "Option Two", "Option Three"]},
        "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
        "titledMulti": {"type": "array", "items": {"anyOf": [
            {"const": "value1", "title": "First Choice"}, {"const": "value2", "title": "Second Choice"},
            {"const": "value3", "title": "Third Choice"}]}}
    }})
}

/// Asks the client in the form `schema`; what it answered, as text.
async fn elicit(peer: &Peer<RoleServer>, schema: Value) -> String {
    let schema: ElicitationSchema = match serde_json::from_value(schema) {
        Ok(s) => s,
        Err(e) => return format!("the form does not fit MCP's elicitation schema: {e}"),
    };
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: "Please review and submit the form.".into(),
        requested_schema: schema,
    };
    match peer.create_elicitation(params).await {
        Ok(result) => format!(
            "Elicitation completed: action={}, content={}",
            serde_json::to_value(result.action).unwrap_or_default(),
            result.content.unwrap_or_default()
        ),
        Err(e) => format!("Elicitation failed: {e}"),
    }
}

/// The fixture resources.
pub fn resources() -> Vec<Resource> {
    vec![
        Resource::new("test://static-text", "static-text").with_mime_type("text/plain"),
        Resource::new("test://static-binary", "static-binary").with_mime_type("image/png"),
        Resource::new("test://watched-resource", "watched-resource").with_mime_type("text/plain"),
    ]
}

/// The fixture templates.
pub fn templates() -> Vec<ResourceTemplate> {
    vec![ResourceTemplate::new("test://template/{id}/data", "template-data").with_mime_type("application/json")]
}

/// A fixture resource's contents, or `None` when `uri` names none.
pub fn read(uri: &str) -> Option<ReadResourceResult> {
    let contents = match uri {
        "test://static-text" => ResourceContents::text("This is the content of the static text resource.", uri),
        "test://static-binary" => ResourceContents::blob(PNG, uri).with_mime_type("image/png"),
        "test://watched-resource" => ResourceContents::text("Watched.", uri),
        _ => {
            let id = uri.strip_prefix("test://template/")?.strip_suffix("/data")?;
            let body = json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
            ResourceContents::text(body.to_string(), uri).with_mime_type("application/json")
        }
    };
    Some(ReadResourceResult::new(vec![contents]))
}

/// Whether `uri` is a fixture a client may subscribe to.
pub fn subscribable(uri: &str) -> bool {
    uri.starts_with("test://")
}

const PROMPTS: &[&str] = &[
    "test_simple_prompt",
    "test_prompt_with_arguments",
    "test_prompt_with_embedded_resource",
    "test_prompt_with_image",
];

/// Whether `name` is a fixture prompt.
pub fn is_prompt(name: &str) -> bool {
    PROMPTS.contains(&name)
}

/// The fixture prompts.
pub fn prompts() -> Vec<rmcp::model::Prompt> {
    let arg = |name: &str| PromptArgument::new(name).with_required(true);
    vec![
        rmcp::model::Prompt::new(PROMPTS[0], Some("A prompt without arguments."), None),
        rmcp::model::Prompt::new(
            PROMPTS[1],
            Some("A prompt with two arguments."),
            Some(vec![arg("arg1"), arg("arg2")]),
        ),
        rmcp::model::Prompt::new(PROMPTS[2], Some("A prompt embedding a resource."), Some(vec![arg("resourceUri")])),
        rmcp::model::Prompt::new(PROMPTS[3], Some("A prompt with an image."), None),
    ]
}

/// A fixture prompt, or `None` when `name` names none.
pub fn prompt(name: &str, arguments: Option<&Map<String, Value>>) -> Option<GetPromptResult> {
    let arg = |key: &str| arguments.and_then(|a| a.get(key)).and_then(Value::as_str).unwrap_or_default().to_string();
    let messages = match name {
        "test_simple_prompt" => vec![PromptMessage::new_text(Role::User, "This is a simple prompt for testing.")],
        "test_prompt_with_arguments" => vec![PromptMessage::new_text(
            Role::User,
            format!("Prompt with arguments: arg1='{}', arg2='{}'", arg("arg1"), arg("arg2")),
        )],
        "test_prompt_with_embedded_resource" => vec![
            PromptMessage::new(
                Role::User,
                ContentBlock::embedded_text(arg("resourceUri"), "Embedded resource content for testing."),
            ),
            PromptMessage::new_text(Role::User, "Please process the embedded resource above."),
        ],
        "test_prompt_with_image" => vec![
            PromptMessage::new(Role::User, ContentBlock::image(PNG, "image/png")),
            PromptMessage::new_text(Role::User, "Please analyze the image above."),
        ],
        _ => return None,
    };
    Some(GetPromptResult::new(messages))
}

/// Completions of a fixture prompt's argument.
pub fn complete(_argument: &str, value: &str) -> Vec<String> {
    ["test", "testing", "tested"].iter().filter(|v| v.starts_with(value)).map(|v| v.to_string()).collect()
}
