//! A caller's asks of an agent run: client tools end the run with their calls pending (the
//! agent's own calls answered first), the caller's results continue it without a new user
//! message, model settings lie over the agent's, and a checked answer is redone or refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use async_trait::async_trait;
use recursive_core::{
    Agent, AnswerCheck, Asks, ChatOptions, CheckAnswer, FinishReason, Message, MockProvider, MockReply, Role, RunInput,
    RunScope, Runnable, Tool, ToolContext, ToolError, ToolRegistry, ToolSpec,
};
use serde_json::{Value, json};

struct Clock;

#[async_trait]
impl Tool for Clock {
    fn spec(&self) -> ToolSpec {
        ToolSpec { name: "clock".into(), description: "The time.".into(), parameters: json!({"type": "object"}) }
    }
    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        Ok("12:00".into())
    }
}

fn weather() -> ToolSpec {
    ToolSpec {
        name: "weather".into(),
        description: "The weather in a city (the client runs it).".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    }
}

fn agent(provider: &MockProvider) -> Agent {
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(Clock));
    Agent::new(Arc::new(provider.clone())).with_tools(tools)
}

fn with_tools(text: &str, history: Vec<Message>) -> RunInput {
    RunInput {
        text: text.into(),
        history,
        asks: Asks { tools: vec![weather()], ..Default::default() },
        ..Default::default()
    }
}

#[tokio::test]
async fn a_client_tool_call_ends_the_run_after_the_agents_own_calls_of_that_turn() {
    let provider = MockProvider::new([MockReply::ToolCalls(vec![
        ("weather".into(), json!({"city": "Oslo"})),
        ("clock".into(), json!({})),
    ])]);
    let scope = RunScope::detached("t");
    let outcome = Runnable::run(&agent(&provider), with_tools("Weather and time?", Vec::new()), &scope).await;
    assert_eq!(outcome.finish_reason, FinishReason::ClientToolCalls, "{outcome:?}");
    assert!(outcome.is_success());
    let request = &provider.requests()[0];
    let offered: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(offered, ["clock", "weather"]);
    let assistant = outcome.messages.iter().rfind(|m| m.role == Role::Assistant).unwrap();
    let order: Vec<&str> = assistant.tool_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(order, ["clock", "weather"], "own calls first");
    let last = outcome.messages.last().unwrap();
    assert_eq!((last.role, last.content.as_str()), (Role::Tool, "12:00"));
    assert_eq!(provider.request_count(), 1);
}

#[tokio::test]
async fn the_callers_results_continue_the_run_without_a_new_user_message() {
    let provider = MockProvider::new([
        MockReply::tool("weather", json!({"city": "Oslo"})),
        MockReply::text("It is sunny in Oslo."),
    ]);
    let scope = RunScope::detached("t");
    let first = Runnable::run(&agent(&provider), with_tools("Weather?", Vec::new()), &scope).await;
    assert_eq!(first.finish_reason, FinishReason::ClientToolCalls);
    let call = first.messages.last().unwrap().tool_calls[0].id.clone();
    let mut history = first.messages.clone();
    history.push(Message::tool_result(call, "sunny", false));
    let second = Runnable::run(&agent(&provider), with_tools("", history), &RunScope::detached("t")).await;
    assert_eq!(second.finish_reason, FinishReason::NoMoreToolCalls, "{second:?}");
    assert_eq!(second.text, "It is sunny in Oslo.");
    let sent = &provider.requests()[1].messages;
    assert_eq!(sent.last().unwrap().role, Role::Tool, "no user message after the results");
    assert_eq!(sent.iter().filter(|m| m.role == Role::User).count(), 1);
}

#[tokio::test]
async fn a_client_tool_named_like_an_own_tool_is_a_fault() {
    let provider = MockProvider::new([MockReply::text("never")]);
    let mut clash = weather();
    clash.name = "clock".into();
    let input =
        RunInput { text: "hi".into(), asks: Asks { tools: vec![clash], ..Default::default() }, ..Default::default() };
    let outcome = Runnable::run(&agent(&provider), input, &RunScope::detached("t")).await;
    assert_eq!(outcome.finish_reason, FinishReason::Fault);
    assert!(outcome.error.unwrap().contains("`clock`"));
    assert_eq!(provider.request_count(), 0);
}

#[tokio::test]
async fn the_callers_model_settings_reach_every_model_call() {
    let provider = MockProvider::new([MockReply::tool("clock", json!({})), MockReply::text("noon")]);
    let options =
        ChatOptions { temperature: Some(0.25), max_tokens: Some(64), stop: vec!["END".into()], ..Default::default() };
    let input = RunInput { text: "time?".into(), asks: Asks { options, ..Default::default() }, ..Default::default() };
    let outcome = Runnable::run(&agent(&provider), input, &RunScope::detached("t")).await;
    assert_eq!(outcome.finish_reason, FinishReason::NoMoreToolCalls);
    for request in provider.requests() {
        assert_eq!(request.options.temperature, Some(0.25));
        assert_eq!(request.options.max_tokens, Some(64));
        assert_eq!(request.options.stop, ["END"]);
    }
}

struct IsNumber;

impl CheckAnswer for IsNumber {
    fn check(&self, text: &str) -> Result<(), String> {
        text.trim().parse::<f64>().map(|_| ()).map_err(|_| format!("`{text}` is not a number"))
    }
}

fn checked(text: &str) -> RunInput {
    let check = Some(AnswerCheck(Arc::new(IsNumber)));
    RunInput { text: text.into(), asks: Asks { check, ..Default::default() }, ..Default::default() }
}

#[tokio::test]
async fn an_answer_that_fails_its_check_is_sent_back_and_redone() {
    let provider = MockProvider::new([MockReply::text("forty-two"), MockReply::text("42")]);
    let outcome = Runnable::run(&agent(&provider), checked("The answer?"), &RunScope::detached("t")).await;
    assert_eq!(outcome.finish_reason, FinishReason::NoMoreToolCalls);
    assert_eq!(outcome.text, "42");
    let repair = provider.requests()[1].messages.last().unwrap().clone();
    assert_eq!(repair.role, Role::User);
    assert!(repair.content.contains("`forty-two` is not a number"), "{}", repair.content);
}

#[tokio::test]
async fn an_answer_that_keeps_failing_its_check_ends_without_an_answer() {
    let provider = MockProvider::new((0..3).map(|i| MockReply::text(format!("no {i}"))));
    let outcome = Runnable::run(&agent(&provider), checked("The answer?"), &RunScope::detached("t")).await;
    assert_eq!(outcome.finish_reason, FinishReason::NoAnswer);
    assert!(!outcome.is_success());
    assert_eq!(provider.request_count(), 3);
}
