//! Building a provider from settings (the `[provider]` table of `recursive.toml`, or flags),
//! and picking one from the environment when nothing is configured.
//!
//! [`build_provider`] wires the layers: the base provider (OpenAI-compatible, OpenAI Responses,
//! Anthropic, Gemini, Bedrock, Ollama, mock or replay), then retries (HTTP providers), then recording to a cassette, then
//! pricing — so a cassette holds what the caller saw after retries, and costs are computed
//! from current prices even on replay.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use recursive_core::config_trust::KeyClass;
use recursive_core::{ChatProvider, ChatResponse, Message, MockProvider, ProviderError, Role, StopReason, Usage};
use serde::{Deserialize, Serialize};

use crate::anthropic::{self, AnthropicConfig, AnthropicProvider};
use crate::bedrock::{self, BedrockConfig, BedrockProvider, CredentialProvider};
use crate::error::LlmError;
use crate::gemini::{self, CacheMode, GeminiConfig, GeminiProvider};
use crate::http::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT};
use crate::openai::{self, OpenAiConfig, OpenAiProvider};
use crate::pricing::{PriceTable, PricedProvider};
use crate::replay::{RecordingProvider, ReplayProvider};
use crate::responses::{self, ResponsesConfig, ResponsesProvider};
use crate::retry::{RetryPolicy, RetryProvider};

/// Default model of Ollama.
pub const OLLAMA_DEFAULT_MODEL: &str = "llama3.2";

/// Default address of a local Ollama server.
pub const OLLAMA_DEFAULT_HOST: &str = "http://127.0.0.1:11434";

/// Which backend to talk to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ProviderKind {
    /// OpenAI Chat Completions or any compatible server (set `base_url`).
    #[serde(rename = "openai", alias = "open_ai", alias = "openai-compatible")]
    OpenAi,
    /// OpenAI's Responses API (reasoning items carried across the turns of the tool loop).
    #[serde(rename = "openai-responses", alias = "openai_responses", alias = "responses")]
    OpenAiResponses,
    /// Anthropic Messages API.
    Anthropic,
    /// Google's Gemini API (`generateContent`), natively: thought signatures carried across the
    /// turns of the tool loop.
    Gemini,
    /// AWS Bedrock Runtime's Converse API: SigV4 with the standard AWS credential chain, or a
    /// Bedrock API key.
    Bedrock,
    /// A local Ollama server through its OpenAI-compatible endpoint.
    Ollama,
    /// The scripted provider; with no script it echoes the last user message.
    Mock,
    /// Answers from a cassette (`replay` path).
    Replay,
}

impl ProviderKind {
    /// Every kind, for help texts.
    pub const ALL: [ProviderKind; 8] = [
        ProviderKind::OpenAi,
        ProviderKind::OpenAiResponses,
        ProviderKind::Anthropic,
        ProviderKind::Gemini,
        ProviderKind::Bedrock,
        ProviderKind::Ollama,
        ProviderKind::Mock,
        ProviderKind::Replay,
    ];

    /// The name used in settings and on the command line.
    pub fn as_str(&self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::OpenAiResponses => "openai-responses",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Gemini => "gemini",
            ProviderKind::Bedrock => "bedrock",
            ProviderKind::Ollama => "ollama",
            ProviderKind::Mock => "mock",
            ProviderKind::Replay => "replay",
        }
    }

    /// The model used when the settings name none.
    pub fn default_model(&self) -> &'static str {
        match self {
            ProviderKind::OpenAi => openai::DEFAULT_MODEL,
            ProviderKind::OpenAiResponses => responses::DEFAULT_MODEL,
            ProviderKind::Anthropic => anthropic::DEFAULT_MODEL,
            ProviderKind::Gemini => gemini::DEFAULT_MODEL,
            ProviderKind::Bedrock => bedrock::DEFAULT_MODEL,
            ProviderKind::Ollama => OLLAMA_DEFAULT_MODEL,
            ProviderKind::Mock => "mock",
            ProviderKind::Replay => "",
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ProviderKind {
    type Err = LlmError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "openai" | "open_ai" | "openai-compatible" => Ok(ProviderKind::OpenAi),
            "openai-responses" | "openai_responses" | "responses" => Ok(ProviderKind::OpenAiResponses),
            "anthropic" => Ok(ProviderKind::Anthropic),
            "gemini" | "google" => Ok(ProviderKind::Gemini),
            "bedrock" | "aws-bedrock" => Ok(ProviderKind::Bedrock),
            "ollama" => Ok(ProviderKind::Ollama),
            "mock" => Ok(ProviderKind::Mock),
            "replay" => Ok(ProviderKind::Replay),
            other => Err(LlmError::InvalidSetting(format!(
                "unknown provider `{other}` (known: {})",
                ProviderKind::ALL.map(|k| k.as_str()).join(", ")
            ))),
        }
    }
}

