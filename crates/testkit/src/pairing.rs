//! The pairing check on a request body: every tool call an assistant message made has exactly
//! one tool result, and the results follow the calls in call order — in OpenAI Chat
//! Completions bodies (`tool_calls` then `role: "tool"` messages) and Anthropic Messages
//! bodies (`tool_use` blocks then `tool_result` blocks at the start of the next user message).

use serde_json::Value;

/// The wire protocol of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// OpenAI Chat Completions (`POST .../chat/completions`).
    OpenAi,
    /// Anthropic Messages (`POST .../messages`).
    Anthropic,
}

impl Api {
    /// The protocol a request path belongs to, if any.
    pub fn from_path(path: &str) -> Option<Api> {
        let path = path.split('?').next().unwrap_or(path).trim_end_matches('/');
        if path.ends_with("/chat/completions") {
            Some(Api::OpenAi)
        } else if path.ends_with("/messages") {
            Some(Api::Anthropic)
        } else {
            None
        }
    }
}

/// How a request breaks the pairing of tool calls and results. `message` is the index in the
/// body's `messages` array where the problem shows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PairingError {
    /// A call got no result before the conversation went on (or the request ended).
    #[error("messages[{message}]: tool call `{call_id}` ({tool}) has no result")]
    MissingResult {
        /// Where the result was due.
        message: usize,
        /// The call.
        call_id: String,
        /// The tool it called.
        tool: String,
    },
    /// A result arrived where the result of an earlier call was due.
    #[error(
        "messages[{message}]: the result for `{found}` comes where the result for `{expected}` was due (results must follow the calls' order)"
    )]
    OutOfOrder {
        /// Where it arrived.
        message: usize,
        /// The call whose result was due.
        expected: String,
        /// The call it answers.
        found: String,
    },
    /// A call got a second result.
    #[error("messages[{message}]: a second result for tool call `{call_id}`")]
    DuplicateResult {
        /// Where the second result is.
        message: usize,
        /// The call.
        call_id: String,
    },
    /// A result answers no call of the assistant message before it.
    #[error("messages[{message}]: a result for `{call_id}`, which the preceding assistant message did not call")]
    UnknownCall {
        /// Where the result is.
        message: usize,
        /// The id it names.
        call_id: String,
    },
    /// The body is not a chat request of the protocol.
    #[error("not a {api:?} chat request: {detail}")]
    Malformed {
        /// The protocol it was read as.
        api: Api,
        /// What is missing.
        detail: String,
    },
}

/// One call, or one result, found in the body.
#[derive(Debug)]
enum Item {
    /// An assistant message's calls `(id, tool)`.
    Calls(Vec<(String, String)>),
    /// A result for a call id.
    Result(String),
    /// Any other message (breaks a run of results).
    Other,
}

/// Checks that every tool call in the request `body` has exactly one result, in call order.
/// Returns the first violation.
pub fn check_pairing(api: Api, body: &Value) -> Result<(), PairingError> {
    let messages = body["messages"]
        .as_array()
        .ok_or_else(|| PairingError::Malformed { api, detail: "no `messages` array".into() })?;
    let items = match api {
        Api::OpenAi => openai_items(messages),
        Api::Anthropic => anthropic_items(messages),
    };
    // The calls waiting for results, in order, and which of them are answered.
    let mut pending: Vec<(String, String)> = Vec::new();
    let mut answered: Vec<bool> = Vec::new();
    let mut due = 0usize;
    let close = |pending: &[(String, String)], due: usize, message: usize| match pending.get(due) {
        Some((id, tool)) => Err(PairingError::MissingResult { message, call_id: id.clone(), tool: tool.clone() }),
        None => Ok(()),
    };
    for (message, item) in items {
        match item {
            Item::Calls(calls) => {
                close(&pending, due, message)?;
                answered = vec![false; calls.len()];
                pending = calls;
                due = 0;
            }
            Item::Result(id) => match pending.iter().position(|(p, _)| *p == id) {
                None => return Err(PairingError::UnknownCall { message, call_id: id }),
                Some(i) if answered[i] => return Err(PairingError::DuplicateResult { message, call_id: id }),
                Some(i) if i != due => {
                    return Err(PairingError::OutOfOrder { message, expected: pending[due].0.clone(), found: id });
                }
                Some(i) => {
                    answered[i] = true;
                    due += 1;
                }
            },
            Item::Other => {
                close(&pending, due, message)?;
                pending.clear();
                answered.clear();
                due = 0;
            }
        }
    }
    close(&pending, due, messages.len())
}

