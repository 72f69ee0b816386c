//! End to end against a real fake LLM server (`fakellm` from PyPI): the core agent loop runs
//! one tool-call round trip through its OpenAI and its Anthropic endpoint, streaming.
//!
//! The server binary comes from `FAKELLM_BIN`, which `./scripts/test` installs and sets
//! (`fakellm==0.3.5` in a virtualenv under `.test-deps/`). Without it the tests fail, unless
//! `RECURSIVE_ALLOW_SKIP=1` asks to skip them (see `recursive_testkit::require_env`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use recursive_core::{
    Agent, AgentConfig, Budget, EventKind, FinishReason, MemorySink, Role, RunScope, ToolContext, ToolError,
    ToolRegistry, TypedTool,
};
use recursive_llm::config::build_provider_with_env;
use recursive_llm::{PriceTable, ProviderKind, ProviderSettings};
use recursive_testkit::require_env;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

const ANSWER: &str = "It is sunny and 22C in Paris.";

/// A running fakellm server, killed on drop.
struct FakeLlm {
    child: Child,
    url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl FakeLlm {
    /// Starts the server with the fixture rules; `None` when `FAKELLM_BIN` is unset and
    /// skipping is allowed.
    async fn start() -> Option<FakeLlm> {
        let bin = require_env("FAKELLM_BIN")?;
        let dir = tempfile::tempdir().unwrap();
        let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fakellm.yaml");
        let config = dir.path().join("fakellm.yaml");
        std::fs::write(&config, std::fs::read_to_string(&rules).unwrap()).unwrap();
        let log = dir.path().join("fakellm.log");
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(&bin)
            .args(["serve", "--host", "127.0.0.1", "--port", &port.to_string(), "--config"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.path().join("fakellm.out")).unwrap())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", Path::new(&bin).display()));
        let mut server = FakeLlm { child, url: format!("http://127.0.0.1:{port}"), log, _dir: dir };
        server.wait_ready().await;
        Some(server)
    }

    async fn wait_ready(&mut self) {
        let client = recursive_http::client();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("fakellm exited with {status}: {}", self.log_text());
            }
            let probe = client.get(format!("{}/_fakellm/stats", self.url)).timeout(Duration::from_secs(2)).send().await;
            if probe.is_ok_and(|r| r.status().is_success()) {
                return;
            }
            assert!(Instant::now() < deadline, "fakellm did not become ready: {}", self.log_text());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn stats(&self) -> Value {
        let client = recursive_http::client();
        client.get(format!("{}/_fakellm/stats", self.url)).send().await.unwrap().json().await.unwrap()
    }
}

#[derive(Deserialize, JsonSchema)]
struct WeatherArgs {
    /// City name.
    city: String,
    /// `celsius` or `fahrenheit`.
    unit: Option<String>,
}

/// `(city, unit)` of each call.
type Asked = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// Reports sunny weather and remembers the cities it was asked about.
#[derive(Clone, Default)]
struct Weather {
    asked: Asked,
}

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
        self.asked.lock().unwrap().push((args.city, args.unit));
        Ok(json!({"forecast": "sunny", "temp_c": 22}).to_string())
    }
}

async fn weather_round_trip(server: &FakeLlm, settings: ProviderSettings, api: &str) {
    let provider = build_provider_with_env(&settings, &PriceTable::builtin(), &|_| None).unwrap();
    let weather = Weather::default();
    let mut tools = ToolRegistry::new();
    tools.register_typed(weather.clone());
    let agent = Agent::new(provider).with_tools(tools).with_config(AgentConfig {
        name: "weather".into(),
        system_prompt: Some("You are helpful.".into()),
        ..Default::default()
    });
    let sink = MemorySink::new();
    let scope = RunScope::root("weather", Arc::new(sink.clone()), Arc::new(Budget::unlimited()));
    let result = agent.run_in("What is the weather in Paris?", &scope).await.unwrap();

    assert_eq!(result.finish_reason, FinishReason::NoMoreToolCalls, "{api}");
    assert_eq!(result.output, ANSWER, "{api}");
    assert_eq!(result.steps, 2, "{api}");
    let roles: Vec<Role> = result.messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, vec![Role::System, Role::User, Role::Assistant, Role::Tool, Role::Assistant], "{api}");
    let calls = &result.messages[2].tool_calls;
    assert_eq!(calls.len(), 1, "{api}");
    assert_eq!(calls[0].name, "get_weather", "{api}");
    assert_eq!(calls[0].arguments, json!({"city": "Paris", "unit": "celsius"}), "{api}");
    let tool_result = &result.messages[3];
    assert_eq!(tool_result.tool_call_id.as_deref(), Some(calls[0].id.as_str()), "{api}");
    assert!(!tool_result.is_error && tool_result.content.contains("sunny"), "{api}: {}", tool_result.content);
    assert_eq!(*weather.asked.lock().unwrap(), vec![("Paris".to_string(), Some("celsius".to_string()))], "{api}");

    // The answer arrived in pieces, as streamed.
    let deltas: Vec<String> = sink
        .events()
        .into_iter()
        .filter(|e| e.step == 2)
        .filter_map(|e| match e.kind {
            EventKind::PartialText { delta } => Some(delta),
            _ => None,
        })
        .collect();
    assert!(deltas.len() > 1, "{api}: {deltas:?}");
    assert_eq!(deltas.concat(), ANSWER, "{api}");

    // The server saw two streamed requests on this API, matched by the expected rules.
    let stats = server.stats().await;
    let mut recent = stats["recent"].as_array().unwrap().clone();
    recent.sort_by_key(|r| r["turn"].as_u64());
    let rules: Vec<&str> = recent.iter().map(|r| r["matched_rule"].as_str().unwrap_or("")).collect();
    assert_eq!(rules, vec!["weather_tool_call", "weather_answer"], "{api}: {stats}");
    assert!(recent.iter().all(|r| r["stream"] == true && r["api"] == api), "{api}: {stats}");
}

#[tokio::test]
async fn agent_round_trip_through_the_openai_endpoint() {
    let Some(server) = FakeLlm::start().await else { return };
    let settings = ProviderSettings::new(ProviderKind::OpenAi)
        .with_base_url(format!("{}/v1", server.url))
        .with_api_key("test-key")
        .with_model("gpt-4o-mini");
    weather_round_trip(&server, settings, "openai").await;
}

#[tokio::test]
async fn agent_round_trip_through_the_anthropic_endpoint() {
    let Some(server) = FakeLlm::start().await else { return };
    let settings = ProviderSettings::new(ProviderKind::Anthropic)
        .with_base_url(server.url.clone())
        .with_api_key("test-key")
        .with_model("claude-sonnet-4-5");
    weather_round_trip(&server, settings, "anthropic").await;
}