/// How to build a provider; the `[provider]` table of `recursive.toml`.
///
/// ```toml
/// [provider]
/// kind = "openai"
/// model = "gpt-4o-mini"
/// base_url = "http://127.0.0.1:11434/v1"   # any OpenAI-compatible server
/// timeout = "120s"                          # or a number of seconds
/// max_retries = 3
/// stream = true
/// record = "cassettes/run.jsonl"
/// ```
#[derive(Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderSettings {
    /// The backend.
    #[schemars(extend("x-trust" = KeyClass::Neutral))]
    pub kind: ProviderKind,
    /// Model id; `None` means the kind's default.
    #[serde(default)]
    #[schemars(extend("x-trust" = KeyClass::Neutral))]
    pub model: Option<String>,
    /// Base URL; `None` means the kind's default (or `OPENAI_BASE_URL` / `ANTHROPIC_BASE_URL` /
    /// `GEMINI_BASE_URL` / `OLLAMA_HOST`; Bedrock: `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`, else
    /// `AWS_ENDPOINT_URL`, else the region's endpoint).
    #[serde(default)]
    #[schemars(extend("x-trust" = KeyClass::loosening("your API key and prompts would be sent there")))]
    pub base_url: Option<String>,
    /// API key; `None` reads `OPENAI_API_KEY` / `ANTHROPIC_API_KEY` / `GEMINI_API_KEY` (else
    /// `GOOGLE_API_KEY`) / `AWS_BEARER_TOKEN_BEDROCK` (a Bedrock API key; without one, Bedrock
    /// requests are signed with the AWS credential chain's). Never serialized.
    #[serde(default, skip_serializing)]
    #[schemars(extend("x-trust" = KeyClass::loosening("your prompts would be billed to and seen by that account")))]
    pub api_key: Option<String>,
    /// Limit on a whole call, streaming included (default 600 s).
    #[serde(default, with = "duration_opt")]
    #[schemars(with = "Option<f64>", extend("x-trust" = KeyClass::Neutral))]
    pub timeout: Option<Duration>,
    /// Limit on connecting (default 10 s).
    #[serde(default, with = "duration_opt")]
    #[schemars(with = "Option<f64>", extend("x-trust" = KeyClass::Neutral))]
    pub connect_timeout: Option<Duration>,
    /// Retries of transient failures (default 3; 0 disables). A rate-limited call (429) is
    /// retried beyond this while its waits stay within two minutes.
    #[serde(default)]
    #[schemars(extend("x-trust" = KeyClass::Neutral))]
    pub max_retries: Option<u32>,
    /// Stream answers (default) or ask for one JSON response per call.
    #[serde(default = "yes")]
    #[schemars(extend("x-trust" = KeyClass::Neutral))]
    pub stream: bool,
    /// Token cap used when a request sets none (Anthropic requires one; default 4096 there).
    #[serde(default)]
    #[schemars(extend("x-trust" = KeyClass::Neutral))]
    pub max_tokens: Option<u32>,
    /// OpenAI: send the cap as `max_completion_tokens` (newer models) instead of `max_tokens`.
    #[serde(default)]
    #[schemars(extend("x-trust" = KeyClass::Neutral))]
    pub max_completion_tokens: bool,
    /// Extra HTTP headers sent with every request.
    #[serde(default)]
    #[schemars(extend("x-trust" = KeyClass::loosening("they are sent with every request")))]
    pub headers: BTreeMap<String, String>,
    /// Append every interaction to this cassette.
    #[serde(default)]
    #[schemars(extend("x-trust" = KeyClass::loosening("every prompt and answer would be written there")))]
    pub record: Option<PathBuf>,
    /// Answer from this cassette instead of calling a model (implies kind `replay`).
    #[serde(default)]
    #[schemars(extend("x-trust" = KeyClass::InsideProject))]
    pub replay: Option<PathBuf>,
    /// Kind `mock`: answer with the replies scripted in this JSON file (an array of
    /// `"text"`, `{"text": "..."}` or `{"tool_calls": [{"name": "...", "arguments": {...}}]}`)
    /// instead of echoing the user.
    #[serde(default)]
    #[schemars(extend("x-trust" = KeyClass::InsideProject))]
    pub script: Option<PathBuf>,
    /// Bedrock: the AWS region (default: `AWS_REGION`, else `AWS_DEFAULT_REGION`, else the
    /// profile's `region`); it picks the endpoint and signs the requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-trust" = KeyClass::loosening("your prompts would be sent to that region's endpoint")))]
    pub region: Option<String>,
    /// Bedrock: the AWS profile of the shared config and credentials files (default:
    /// `AWS_PROFILE`, else `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-trust" = KeyClass::loosening("your prompts would be billed to and seen by that account")))]
    pub profile: Option<String>,
    /// Gemini: explicit context caching of a long system instruction with its tools —
    /// `auto` (default: from the second request with the same prefix), `always`, or `off`
    /// (implicit caching only). A cache's storage is billed by the hour and not counted in
    /// any call's cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-trust" = KeyClass::Scale { loosest_first: vec!["always".into(), "auto".into(), "off".into()], builtin: Some(CacheMode::default().as_str().into()) }))]
    pub cache: Option<CacheMode>,
    /// Gemini: how long an explicit cache lives, in seconds (default 600; its storage is billed
    /// for it, so an untrusted layer may only shorten it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-trust" = KeyClass::cap_of(gemini::DEFAULT_CACHE_TTL.as_secs_f64())))]
    pub cache_ttl_secs: Option<u64>,
    /// Gemini: the shortest prefix cached explicitly, in characters (default 8192, about the
    /// API's minimum of 2048 tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-trust" = KeyClass::Neutral))]
    pub cache_min_chars: Option<usize>,
}

fn yes() -> bool {
    true
}

impl fmt::Debug for ProviderSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderSettings")
            .field("kind", &self.kind)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_retries", &self.max_retries)
            .field("stream", &self.stream)
            .field("max_tokens", &self.max_tokens)
            .field("max_completion_tokens", &self.max_completion_tokens)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("record", &self.record)
            .field("replay", &self.replay)
            .field("script", &self.script)
            .field("region", &self.region)
            .field("profile", &self.profile)
            .field("cache", &self.cache)
            .field("cache_ttl_secs", &self.cache_ttl_secs)
            .field("cache_min_chars", &self.cache_min_chars)
            .finish()
    }
}

/// OpenAI-compatible settings with every default (programmatic use; in TOML `kind` is
/// required).
impl Default for ProviderSettings {
    fn default() -> Self {
        Self::new(ProviderKind::OpenAi)
    }
}

impl ProviderSettings {
    /// Settings for a kind with every default.
    pub fn new(kind: ProviderKind) -> Self {
        Self {
            kind,
            model: None,
            base_url: None,
            api_key: None,
            timeout: None,
            connect_timeout: None,
            max_retries: None,
            stream: true,
            max_tokens: None,
            max_completion_tokens: false,
            headers: BTreeMap::new(),
            record: None,
            replay: None,
            script: None,
            region: None,
            profile: None,
            cache: None,
            cache_ttl_secs: None,
            cache_min_chars: None,
        }
    }

    /// Sets the model.
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Sets the base URL.
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = Some(base_url.into());
        self
    }

    /// Sets the API key.
    pub fn with_api_key(mut self, api_key: impl Into<String>) -> Self {
        self.api_key = Some(api_key.into());
        self
    }

    /// Whether calls under these settings cost money: a hosted API's do; scripted, replayed and a
    /// local Ollama's do not.
    pub fn charges(&self) -> bool {
        self.replay.is_none() && !matches!(self.kind, ProviderKind::Mock | ProviderKind::Replay | ProviderKind::Ollama)
    }

    /// The model these settings resolve to.
    pub fn resolved_model(&self) -> String {
        self.model.clone().filter(|m| !m.is_empty()).unwrap_or_else(|| self.kind.default_model().to_string())
    }

    /// Reads the `[provider]` table of a TOML document (`None` when there is none).
    pub fn from_toml(text: &str) -> Result<Option<Self>, LlmError> {
        #[derive(Deserialize)]
        struct Doc {
            provider: Option<ProviderSettings>,
        }
        let doc: Doc = toml::from_str(text).map_err(|e| LlmError::InvalidSetting(e.to_string()))?;
        Ok(doc.provider)
    }
}

