//! A served run's permission asks put to the person behind the MCP client, as elicitation: when
//! a run started by a tool call asks (an `ask` event, on a server that waits for its clients'
//! answers) and the client declared the elicitation capability, the server sends it an
//! `elicitation/create` request describing the call; the client's answer is the person's —
//! accept allows the call (unless the form says otherwise), decline and cancel deny it — and goes
//! on the server's [`AnswerBoard`] like an answer over HTTP. A client
//! without the capability can still answer at `/v1/runs/{id}/asks/{ask}`, as before.

use std::sync::Arc;
use std::time::Duration;

use recursive_core::{AgentEvent, AnswerBoard, ClientAnswer, EventKind};
use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema};
use rmcp::service::ElicitationMode;
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};

/// One permission ask of a run, as read from its `ask` event.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// The question's id on the answer board.
    pub id: String,
    /// The tool the run wants to call.
    pub tool: String,
    /// The call's arguments.
    pub arguments: Value,
    /// Which rule or default asked.
    pub reason: String,
    /// How long the answer is awaited.
    pub timeout: Duration,
}

/// The ask a recorded event carries, if it is an `ask` event.
pub fn ask_of(recorded: &str) -> Option<Ask> {
    // Events are recorded as compact JSON: most are not asks, and are not parsed again.
    if !recorded.contains(r#""type":"ask""#) {
        return None;
    }
    let event: AgentEvent = serde_json::from_str(recorded).ok()?;
    match event.kind {
        EventKind::Ask { ask, name, arguments, reason, timeout_ms, .. } => {
            Some(Ask { id: ask, tool: name, arguments, reason, timeout: Duration::from_millis(timeout_ms) })
        }
        _ => None,
    }
}

/// Whether the client can be asked in a form.
pub fn client_can_elicit(peer: &Peer<RoleServer>) -> bool {
    peer.supported_elicitation_modes().contains(&ElicitationMode::Form)
}

/// The most characters of a call's arguments shown in the question.
const SHOWN_ARGUMENTS: usize = 2_000;

/// The elicitation request for `ask` of run `run`.
pub fn request(run: &str, ask: &Ask) -> Result<ElicitRequestParams, String> {
    let mut arguments = ask.arguments.to_string();
    if let Some((at, _)) = arguments.char_indices().nth(SHOWN_ARGUMENTS) {
        arguments.truncate(at);
        arguments.push('…');
    }
    let message =
        format!("Run {run} wants to call the tool `{}` with {arguments} ({}). Allow it?", ask.tool, ask.reason);
    let schema: ElicitationSchema = serde_json::from_value(json!({
        "type": "object",
        "properties": {
            "allow": {
                "type": "boolean",
                "title": "Allow this call",
                "description": "Let the run make this tool call.",
                "default": true
            },
            "reason": {
                "type": "string",
                "title": "Reason",
                "description": "Why not (the model reads it when the call is denied)."
            }
        }
    }))
    .map_err(|e| format!("the elicitation form: {e}"))?;
    Ok(ElicitRequestParams::FormElicitationParams { meta: None, message, requested_schema: schema })
}

/// The person's answer in an elicitation result.
pub fn answer_of(result: &ElicitResult) -> ClientAnswer {
    let said = |field: &str| result.content.as_ref().and_then(|c| c.get(field).cloned());
    let reason = said("reason").and_then(|r| r.as_str().map(str::trim).map(str::to_string)).filter(|r| !r.is_empty());
    match result.action {
        ElicitationAction::Accept => {
            let allow = said("allow").and_then(|a| a.as_bool()).unwrap_or(true);
            ClientAnswer { allow, reason: if allow { None } else { reason.or(Some("denied by the person".into())) } }
        }
        ElicitationAction::Decline => {
            ClientAnswer { allow: false, reason: Some(reason.unwrap_or_else(|| "declined by the person".into())) }
        }
        _ => ClientAnswer { allow: false, reason: Some("the person dismissed the question without answering".into()) },
    }
}

/// Puts `ask` of run `run` to the client and answers it on `board` with what the person said.
/// An elicitation that fails (the client errs, or the time runs out) leaves the question open:
/// it is then denied when its own time runs out, as an unanswered ask is.
pub async fn put(peer: Peer<RoleServer>, board: Arc<AnswerBoard>, run: String, ask: Ask) {
    let params = match request(&run, &ask) {
        Ok(p) => p,
        Err(e) => return tracing::warn!("asking the MCP client: {e}"),
    };
    match peer.create_elicitation_with_timeout(params, Some(ask.timeout)).await {
        Ok(result) => {
            board.answer(&ask.id, answer_of(&result));
        }
        Err(e) => tracing::debug!("the MCP client did not answer the ask {}: {e}", ask.id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(action: ElicitationAction, content: Option<Value>) -> ElicitResult {
        let mut r = ElicitResult::new(action);
        r.content = content;
        r
    }

    #[test]
    fn an_accepted_elicitation_allows_the_call_unless_the_form_says_no() {
        assert_eq!(answer_of(&result(ElicitationAction::Accept, None)), ClientAnswer { allow: true, reason: None });
        let yes = result(ElicitationAction::Accept, Some(json!({"allow": true, "reason": "fine"})));
        assert_eq!(answer_of(&yes), ClientAnswer { allow: true, reason: None });
        let no = result(ElicitationAction::Accept, Some(json!({"allow": false, "reason": "not there"})));
        assert_eq!(answer_of(&no), ClientAnswer { allow: false, reason: Some("not there".into()) });
    }

    #[test]
    fn a_declined_or_cancelled_elicitation_denies_the_call_with_why() {
        let declined = answer_of(&result(ElicitationAction::Decline, None));
        assert!(!declined.allow);
        assert_eq!(declined.reason.as_deref(), Some("declined by the person"));
        let cancelled = answer_of(&result(ElicitationAction::Cancel, None));
        assert!(!cancelled.allow);
        assert!(cancelled.reason.unwrap().contains("dismissed"));
    }

    #[test]
    fn the_question_names_the_tool_and_its_arguments_and_asks_in_a_form() {
        let ask = Ask {
            id: "ask_1".into(),
            tool: "write_file".into(),
            arguments: json!({"path": "x.txt", "content": "y".repeat(5_000)}),
            reason: "the default for writes is ask".into(),
            timeout: Duration::from_secs(3),
        };
        let params = serde_json::to_value(request("run_1", &ask).unwrap()).unwrap();
        let message = params["message"].as_str().unwrap();
        assert!(
            message.contains("`write_file`") && message.contains("x.txt") && message.contains("run_1"),
            "{message}"
        );
        assert!(message.chars().count() < 2_300, "long arguments are cut: {}", message.len());
        assert_eq!(params["requestedSchema"]["properties"]["allow"]["type"], "boolean", "{params}");
        assert_eq!(params["mode"], "form", "{params}");
    }

    #[test]
    fn an_ask_event_is_read_from_its_record_and_other_events_are_not_asks() {
        let event = json!({
            "timestamp": "2026-01-01T00:00:00Z", "run_id": "r", "root_run_id": "r", "depth": 0,
            "run_name": "main", "step": 1, "type": "ask", "ask": "ask_9", "id": "call_1",
            "name": "write_file", "arguments": {"path": "a"}, "reason": "asks", "timeout_ms": 1500
        });
        let ask = ask_of(&event.to_string()).unwrap();
        assert_eq!((ask.id.as_str(), ask.tool.as_str()), ("ask_9", "write_file"));
        assert_eq!(ask.timeout, Duration::from_millis(1500));
        assert!(ask_of(r#"{"type": "error", "message": "x"}"#).is_none());
    }
}
