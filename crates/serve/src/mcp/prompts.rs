//! MCP prompts: one per served runnable (`run`, `rlm`, `goal` and every named one), named like
//! its tool, whose arguments are its input schema's properties. Getting a prompt gives the user
//! message that asks for what the runnable does — its main input (`input`, `goal`, `question` or
//! `objective`) followed by the other arguments given — for a client to put in a conversation.
//! Arguments whose schema names the values (`enum`, booleans) complete.

use rmcp::ErrorData as McpError;
use rmcp::model::{GetPromptResult, Prompt, PromptArgument, PromptMessage, Role, Tool};
use serde_json::{Map, Value};

use crate::server::Server;

/// The arguments that carry a runnable's main input, in the order they are looked for.
const MAIN: &[&str] = &["input", "goal", "question", "objective"];

fn properties(tool: &Tool) -> Vec<(String, Value)> {
    match tool.input_schema.get("properties") {
        Some(Value::Object(p)) => p.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        _ => Vec::new(),
    }
}

fn required(tool: &Tool) -> Vec<String> {
    match tool.input_schema.get("required") {
        Some(Value::Array(names)) => names.iter().filter_map(|n| n.as_str().map(str::to_string)).collect(),
        _ => Vec::new(),
    }
}

/// The prompt of a runnable's tool.
fn prompt_of(tool: &Tool) -> Prompt {
    let required = required(tool);
    let arguments = properties(tool)
        .into_iter()
        .map(|(name, schema)| {
            let mut argument = PromptArgument::new(name.clone()).with_required(required.contains(&name));
            if let Some(description) = schema.get("description").and_then(Value::as_str) {
                argument = argument.with_description(description);
            }
            argument
        })
        .collect();
    let mut prompt = Prompt::new(tool.name.to_string(), tool.description.as_deref(), Some(arguments));
    prompt.title = tool.annotations.as_ref().and_then(|a| a.title.clone());
    prompt
}

/// Every prompt the server offers.
pub fn list(server: &Server) -> Vec<Prompt> {
    super::tools(&server.runner.offered()).iter().map(prompt_of).collect()
}

fn tool(server: &Server, name: &str) -> Result<Tool, McpError> {
    let tools = super::tools(&server.runner.offered());
    let names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    tools.into_iter().find(|t| t.name == name).ok_or_else(|| {
        McpError::invalid_params(format!("no prompt `{name}`; the prompts are {}", names.join(", ")), None)
    })
}

/// The prompt `name` with `arguments`.
pub fn get(server: &Server, name: &str, arguments: Option<&Map<String, Value>>) -> Result<GetPromptResult, McpError> {
    let tool = tool(server, name)?;
    let given = arguments.cloned().unwrap_or_default();
    let known: Vec<String> = properties(&tool).into_iter().map(|(k, _)| k).collect();
    if let Some(unknown) = given.keys().find(|k| !known.contains(k)) {
        let message =
            format!("the prompt `{name}` has no argument `{unknown}`; its arguments are {}", known.join(", "));
        return Err(McpError::invalid_params(message, None));
    }
    let missing: Vec<String> = required(&tool).into_iter().filter(|r| !given.contains_key(r)).collect();
    if !missing.is_empty() {
        let message = format!("the prompt `{name}` needs the argument(s) {}", missing.join(", "));
        return Err(McpError::invalid_params(message, None));
    }
    let text_of = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let main = MAIN.iter().find(|m| given.contains_key(**m)).copied();
    let mut text = main.and_then(|m| given.get(m)).map(text_of).unwrap_or_default();
    for (key, value) in given.iter().filter(|(k, _)| Some(k.as_str()) != main) {
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        text.push_str(&format!("{key}:\n{}", text_of(value)));
    }
    let mut result = GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)]);
    if let Some(description) = &tool.description {
        result = result.with_description(description.to_string());
    }
    Ok(result)
}

/// Completions of argument `argument` of prompt `name` that start with `value`: the values its
/// schema names.
pub fn complete(server: &Server, name: &str, argument: &str, value: &str) -> Result<Vec<String>, McpError> {
    let tool = tool(server, name)?;
    let Some((_, schema)) = properties(&tool).into_iter().find(|(k, _)| k == argument) else {
        return Err(McpError::invalid_params(format!("the prompt `{name}` has no argument `{argument}`"), None));
    };
    let mut values: Vec<String> = match (schema.get("enum"), schema.get("type").and_then(Value::as_str)) {
        (Some(Value::Array(items)), _) => {
            items.iter().map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string)).collect()
        }
        (_, Some("boolean")) => vec!["true".into(), "false".into()],
        _ => Vec::new(),
    };
    values.retain(|v| v.starts_with(value));
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool_with(schema: Value) -> Tool {
        let Value::Object(schema) = schema else { panic!() };
        Tool::new("pick", "Picks.", std::sync::Arc::new(schema))
    }

    #[test]
    fn a_prompts_arguments_are_its_runnables_input_properties() {
        let tool = tool_with(serde_json::json!({"type": "object", "properties": {
            "input": {"type": "string", "description": "What to pick from."},
            "colour": {"type": "string", "enum": ["red", "green"]}
        }, "required": ["input"]}));
        let prompt = serde_json::to_value(prompt_of(&tool)).unwrap();
        assert_eq!(prompt["name"], "pick");
        assert_eq!(prompt["description"], "Picks.");
        let args = prompt["arguments"].as_array().unwrap();
        let input = args.iter().find(|a| a["name"] == "input").unwrap();
        assert_eq!(input["required"], true);
        assert_eq!(input["description"], "What to pick from.");
        assert_eq!(args.iter().find(|a| a["name"] == "colour").unwrap()["required"], false);
    }
}