/// A provider configured under a name: one `[providers.NAME]` table of `recursive.toml`. A run
/// tree may mix them — a runnable file, a blueprint node or an RLM's sub-model names one by
/// `provider = "NAME"` — and each call is priced by the table of the provider that makes it.
/// The API key is never in the file: `api_key_env` names the environment variable that holds it.
///
/// ```toml
/// [providers.local]
/// kind = "ollama"
/// model = "qwen3"
///
/// [providers.groq]
/// kind = "openai"
/// base_url = "https://api.groq.com/openai/v1"
/// api_key_env = "GROQ_API_KEY"
/// model = "llama-3.3-70b-versatile"
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NamedProviderSettings {
    /// The backend (any kind but `replay`).
    #[schemars(extend("x-trust" = KeyClass::Neutral))]
    pub kind: ProviderKind,
    /// Model id; `None` means the kind's default.
    #[serde(default)]
    #[schemars(extend("x-trust" = KeyClass::Neutral))]
    pub model: Option<String>,
    /// Base URL; `None` means the kind's default (or its environment variable, as for
    /// `[provider]`).
    #[serde(default)]
    #[schemars(extend("x-trust" = KeyClass::loosening("your API key and prompts would be sent there")))]
    pub base_url: Option<String>,
    /// The environment variable holding the API key (e.g. `GROQ_API_KEY`); `None` reads the
    /// kind's usual variables. Named but unset is an error, never a fallback to another key.
    #[serde(default)]
    #[schemars(extend("x-trust" = KeyClass::loosening("your prompts would be billed to and seen by that account")))]
    pub api_key_env: Option<String>,
    /// Limit on a whole call, streaming included (default 600 s).
    #[serde(default, with = "duration_opt")]
    #[schemars(with = "Option<f64>", extend("x-trust" = KeyClass::Neutral))]
    pub timeout: Option<Duration>,
    /// Limit on connecting (default 10 s).
    #[serde(default, with = "duration_opt")]
    #[schemars(with = "Option<f64>", extend("x-trust" = KeyClass::Neutral))]
    pub connect_timeout: Option<Duration>,
    /// Retries of transient failures (default 3; 0 disables).
    #[serde(default)]
    #[schemars(extend("x-trust" = KeyClass::Neutral))]
    pub max_retries: Option<u32>,
    /// Stream answers (default) or ask for one JSON response per call.
    #[serde(default = "yes")]
    #[schemars(extend("x-trust" = KeyClass::Neutral))]
    pub stream: bool,
    /// Token cap used when a request sets none.
    #[serde(default)]
    #[schemars(extend("x-trust" = KeyClass::Neutral))]
    pub max_tokens: Option<u32>,
    /// OpenAI: send the cap as `max_completion_tokens` instead of `max_tokens`.
    #[serde(default)]
    #[schemars(extend("x-trust" = KeyClass::Neutral))]
    pub max_completion_tokens: bool,
    /// Extra HTTP headers sent with every request.
    #[serde(default)]
    #[schemars(extend("x-trust" = KeyClass::loosening("they are sent with every request")))]
    pub headers: BTreeMap<String, String>,
    /// Kind `mock`: answer with the replies scripted in this JSON file.
    #[serde(default)]
    #[schemars(extend("x-trust" = KeyClass::InsideProject))]
    pub script: Option<PathBuf>,
    /// Bedrock: the AWS region (default: `AWS_REGION`, else `AWS_DEFAULT_REGION`, else the
    /// profile's `region`); it picks the endpoint and signs the requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-trust" = KeyClass::loosening("your prompts would be sent to that region's endpoint")))]
    pub region: Option<String>,
    /// Bedrock: the AWS profile of the shared config and credentials files (default:
    /// `AWS_PROFILE`, else `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-trust" = KeyClass::loosening("your prompts would be billed to and seen by that account")))]
    pub profile: Option<String>,
    /// Gemini: explicit context caching of a long system instruction with its tools —
    /// `auto` (default: from the second request with the same prefix), `always`, or `off`
    /// (implicit caching only). A cache's storage is billed by the hour and not counted in
    /// any call's cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-trust" = KeyClass::Scale { loosest_first: vec!["always".into(), "auto".into(), "off".into()], builtin: Some(CacheMode::default().as_str().into()) }))]
    pub cache: Option<CacheMode>,
    /// Gemini: how long an explicit cache lives, in seconds (default 600; its storage is billed
    /// for it, so an untrusted layer may only shorten it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-trust" = KeyClass::cap_of(gemini::DEFAULT_CACHE_TTL.as_secs_f64())))]
    pub cache_ttl_secs: Option<u64>,
    /// Gemini: the shortest prefix cached explicitly, in characters (default 8192, about the
    /// API's minimum of 2048 tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-trust" = KeyClass::Neutral))]
    pub cache_min_chars: Option<usize>,
}

impl NamedProviderSettings {
    /// The settings of the provider called `name`, its key read from the variable `api_key_env`
    /// names (through `env`).
    pub fn settings(&self, name: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<ProviderSettings, LlmError> {
        if self.kind == ProviderKind::Replay {
            return Err(LlmError::InvalidSetting(format!(
                "[providers.{name}]: kind `replay` cannot be named; replay a whole run with --replay"
            )));
        }
        let api_key = match &self.api_key_env {
            None => None,
            Some(var) => match env(var).filter(|v| !v.trim().is_empty()) {
                Some(key) => Some(key),
                None => {
                    return Err(LlmError::InvalidSetting(format!(
                        "provider `{name}`: its key variable {var} (`api_key_env` of [providers.{name}]) is not set"
                    )));
                }
            },
        };
        Ok(ProviderSettings {
            kind: self.kind,
            model: self.model.clone(),
            base_url: self.base_url.clone(),
            api_key,
            timeout: self.timeout,
            connect_timeout: self.connect_timeout,
            max_retries: self.max_retries,
            stream: self.stream,
            max_tokens: self.max_tokens,
            max_completion_tokens: self.max_completion_tokens,
            headers: self.headers.clone(),
            record: None,
            replay: None,
            script: self.script.clone(),
            region: self.region.clone(),
            profile: self.profile.clone(),
            cache: self.cache,
            cache_ttl_secs: self.cache_ttl_secs,
            cache_min_chars: self.cache_min_chars,
        })
    }
}

/// What every HTTP provider's configuration takes from the settings.
struct Common {
    name: String,
    base_url: String,
    api_key: Option<String>,
    model: String,
    stream: bool,
    timeout: Duration,
    connect_timeout: Duration,
    headers: BTreeMap<String, String>,
}

/// An HTTP provider's configuration: the [`Common`] fields, then its own.
macro_rules! http_config {
    ($config:ident, $common:expr, { $($field:ident: $value:expr),* $(,)? }) => {{
        let Common { name, base_url, api_key, model, stream, timeout, connect_timeout, headers } = $common;
        $config { name, base_url, api_key, model, stream, timeout, connect_timeout, headers, $($field: $value),* }
    }};
}

/// Where a hosted API is reached and how its key is found.
struct Endpoint {
    /// The provider's name in a missing-key error.
    provider: &'static str,
    /// The environment variable with a base URL.
    url_env: &'static str,
    /// The base URL when neither the settings nor the environment give one.
    default_url: &'static str,
    /// The environment variables with a key, first found wins (the first is named in errors).
    key_envs: &'static [&'static str],
    /// A base URL containing this is the hosted API, which needs a key.
    hosted: &'static str,
}

