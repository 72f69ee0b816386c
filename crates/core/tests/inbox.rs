//! The inbox of a run under way: messages put in while a tool runs reach the model at its next
//! call, in order, as user messages of the transcript (and its log), each announced by an event;
//! what the run never took stays in the inbox.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use async_trait::async_trait;
use recursive_core::{
    Agent, Budget, Inbox, InboxEvent, MemorySink, Message, MockProvider, MockReply, Role, RunScope, Tool, ToolContext,
    ToolError, ToolRegistry, ToolSpec, TranscriptLog,
};
use serde_json::{Value, json};

/// A tool during which the person steers: it puts messages in the inbox.
struct Steer(Inbox);

#[async_trait]
impl Tool for Steer {
    fn spec(&self) -> ToolSpec {
        ToolSpec { name: "steer".into(), description: "Steers.".into(), parameters: json!({"type": "object"}) }
    }
    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        self.0.push("use tabs");
        self.0.push("and keep it short");
        Ok("done".into())
    }
}

fn agent(provider: &MockProvider, inbox: &Inbox) -> Agent {
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(Steer(inbox.clone())));
    Agent::new(Arc::new(provider.clone())).with_tools(tools).with_inbox(inbox.clone())
}

fn user_texts(messages: &[Message]) -> Vec<&str> {
    messages.iter().filter(|m| m.role == Role::User).map(|m| m.content.as_str()).collect()
}

#[tokio::test]
async fn messages_put_in_during_a_tool_reach_the_next_model_call_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("transcript.jsonl");
    let inbox = Inbox::new();
    let provider = MockProvider::new([MockReply::tool("steer", json!({})), MockReply::text("tabs it is")]);
    let sink = MemorySink::new();
    let scope = RunScope::root("main", Arc::new(sink.clone()), Arc::new(Budget::unlimited()));
    let mut agent = agent(&provider, &inbox);
    agent.config_mut().transcript_path = Some(path.clone());
    let result = agent.run_in("fix the file", &scope).await.unwrap();

    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(user_texts(&requests[0].messages), ["fix the file"]);
    let second = &requests[1].messages;
    let roles: Vec<Role> = second.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool, Role::User, Role::User], "{second:?}");
    assert_eq!(user_texts(second), ["fix the file", "use tabs", "and keep it short"]);
    // Recorded in the transcript and its log.
    assert_eq!(user_texts(&result.messages), ["fix the file", "use tabs", "and keep it short"]);
    let saved = TranscriptLog::read(&path).unwrap();
    assert_eq!(user_texts(saved.messages()), ["fix the file", "use tabs", "and keep it short"]);
    // Announced, in order.
    let delivered: Vec<String> = sink
        .events()
        .iter()
        .filter_map(|e| match e.kind.extension::<InboxEvent>() {
            Some(InboxEvent::Delivered { text }) => Some(text),
            _ => None,
        })
        .collect();
    assert_eq!(delivered, ["use tabs", "and keep it short"]);
    assert!(inbox.is_empty());
}

#[tokio::test]
async fn a_message_the_run_never_took_stays_in_the_inbox() {
    let inbox = Inbox::new();
    let late = inbox.clone();
    // The message arrives during the last model call: the run ends without another.
    let provider = MockProvider::with_handler(move |_| {
        late.push("too late");
        Ok(recursive_core::ChatResponse {
            message: Message::assistant("all done"),
            stop_reason: recursive_core::StopReason::EndTurn,
            usage: Default::default(),
            cost_usd: None,
            model: "mock".into(),
        })
    });
    let result = agent(&provider, &inbox).run("go").await.unwrap();
    assert_eq!(user_texts(&result.messages), ["go"]);
    assert_eq!(inbox.take(), ["too late"]);
}
