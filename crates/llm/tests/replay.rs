//! Record and replay: an agent run recorded through a scripted provider replays offline with
//! identical results; requests are matched by content (any order); a request the cassette
//! does not hold fails with a message that shows where it differs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use common::collect;
use recursive_core::{
    Agent, ChatProvider, ChatRequest, FinishReason, Message, ProviderError, ToolContext, ToolError, ToolRegistry,
    TypedTool,
};
use recursive_llm::mock::{MockProvider, MockReply};
use recursive_llm::{LlmError, RecordingProvider, ReplayProvider};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct WeatherArgs {
    /// City name.
    city: String,
}

struct Weather;

#[async_trait]
impl TypedTool for Weather {
    type Args = WeatherArgs;
    fn name(&self) -> &str {
        "get_weather"
    }
    fn description(&self) -> String {
        "Current weather of a city.".into()
    }
    async fn run(&self, args: WeatherArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        Ok(format!("sunny in {}", args.city))
    }
}

fn agent(provider: Arc<dyn ChatProvider>) -> Agent {
    let mut tools = ToolRegistry::new();
    tools.register_typed(Weather);
    Agent::new(provider).with_tools(tools)
}

fn scripted() -> MockProvider {
    MockProvider::new([
        MockReply::tool("get_weather", json!({"city": "Paris"})),
        MockReply::text("It is sunny in Paris."),
    ])
}

#[tokio::test]
async fn a_recorded_run_replays_with_identical_results() {
    let dir = tempfile::tempdir().unwrap();
    let cassette = dir.path().join("cassettes/weather.jsonl");
    let recorder = RecordingProvider::new(Arc::new(scripted()), &cassette).unwrap();
    let recorded = agent(Arc::new(recorder)).run("Weather in Paris?").await.unwrap();
    assert_eq!(recorded.finish_reason, FinishReason::NoMoreToolCalls);
    assert_eq!(std::fs::read_to_string(&cassette).unwrap().lines().count(), 2);

    let replay = Arc::new(ReplayProvider::open(&cassette).unwrap());
    let replayed = agent(replay.clone()).run("Weather in Paris?").await.unwrap();
    assert_eq!(replayed.messages, recorded.messages);
    assert_eq!(replayed.output, "It is sunny in Paris.");
    assert_eq!(replayed.usage, recorded.usage);
    assert_eq!(replay.remaining(), 0);
}

#[tokio::test]
async fn replayed_responses_equal_the_recorded_ones_and_stream_as_deltas() {
    let dir = tempfile::tempdir().unwrap();
    let cassette = dir.path().join("c.jsonl");
    let recorder =
        RecordingProvider::new(Arc::new(MockProvider::new([MockReply::text("one two three")])), &cassette).unwrap();
    let request = ChatRequest { messages: vec![Message::user("count")], ..Default::default() };
    let original = recorder.complete(request.clone()).await.unwrap();

    let replay = ReplayProvider::open(&cassette).unwrap();
    let got = collect(replay.stream(request).await.unwrap()).await;
    assert_eq!(got.response.as_ref(), Some(&original));
    assert_eq!(got.deltas, vec!["one", " two", " three"]);
}

#[tokio::test]
async fn requests_match_by_content_in_any_order() {
    let dir = tempfile::tempdir().unwrap();
    let cassette = dir.path().join("c.jsonl");
    let echo = MockProvider::with_handler(|req| {
        let mock = MockProvider::default();
        Ok(mock.text_response(format!("echo: {}", req.messages[0].content)))
    });
    let recorder = RecordingProvider::new(Arc::new(echo), &cassette).unwrap();
    let ask = |text: &str| ChatRequest { messages: vec![Message::user(text)], ..Default::default() };
    recorder.complete(ask("a")).await.unwrap();
    recorder.complete(ask("b")).await.unwrap();

    let replay = ReplayProvider::open(&cassette).unwrap();
    assert_eq!(replay.complete(ask("b")).await.unwrap().message.content, "echo: b");
    assert_eq!(replay.complete(ask("a")).await.unwrap().message.content, "echo: a");
    let again = replay.complete(ask("a")).await.unwrap_err();
    assert!(again.to_string().contains("already used"), "{again}");
}

#[tokio::test]
async fn an_unrecorded_request_fails_with_a_clear_difference() {
    let dir = tempfile::tempdir().unwrap();
    let cassette = dir.path().join("weather.jsonl");
    let recorder = RecordingProvider::new(Arc::new(scripted()), &cassette).unwrap();
    agent(Arc::new(recorder)).run("Weather in Paris?").await.unwrap();

    let replay = Arc::new(ReplayProvider::open(&cassette).unwrap());
    let err = agent(replay).run("Weather in Rome?").await.unwrap_err();
    let message = err.to_string();
    assert!(message.contains("has no recorded interaction for this request"), "{message}");
    assert!(message.contains(&cassette.display().to_string()), "{message}");
    assert!(message.contains("messages[0]"), "{message}");
    assert!(message.contains("Weather in Paris?") && message.contains("Weather in Rome?"), "{message}");
}

#[tokio::test]
async fn a_changed_option_is_named_in_the_difference() {
    let dir = tempfile::tempdir().unwrap();
    let cassette = dir.path().join("c.jsonl");
    let recorder = RecordingProvider::new(Arc::new(MockProvider::new([MockReply::text("x")])), &cassette).unwrap();
    let mut request = ChatRequest { messages: vec![Message::user("q")], ..Default::default() };
    recorder.complete(request.clone()).await.unwrap();
    request.options.temperature = Some(0.9);
    let err = ReplayProvider::open(&cassette).unwrap().complete(request).await.unwrap_err();
    assert!(matches!(err, ProviderError::Invalid(_)));
    assert!(err.to_string().contains("options differ"), "{err}");
    assert!(err.to_string().contains("0.9"), "{err}");
}

#[tokio::test]
async fn recorded_errors_replay_as_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cassette = dir.path().join("c.jsonl");
    let failure = ProviderError::Http {
        provider: "openai".into(),
        status: 400,
        message: "bad request".into(),
        retry_after_secs: None,
    };
    let recorder =
        RecordingProvider::new(Arc::new(MockProvider::new([MockReply::Error(failure.clone())])), &cassette).unwrap();
    let request = ChatRequest { messages: vec![Message::user("q")], ..Default::default() };
    assert_eq!(recorder.complete(request.clone()).await.unwrap_err(), failure);
    assert_eq!(ReplayProvider::open(&cassette).unwrap().complete(request).await.unwrap_err(), failure);
}

#[test]
fn a_broken_cassette_line_is_reported_with_its_number() {
    let dir = tempfile::tempdir().unwrap();
    let cassette = dir.path().join("c.jsonl");
    std::fs::write(
        &cassette,
        "{\"request\":{\"messages\":[]},\"response\":null,\"error\":{\"kind\":\"invalid\",\"message\":\"x\"}}\n{oops\n",
    )
    .unwrap();
    match ReplayProvider::open(&cassette) {
        Err(LlmError::Cassette { line, .. }) => assert_eq!(line, 2),
        other => panic!("expected a cassette error, got {other:?}"),
    }
}