/// OpenAI: `tool_calls` of assistant messages, `role: "tool"` results.
fn openai_items(messages: &[Value]) -> Vec<(usize, Item)> {
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let item = match m["role"].as_str() {
                Some("tool") => Item::Result(m["tool_call_id"].as_str().unwrap_or_default().to_string()),
                Some("assistant") => match m["tool_calls"].as_array() {
                    Some(calls) if !calls.is_empty() => Item::Calls(
                        calls
                            .iter()
                            .map(|c| {
                                let id = c["id"].as_str().unwrap_or_default().to_string();
                                (id, c["function"]["name"].as_str().unwrap_or_default().to_string())
                            })
                            .collect(),
                    ),
                    _ => Item::Other,
                },
                _ => Item::Other,
            };
            (i, item)
        })
        .collect()
}

/// Anthropic: `tool_use` blocks of assistant messages; `tool_result` blocks, which must open
/// the next user message (any other block ends the run of results).
fn anthropic_items(messages: &[Value]) -> Vec<(usize, Item)> {
    let mut items = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let blocks = m["content"].as_array().map(Vec::as_slice).unwrap_or_default();
        match m["role"].as_str() {
            Some("assistant") => {
                let calls: Vec<(String, String)> = blocks
                    .iter()
                    .filter(|b| b["type"] == "tool_use")
                    .map(|b| {
                        (
                            b["id"].as_str().unwrap_or_default().to_string(),
                            b["name"].as_str().unwrap_or_default().into(),
                        )
                    })
                    .collect();
                items.push((i, if calls.is_empty() { Item::Other } else { Item::Calls(calls) }));
            }
            Some("user") => {
                if blocks.is_empty() {
                    items.push((i, Item::Other));
                }
                for b in blocks {
                    if b["type"] == "tool_result" {
                        items.push((i, Item::Result(b["tool_use_id"].as_str().unwrap_or_default().to_string())));
                    } else {
                        items.push((i, Item::Other));
                    }
                }
            }
            _ => items.push((i, Item::Other)),
        }
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn openai(messages: Value) -> Value {
        json!({"model": "m", "messages": messages})
    }

    fn openai_calls(ids: &[&str]) -> Value {
        let calls: Vec<Value> = ids
            .iter()
            .map(|id| json!({"id": id, "type": "function", "function": {"name": "echo", "arguments": "{}"}}))
            .collect();
        json!({"role": "assistant", "content": null, "tool_calls": calls})
    }

    fn openai_result(id: &str) -> Value {
        json!({"role": "tool", "tool_call_id": id, "content": "ok"})
    }

    fn anthropic_calls(ids: &[&str]) -> Value {
        let blocks: Vec<Value> =
            ids.iter().map(|id| json!({"type": "tool_use", "id": id, "name": "echo", "input": {}})).collect();
        json!({"role": "assistant", "content": blocks})
    }

    fn anthropic_results(ids: &[&str]) -> Value {
        let blocks: Vec<Value> =
            ids.iter().map(|id| json!({"type": "tool_result", "tool_use_id": id, "content": "ok"})).collect();
        json!({"role": "user", "content": blocks})
    }

    #[test]
    fn paired_openai_and_anthropic_conversations_pass() {
        let body = openai(json!([
            {"role": "user", "content": "go"},
            openai_calls(&["a", "b"]), openai_result("a"), openai_result("b"),
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": "again"},
            openai_calls(&["c"]), openai_result("c")
        ]));
        assert_eq!(check_pairing(Api::OpenAi, &body), Ok(()));
        let body = json!({"messages": [
            {"role": "user", "content": "go"}, anthropic_calls(&["a", "b"]), anthropic_results(&["a", "b"])
        ]});
        assert_eq!(check_pairing(Api::Anthropic, &body), Ok(()));
    }

    #[test]
    fn a_missing_openai_result_is_named() {
        let body = openai(json!([
            {"role": "user", "content": "go"}, openai_calls(&["a", "b"]), openai_result("a"),
            {"role": "user", "content": "next"}
        ]));
        let err = check_pairing(Api::OpenAi, &body).unwrap_err();
        assert_eq!(err, PairingError::MissingResult { message: 3, call_id: "b".into(), tool: "echo".into() });
        assert_eq!(err.to_string(), "messages[3]: tool call `b` (echo) has no result");
    }

    #[test]
    fn a_request_ending_with_unanswered_calls_is_a_missing_result() {
        let body = openai(json!([{"role": "user", "content": "go"}, openai_calls(&["a"])]));
        assert!(matches!(check_pairing(Api::OpenAi, &body), Err(PairingError::MissingResult { message: 2, .. })));
    }

    #[test]
    fn out_of_order_results_are_caught() {
        let body = openai(json!([openai_calls(&["a", "b"]), openai_result("b"), openai_result("a")]));
        assert_eq!(
            check_pairing(Api::OpenAi, &body),
            Err(PairingError::OutOfOrder { message: 1, expected: "a".into(), found: "b".into() })
        );
        let body = json!({"messages": [anthropic_calls(&["a", "b"]), anthropic_results(&["b", "a"])]});
        let err = check_pairing(Api::Anthropic, &body).unwrap_err();
        assert!(err.to_string().contains("the result for `b` comes where the result for `a` was due"), "{err}");
    }

    #[test]
    fn duplicate_and_unknown_results_are_caught() {
        let body = openai(json!([openai_calls(&["a", "b"]), openai_result("a"), openai_result("a")]));
        assert_eq!(
            check_pairing(Api::OpenAi, &body),
            Err(PairingError::DuplicateResult { message: 2, call_id: "a".into() })
        );
        let body = openai(json!([{"role": "user", "content": "go"}, openai_result("zzz")]));
        assert_eq!(
            check_pairing(Api::OpenAi, &body),
            Err(PairingError::UnknownCall { message: 1, call_id: "zzz".into() })
        );
    }

    #[test]
    fn an_anthropic_result_must_open_the_next_user_message() {
        let body = json!({"messages": [
            anthropic_calls(&["a"]),
            {"role": "user", "content": [{"type": "text", "text": "first"}, {"type": "tool_result", "tool_use_id": "a"}]}
        ]});
        assert!(matches!(check_pairing(Api::Anthropic, &body), Err(PairingError::MissingResult { message: 1, .. })));
        let body = json!({"messages": [anthropic_calls(&["a"]), {"role": "user", "content": "plain text"}]});
        assert!(matches!(check_pairing(Api::Anthropic, &body), Err(PairingError::MissingResult { .. })));
    }

    #[test]
    fn a_body_without_messages_is_malformed() {
        assert!(matches!(check_pairing(Api::OpenAi, &json!({"input": "x"})), Err(PairingError::Malformed { .. })));
    }

    #[test]
    fn paths_name_their_protocol() {
        assert_eq!(Api::from_path("/v1/chat/completions"), Some(Api::OpenAi));
        assert_eq!(Api::from_path("/v1/messages?beta=true"), Some(Api::Anthropic));
        assert_eq!(Api::from_path("/v1/embeddings"), None);
    }
}