const OPENAI: Endpoint = Endpoint {
    provider: "openai",
    url_env: "OPENAI_BASE_URL",
    default_url: openai::DEFAULT_BASE_URL,
    key_envs: &["OPENAI_API_KEY"],
    hosted: "api.openai.com",
};

const OPENAI_RESPONSES: Endpoint =
    Endpoint { provider: "openai-responses", default_url: responses::DEFAULT_BASE_URL, ..OPENAI };

const GEMINI: Endpoint = Endpoint {
    provider: "gemini",
    url_env: "GEMINI_BASE_URL",
    default_url: gemini::DEFAULT_BASE_URL,
    key_envs: &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
    hosted: "googleapis.com",
};

const ANTHROPIC: Endpoint = Endpoint {
    provider: "anthropic",
    url_env: "ANTHROPIC_BASE_URL",
    default_url: anthropic::DEFAULT_BASE_URL,
    key_envs: &["ANTHROPIC_API_KEY"],
    hosted: "api.anthropic.com",
};

impl Endpoint {
    /// The base URL and key: the settings', else the environment's, else the default URL; the
    /// hosted API without a key is an error.
    fn resolve(
        &self,
        settings: &ProviderSettings,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(String, Option<String>), LlmError> {
        let base_url =
            settings.base_url.clone().or_else(|| env(self.url_env)).unwrap_or_else(|| self.default_url.to_string());
        let api_key = settings.api_key.clone().or_else(|| self.key_envs.iter().find_map(|name| env(name)));
        if api_key.is_none() && base_url.contains(self.hosted) {
            let env_var = self.key_envs.first().copied().unwrap_or_default();
            return Err(LlmError::MissingApiKey { provider: self.provider.into(), env_var: env_var.into() });
        }
        Ok((base_url, api_key))
    }
}

/// Where and how Bedrock is reached.
struct BedrockEndpoint {
    base_url: String,
    region: String,
    api_key: Option<String>,
    credentials: Option<Arc<CredentialProvider>>,
}

/// Bedrock's region: the settings', else `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's.
fn bedrock_region(settings: &ProviderSettings, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    settings
        .region
        .clone()
        .filter(|r| !r.trim().is_empty())
        .or_else(|| env("AWS_REGION"))
        .or_else(|| env("AWS_DEFAULT_REGION"))
        .or_else(|| bedrock::credentials::profile_region(env, settings.profile.as_deref()))
}

fn no_bedrock_region() -> LlmError {
    LlmError::InvalidSetting(
        "bedrock: no AWS region; set `region` in the provider settings, AWS_REGION or AWS_DEFAULT_REGION, or \
         `region` in your AWS profile"
            .into(),
    )
}

/// Bedrock's region, endpoint and authentication: the endpoint from the settings, else
/// `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`, `AWS_ENDPOINT_URL`, the region's; a Bedrock API key from
/// the settings or `AWS_BEARER_TOKEN_BEDROCK`, else credentials from the AWS chain — required
/// for AWS's own endpoint, optional for another (a local server, a gateway that signs).
fn bedrock_endpoint(
    settings: &ProviderSettings,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<BedrockEndpoint, LlmError> {
    let region = bedrock_region(settings, env);
    let base_url = settings
        .base_url
        .clone()
        .or_else(|| env("AWS_ENDPOINT_URL_BEDROCK_RUNTIME"))
        .or_else(|| env("AWS_ENDPOINT_URL"))
        .or_else(|| region.as_deref().map(bedrock::default_endpoint));
    let api_key = settings.api_key.clone().or_else(|| env("AWS_BEARER_TOKEN_BEDROCK"));
    if api_key.is_some() {
        let base_url = base_url.ok_or_else(no_bedrock_region)?;
        return Ok(BedrockEndpoint { base_url, region: region.unwrap_or_default(), api_key, credentials: None });
    }
    // A profile that cannot work is said before a missing region (it may be why there is none).
    let source = bedrock::credentials::resolve(env, settings.profile.as_deref(), region.as_deref())?;
    let base_url = base_url.ok_or_else(no_bedrock_region)?;
    let credentials = match source {
        Some(source) => Some(Arc::new(CredentialProvider::new(source)?)),
        None if base_url.contains("amazonaws.com") => {
            let tried = bedrock::credentials::CHAIN.into();
            return Err(LlmError::MissingCredentials { provider: "bedrock".into(), tried });
        }
        None => None,
    };
    let region = match (region, &credentials) {
        (Some(region), _) => region,
        (None, Some(_)) => return Err(no_bedrock_region()),
        (None, None) => String::new(),
    };
    Ok(BedrockEndpoint { base_url, region, api_key: None, credentials })
}

/// Builds the provider the settings describe, reading API keys and base URLs from the process
/// environment where the settings leave them out.
pub fn build_provider(settings: &ProviderSettings, prices: &PriceTable) -> Result<Arc<dyn ChatProvider>, LlmError> {
    build_provider_with_env(settings, prices, &|name| recursive_core::env::var(name))
}

/// [`build_provider`] with an explicit environment lookup.
pub fn build_provider_with_env(
    settings: &ProviderSettings,
    prices: &PriceTable,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn ChatProvider>, LlmError> {
    let env_nonempty = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let timeout = settings.timeout.unwrap_or(DEFAULT_TIMEOUT);
    let connect_timeout = settings.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT);
    let model = settings.resolved_model();

    let common = |name: &str, (base_url, api_key): (String, Option<String>)| Common {
        name: name.into(),
        base_url,
        api_key,
        model: model.clone(),
        stream: settings.stream,
        timeout,
        connect_timeout,
        headers: settings.headers.clone(),
    };
    // OpenAI itself and every OpenAI-compatible server differ only in name, URL and key.
    let openai_compatible = |name: &str, base_url: String, api_key: Option<String>| {
        let config = http_config!(OpenAiConfig, common(name, (base_url, api_key)), {
            use_max_completion_tokens: settings.max_completion_tokens,
            default_max_tokens: settings.max_tokens,
        });
        OpenAiProvider::new(config).map(|p| Arc::new(p) as Arc<dyn ChatProvider>)
    };
    let (base, is_http): (Arc<dyn ChatProvider>, bool) = match (settings.kind, &settings.replay) {
        (_, Some(path)) => {
            if settings.record.is_some() {
                return Err(LlmError::InvalidSetting("`record` and `replay` cannot both be set".into()));
            }
            (Arc::new(ReplayProvider::open(path)?), false)
        }
        (ProviderKind::Replay, None) => {
            return Err(LlmError::InvalidSetting("provider `replay` needs a cassette path in `replay`".into()));
        }
        (ProviderKind::Mock, None) => match &settings.script {
            Some(path) => (Arc::new(scripted_mock(path, &model)?), false),
            None => (Arc::new(echo_mock(&model)), false),
        },
        (ProviderKind::OpenAi, None) => {
            let (base_url, api_key) = OPENAI.resolve(settings, &env_nonempty)?;
            (openai_compatible("openai", base_url, api_key)?, true)
        }
        (ProviderKind::OpenAiResponses, None) => {
            let endpoint = OPENAI_RESPONSES.resolve(settings, &env_nonempty)?;
            let config = http_config!(ResponsesConfig, common("openai-responses", endpoint), {
                default_max_tokens: settings.max_tokens,
            });
            (Arc::new(ResponsesProvider::new(config)?), true)
        }
        (ProviderKind::Gemini, None) => {
            let endpoint = GEMINI.resolve(settings, &env_nonempty)?;
            let defaults = gemini::CacheSettings::default();
            let config = http_config!(GeminiConfig, common("gemini", endpoint), {
                default_max_tokens: settings.max_tokens,
                cache: gemini::CacheSettings {
                    mode: settings.cache.unwrap_or(defaults.mode),
                    ttl: settings.cache_ttl_secs.map(Duration::from_secs).unwrap_or(defaults.ttl),
                    min_chars: settings.cache_min_chars.unwrap_or(defaults.min_chars),
                },
            });
            (Arc::new(GeminiProvider::new(config)?), true)
        }
        (ProviderKind::Bedrock, None) => {
            let endpoint = bedrock_endpoint(settings, &env_nonempty)?;
            let config = http_config!(BedrockConfig, common("bedrock", (endpoint.base_url, endpoint.api_key)), {
                region: endpoint.region,
                credentials: endpoint.credentials,
                default_max_tokens: settings.max_tokens,
                prompt_caching: true,
            });
            (Arc::new(BedrockProvider::new(config)?), true)
        }
        (ProviderKind::Ollama, None) => {
            let base_url = settings.base_url.clone().unwrap_or_else(|| {
                let host =
                    env_nonempty("OLLAMA_HOST").map(|h| ollama_url(&h)).unwrap_or_else(|| OLLAMA_DEFAULT_HOST.into());
                format!("{host}/v1")
            });
            (openai_compatible("ollama", base_url, settings.api_key.clone())?, true)
        }
        (ProviderKind::Anthropic, None) => {
            let endpoint = ANTHROPIC.resolve(settings, &env_nonempty)?;
            let config = http_config!(AnthropicConfig, common("anthropic", endpoint), {
                default_max_tokens: settings.max_tokens.unwrap_or(anthropic::DEFAULT_MAX_TOKENS),
                prompt_caching: true,
            });
            (Arc::new(AnthropicProvider::new(config)?), true)
        }
    };

    let mut provider = base;
    let retries = settings.max_retries.unwrap_or(3);
    if is_http && retries > 0 {
        provider =
            Arc::new(RetryProvider::new(provider, RetryPolicy { max_retries: retries, ..RetryPolicy::default() }));
    }
    if let Some(path) = &settings.record {
        provider = Arc::new(RecordingProvider::new(provider, path)?);
    }
    if settings.charges() {
        Ok(Arc::new(PricedProvider::new(provider, prices.clone())))
    } else {
        Ok(Arc::new(PricedProvider::free(provider, prices.clone())))
    }
}

/// One reply of a mock script file.
#[derive(Deserialize)]
#[serde(untagged)]
enum ScriptedReply {
    Text(String),
    Reply {
        /// Answer every request whose last user message contains this text (a standing rule,
        /// not consumed); without it, the reply is used once, in order.
        #[serde(default)]
        when: Option<String>,
        #[serde(default)]
        text: Option<String>,
        #[serde(default)]
        tool_calls: Vec<ScriptedCall>,
    },
}

#[derive(Deserialize)]
struct ScriptedCall {
    name: String,
    #[serde(default)]
    arguments: serde_json::Value,
}

fn scripted_response(text: Option<String>, calls: Vec<ScriptedCall>, n: usize, model: &str) -> ChatResponse {
    let calls: Vec<recursive_core::ToolCall> = calls
        .into_iter()
        .enumerate()
        .map(|(i, c)| recursive_core::ToolCall { id: format!("call_{n}_{i}"), name: c.name, arguments: c.arguments })
        .collect();
    let stop_reason = if calls.is_empty() { StopReason::EndTurn } else { StopReason::ToolUse };
    ChatResponse {
        message: Message::assistant_with_tools(text.unwrap_or_default(), calls),
        stop_reason,
        usage: Usage { input_tokens: 10, output_tokens: 5, ..Default::default() },
        cost_usd: None,
        model: model.to_string(),
    }
}

/// A mock that answers from a script file: standing `when` rules first, then the other
/// replies in order. A rule answers a request whose last message is a user message containing
/// its text (the first such rule in file order wins); a request that ends with tool results
/// goes to the ordered replies, so a rule that calls a tool does not answer its own results
/// again and again.
fn scripted_mock(path: &std::path::Path, model: &str) -> Result<MockProvider, LlmError> {
    let text = std::fs::read_to_string(path).map_err(|e| LlmError::io(path, e))?;
    let replies: Vec<ScriptedReply> = serde_json::from_str(&text).map_err(|e| {
        LlmError::InvalidSetting(format!(
            "mock script {}: {e} (expected a JSON array of \"text\", {{\"text\": ...}}, \
             {{\"tool_calls\": [{{\"name\": ..., \"arguments\": {{...}}}}]}}, optionally with \"when\")",
            path.display()
        ))
    })?;
    let mut rules = Vec::new();
    let mut queue = std::collections::VecDeque::new();
    for r in replies {
        match r {
            ScriptedReply::Text(t) => queue.push_back((Some(t), Vec::new())),
            ScriptedReply::Reply { when: Some(w), text, tool_calls } => rules.push((w, text, tool_calls)),
            ScriptedReply::Reply { when: None, text, tool_calls } => queue.push_back((text, tool_calls)),
        }
    }
    let rules: Vec<(String, ChatResponse)> = rules
        .into_iter()
        .enumerate()
        .map(|(i, (w, text, calls))| (w, scripted_response(text, calls, i, model)))
        .collect();
    let total = queue.len();
    let queue = std::sync::Mutex::new(queue);
    let model_name = model.to_string();
    let script = path.display().to_string();
    Ok(MockProvider::with_handler(move |request| {
        let last_user = request.messages.last().filter(|m| m.role == Role::User).map(|m| m.content.as_str());
        if let Some((_, r)) = rules.iter().find(|(w, _)| last_user.is_some_and(|u| u.contains(w.as_str()))) {
            return Ok(r.clone());
        }
        let mut q = queue.lock().map_err(|_| ProviderError::Invalid("mock script state poisoned".into()))?;
        match q.pop_front() {
            Some((text, calls)) => Ok(scripted_response(text, calls, total - q.len(), &model_name)),
            None => Err(ProviderError::Invalid(format!(
                "mock script {script}: all {total} scripted replies are used up and no `when` rule matches"
            ))),
        }
    })
    .with_model(model)
    .forgetting_requests())
}

/// A mock that answers every request with the last user message, echoed.
fn echo_mock(model: &str) -> MockProvider {
    let model = model.to_string();
    let reply_model = model.clone();
    MockProvider::with_handler(move |request| {
        let last = request.messages.iter().rev().find(|m| m.role == Role::User).map(|m| m.content.as_str());
        Ok(ChatResponse {
            message: Message::assistant(format!("(mock) {}", last.unwrap_or_default())),
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
            cost_usd: None,
            model: reply_model.clone(),
        })
    })
    .with_model(model)
    .forgetting_requests()
}

/// `OLLAMA_HOST` as a URL: a scheme and the default port are added, and a listen-everywhere
/// address is replaced by the loopback address.
pub fn ollama_url(host: &str) -> String {
    let host = host.trim().trim_end_matches('/');
    let (scheme, rest) = match host.split_once("://") {
        Some((s, r)) => (s, r),
        None => ("http", host),
    };
    let (name, port) = match rest.rsplit_once(':') {
        Some((n, p)) if p.chars().all(|c| c.is_ascii_digit()) && !p.is_empty() => (n, p),
        _ => (rest, "11434"),
    };
    let name = if name.is_empty() || name == "0.0.0.0" { "127.0.0.1" } else { name };
    format!("{scheme}://{name}:{port}")
}

/// Picks a provider from the environment: `ANTHROPIC_API_KEY` → Anthropic, else
/// `OPENAI_API_KEY` → OpenAI (honouring `OPENAI_BASE_URL`), else an Ollama server answering on
/// `OLLAMA_HOST` or 127.0.0.1:11434 → Ollama. `None` when there is none of these.
pub async fn detect_from_env() -> Option<ProviderSettings> {
    detect_from(&|name| recursive_core::env::var(name)).await
}

/// [`detect_from_env`] with an explicit environment lookup.
pub async fn detect_from(env: &(dyn Fn(&str) -> Option<String> + Sync)) -> Option<ProviderSettings> {
    let get = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    if get("ANTHROPIC_API_KEY").is_some() {
        let mut s = ProviderSettings::new(ProviderKind::Anthropic);
        s.base_url = get("ANTHROPIC_BASE_URL");
        return Some(s);
    }
    if get("OPENAI_API_KEY").is_some() {
        let mut s = ProviderSettings::new(ProviderKind::OpenAi);
        s.base_url = get("OPENAI_BASE_URL");
        return Some(s);
    }
    let host = get("OLLAMA_HOST").map(|h| ollama_url(&h)).unwrap_or_else(|| OLLAMA_DEFAULT_HOST.to_string());
    let models = probe_ollama(&host).await?;
    let mut s = ProviderSettings::new(ProviderKind::Ollama).with_base_url(format!("{host}/v1"));
    // Use the default model if it is installed, else the first installed one.
    let has_default =
        models.iter().any(|m| m == OLLAMA_DEFAULT_MODEL || m.starts_with(&format!("{OLLAMA_DEFAULT_MODEL}:")));
    if !has_default && let Some(first) = models.first() {
        s.model = Some(first.clone());
    }
    Some(s)
}

/// Asks an Ollama server for its models (`GET /api/tags`), with a short timeout.
async fn probe_ollama(host: &str) -> Option<Vec<String>> {
    let client = recursive_http::client_builder()
        .timeout(Duration::from_millis(1500))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .ok()?;
    let response = client.get(format!("{host}/api/tags")).send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    Some(
        body["models"]
            .as_array()
            .map(|list| list.iter().filter_map(|m| m["name"].as_str().map(str::to_string)).collect())
            .unwrap_or_default(),
    )
}

/// Durations in settings: a number of seconds (`120`, `1.5`, also as a string) or a duration
/// with units as `humantime` reads it (`500ms`, `30s`, `2m`, `1h 30m`).
mod duration_opt {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Secs(f64),
        Text(String),
    }

    pub fn serialize<S: Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => s.serialize_f64(d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let raw = Option::<Raw>::deserialize(d)?;
        raw.map(|r| match r {
            Raw::Secs(s) => secs(s).map_err(serde::de::Error::custom),
            Raw::Text(t) => parse(&t).map_err(serde::de::Error::custom),
        })
        .transpose()
    }

    /// A number of seconds as a duration.
    fn secs(value: f64) -> Result<Duration, String> {
        Duration::try_from_secs_f64(value).map_err(|e| format!("invalid duration {value}: {e}"))
    }

    /// Reads a duration: a bare number is seconds, anything else goes to `humantime`.
    pub fn parse(text: &str) -> Result<Duration, String> {
        let t = text.trim();
        if let Ok(n) = t.parse::<f64>() {
            return secs(n);
        }
        humantime::parse_duration(t).map_err(|e| {
            format!("invalid duration `{t}`: {e} (use e.g. 500ms, 30s, 2m, 1h 30m, or a number of seconds)")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recursive_core::ChatRequest;

    fn script(json: &str) -> (tempfile::TempDir, MockProvider) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("script.json");
        std::fs::write(&path, json).unwrap();
        let mock = scripted_mock(&path, "mock-model").unwrap();
        (dir, mock)
    }

    fn ask(text: &str) -> ChatRequest {
        ChatRequest { messages: vec![Message::user(text)], ..Default::default() }
    }

    async fn answer(mock: &MockProvider, request: ChatRequest) -> Result<String, ProviderError> {
        mock.complete(request).await.map(|r| r.message.content)
    }

    #[tokio::test]
    async fn mock_script_when_rules_stand_and_the_first_match_wins() {
        let (_dir, mock) = script(
            r#"[{"when": "alpha", "text": "rule A"}, {"when": "alpha beta", "text": "rule AB"},
                "first", {"text": "second"}]"#,
        );
        // Rules are not consumed and are checked in file order.
        assert_eq!(answer(&mock, ask("say alpha beta")).await.unwrap(), "rule A");
        assert_eq!(answer(&mock, ask("alpha again")).await.unwrap(), "rule A");
        // Anything else takes the ordered replies, which are consumed.
        assert_eq!(answer(&mock, ask("other")).await.unwrap(), "first");
        assert_eq!(answer(&mock, ask("beta")).await.unwrap(), "second");
        let err = answer(&mock, ask("other")).await.unwrap_err();
        assert!(err.to_string().contains("all 2 scripted replies are used up"), "{err}");
        assert_eq!(answer(&mock, ask("alpha")).await.unwrap(), "rule A");
    }

    #[tokio::test]
    async fn mock_script_when_rules_do_not_answer_tool_results() {
        let (_dir, mock) = script(
            r#"[{"when": "weather", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
                "It is sunny."]"#,
        );
        let first = mock.complete(ask("weather in Oslo?")).await.unwrap();
        assert_eq!(first.stop_reason, StopReason::ToolUse);
        assert_eq!(first.message.tool_calls[0].name, "get_weather");
        assert_eq!(first.message.tool_calls[0].arguments, serde_json::json!({"city": "Oslo"}));
        let mut messages = vec![Message::user("weather in Oslo?"), first.message.clone()];
        messages.push(Message::tool_result(first.message.tool_calls[0].id.clone(), "sunny", false));
        let second = ChatRequest { messages, ..Default::default() };
        assert_eq!(answer(&mock, second).await.unwrap(), "It is sunny.");
    }

    #[test]
    fn a_mock_script_that_is_not_a_reply_array_names_the_file_and_the_format() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.json");
        std::fs::write(&path, r#"{"text": "not an array"}"#).unwrap();
        let Err(err) = scripted_mock(&path, "m") else { panic!("a bad script was accepted") };
        let err = err.to_string();
        assert!(err.contains("bad.json") && err.contains("JSON array"), "{err}");
    }

    #[test]
    fn settings_read_from_a_provider_table() {
        let text = r#"
            [provider]
            kind = "ollama"
            model = "qwen3"
            timeout = "2m"
            connect_timeout = 3
            stream = false
            headers = { "x-test" = "1" }
        "#;
        let s = ProviderSettings::from_toml(text).unwrap().unwrap();
        assert_eq!(s.kind, ProviderKind::Ollama);
        assert_eq!(s.timeout, Some(Duration::from_secs(120)));
        assert_eq!(s.connect_timeout, Some(Duration::from_secs(3)));
        assert!(!s.stream);
        assert_eq!(s.headers["x-test"], "1");
    }

    #[test]
    fn unknown_settings_are_rejected() {
        let err = ProviderSettings::from_toml("[provider]\nkind = \"openai\"\nmodle = \"x\"\n").unwrap_err();
        assert!(err.to_string().contains("modle"), "{err}");
    }

    #[test]
    fn kinds_parse_from_their_names() {
        assert_eq!("OpenAI".parse::<ProviderKind>().unwrap(), ProviderKind::OpenAi);
        let err = "vertex".parse::<ProviderKind>().unwrap_err();
        assert!(err.to_string().contains("known: openai, openai-responses, anthropic, gemini"), "{err}");
    }

    #[test]
    fn the_responses_kind_reads_from_flags_and_settings() {
        assert_eq!("openai-responses".parse::<ProviderKind>().unwrap(), ProviderKind::OpenAiResponses);
        assert_eq!(ProviderKind::OpenAiResponses.to_string(), "openai-responses");
        let s = ProviderSettings::from_toml("[provider]\nkind = \"openai-responses\"\n").unwrap().unwrap();
        assert_eq!(s.kind, ProviderKind::OpenAiResponses);
        assert_eq!(s.resolved_model(), responses::DEFAULT_MODEL);
    }

    #[test]
    fn the_responses_kind_needs_a_key_for_openai_and_builds_against_any_url() {
        let prices = PriceTable::builtin();
        let settings = ProviderSettings::new(ProviderKind::OpenAiResponses);
        let Err(err) = build_provider_with_env(&settings, &prices, &|_| None) else { panic!("built without a key") };
        assert!(err.to_string().contains("OPENAI_API_KEY"), "{err}");
        let local = settings.with_base_url("http://127.0.0.1:9/v1");
        let provider = build_provider_with_env(&local, &prices, &|_| None).unwrap();
        assert_eq!(provider.name(), "openai-responses");
        assert_eq!(provider.default_model(), responses::DEFAULT_MODEL);
    }

    #[test]
    fn the_gemini_kind_reads_its_key_from_gemini_then_google_variables() {
        assert_eq!("gemini".parse::<ProviderKind>().unwrap(), ProviderKind::Gemini);
        let s = ProviderSettings::from_toml("[provider]\nkind = \"gemini\"\n").unwrap().unwrap();
        assert_eq!((s.kind, s.resolved_model()), (ProviderKind::Gemini, gemini::DEFAULT_MODEL.to_string()));
        let prices = PriceTable::builtin();
        let Err(err) = build_provider_with_env(&s, &prices, &|_| None) else { panic!("built without a key") };
        assert!(err.to_string().contains("GEMINI_API_KEY"), "{err}");
        let google = |name: &str| (name == "GOOGLE_API_KEY").then(|| "AIza-g".to_string());
        let provider = build_provider_with_env(&s, &prices, &google).unwrap();
        assert_eq!((provider.name(), provider.default_model()), ("gemini", gemini::DEFAULT_MODEL));
        let local = |name: &str| (name == "GEMINI_BASE_URL").then(|| "http://127.0.0.1:9".to_string());
        assert!(build_provider_with_env(&s, &prices, &local).is_ok(), "a local server needs no key");
    }

    #[test]
    fn the_bedrock_kind_reads_its_region_and_profile_which_need_trust() {
        assert_eq!("bedrock".parse::<ProviderKind>().unwrap(), ProviderKind::Bedrock);
        assert_eq!(ProviderKind::Bedrock.to_string(), "bedrock");
        let text = "[provider]\nkind = \"bedrock\"\nregion = \"eu-west-1\"\nprofile = \"dev\"\n";
        let s = ProviderSettings::from_toml(text).unwrap().unwrap();
        assert_eq!((s.region.as_deref(), s.profile.as_deref()), (Some("eu-west-1"), Some("dev")));
        assert_eq!(s.resolved_model(), bedrock::DEFAULT_MODEL);
        assert!(s.charges());
        let shown = format!("{:?}", s.clone().with_api_key("ABSK-secret"));
        assert!(shown.contains("eu-west-1") && !shown.contains("ABSK-secret"), "{shown}");
        for schema in [schemars::schema_for!(ProviderSettings), schemars::schema_for!(NamedProviderSettings)] {
            let schema = serde_json::to_value(schema).unwrap();
            for key in ["region", "profile"] {
                assert_eq!(schema["properties"][key]["x-trust"]["class"], "loosening", "{key}: {schema}");
            }
        }
    }

    #[test]
    fn gemini_cache_settings_read_from_the_provider_and_named_tables() {
        let text = "[provider]\nkind = \"gemini\"\ncache = \"always\"\ncache_ttl_secs = 300\ncache_min_chars = 20000\n";
        let s = ProviderSettings::from_toml(text).unwrap().unwrap();
        assert_eq!(s.cache, Some(CacheMode::Always));
        assert_eq!(s.cache_ttl_secs, Some(300));
        assert_eq!(s.cache_min_chars, Some(20_000));
        let named: NamedProviderSettings = toml::from_str("kind = \"gemini\"\ncache = \"off\"").unwrap();
        assert_eq!(named.settings("g", &|_| None).unwrap().cache, Some(CacheMode::Off));
        let err = ProviderSettings::from_toml("[provider]\nkind = \"gemini\"\ncache = \"sometimes\"\n").unwrap_err();
        assert!(err.to_string().contains("sometimes"), "{err}");
        let local = |name: &str| (name == "GEMINI_BASE_URL").then(|| "http://127.0.0.1:9".to_string());
        assert!(build_provider_with_env(&s, &PriceTable::builtin(), &local).is_ok());
    }

    #[test]
    fn a_named_provider_reads_its_key_from_the_variable_it_names_and_never_another() {
        let table: NamedProviderSettings = toml::from_str(
            "kind = \"openai\"\nbase_url = \"https://api.groq.com/openai/v1\"\napi_key_env = \"GROQ_API_KEY\"\ntimeout = \"30s\"",
        )
        .unwrap();
        let env = |name: &str| (name == "GROQ_API_KEY").then(|| "gsk-1".to_string());
        let s = table.settings("groq", &env).unwrap();
        assert_eq!((s.kind, s.api_key.as_deref()), (ProviderKind::OpenAi, Some("gsk-1")));
        assert_eq!(s.timeout, Some(Duration::from_secs(30)));
        let openai_only = |name: &str| (name == "OPENAI_API_KEY").then(|| "sk-other".to_string());
        let err = table.settings("groq", &openai_only).unwrap_err().to_string();
        assert!(err.contains("provider `groq`") && err.contains("GROQ_API_KEY") && err.contains("not set"), "{err}");
        let err = toml::from_str::<NamedProviderSettings>("kind = \"openai\"\napi_key = \"sk-in-the-file\"");
        assert!(err.unwrap_err().to_string().contains("api_key"), "the key itself is not a setting");
        let replay: NamedProviderSettings = toml::from_str("kind = \"replay\"").unwrap();
        assert!(replay.settings("r", &|_| None).unwrap_err().to_string().contains("--replay"));
    }

    #[test]
    fn the_api_key_is_redacted_in_debug_output() {
        let s = ProviderSettings::new(ProviderKind::OpenAi).with_api_key("sk-secret");
        assert!(!format!("{s:?}").contains("sk-secret"));
    }

    #[test]
    fn ollama_host_becomes_a_url() {
        assert_eq!(ollama_url("0.0.0.0:11434"), "http://127.0.0.1:11434");
        assert_eq!(ollama_url("http://gpu-box:8080/"), "http://gpu-box:8080");
        assert_eq!(ollama_url("gpu-box"), "http://gpu-box:11434");
    }

    #[test]
    fn durations_accept_units() {
        assert_eq!(duration_opt::parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration_opt::parse("120s"), Ok(Duration::from_secs(120)));
        assert_eq!(duration_opt::parse("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(duration_opt::parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(duration_opt::parse("3 fortnights").is_err());
    }

    #[test]
    fn a_bare_number_is_seconds() {
        assert_eq!(duration_opt::parse("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(duration_opt::parse(" 120 "), Ok(Duration::from_secs(120)));
        let s = ProviderSettings::from_toml("[provider]\nkind = \"openai\"\ntimeout = 2.5\n").unwrap().unwrap();
        assert_eq!(s.timeout, Some(Duration::from_millis(2500)));
    }

    #[test]
    fn a_bad_duration_names_the_value_and_the_accepted_forms() {
        let err = duration_opt::parse("3 fortnights").unwrap_err();
        assert!(err.contains("`3 fortnights`") && err.contains("unknown time unit"), "{err}");
        assert!(err.contains("500ms, 30s, 2m"), "{err}");
        let err = ProviderSettings::from_toml("[provider]\nkind = \"openai\"\ntimeout = \"soon\"\n").unwrap_err();
        assert!(err.to_string().contains("invalid duration `soon`"), "{err}");
        let err = duration_opt::parse("-1").unwrap_err();
        assert!(err.contains("invalid duration -1"), "{err}");
    }
}
