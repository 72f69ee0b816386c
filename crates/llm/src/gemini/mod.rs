//! Google's Gemini API, natively (`POST {base}/v1beta/models/{model}:streamGenerateContent?alt=sse`,
//! or `:generateContent` for one JSON answer), with an API key in `x-goog-api-key`: thinking
//! with a budget from the reasoning effort, thought parts streamed as reasoning, and **thought
//! signatures round-tripped** — a signature the model put on a part (often a function call) is
//! kept on the assistant message and sent back on the same part with the next turn of the tool
//! loop, as the API requires for thinking models.
//!
//! Signatures live in the message's [`recursive_core::Reasoning`] entries, their `id` naming
//! the part: [`THOUGHT_ID`] for a thought part (its text and signature), [`TEXT_SIGNATURE_ID`]
//! for the answer text's signature, `gemini:call:{call id}` for a function call's. Other
//! providers' reasoning entries (no `gemini:` id) are not sent to Gemini.
//!
//! Two pure transforms around one HTTP call: [`GeminiConfig::request_body`] (core request →
//! wire body, in [`request`]) and, back, [`ResponseAccumulator`] (response chunks → response) or
//! [`parse_response`] (one whole answer → response), in [`response`].
//!
//! [`GeminiProvider`] adds **explicit context caching** ([`cache`]): a long system instruction
//! with its tools, reused, is stored once as a cached content and named by later requests.

pub mod cache;
pub mod request;
pub mod response;
pub mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use recursive_core::{ChatProvider, ChatRequest, ChatResponse, ChatStream, ProviderError};

pub use cache::{CacheMode, CacheSettings, DEFAULT_CACHE_MIN_CHARS, DEFAULT_CACHE_TTL};
pub use request::gemini_schema;
pub use response::{ResponseAccumulator, blocked_prompt, finish_reason, parse_response, usage};

use crate::error::LlmError;
use crate::http::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT, HttpClient, join_url};
use crate::shell::{self, ByteStream, WireApi};
use crate::sse::{self, Decoder, SseFrame};

/// Default base URL (the API version is added).
pub const DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com";

/// Default model.
pub const DEFAULT_MODEL: &str = "gemini-2.5-flash";

/// API version added to a base URL that names none.
pub const API_VERSION: &str = "v1beta";

/// `Reasoning::id` of a thought part.
pub const THOUGHT_ID: &str = "gemini:thought";

/// `Reasoning::id` of the signature on the answer text.
pub const TEXT_SIGNATURE_ID: &str = "gemini:text";

/// Prefix of the `Reasoning::id` of the signature on a function call (the call id follows).
pub const CALL_SIGNATURE_PREFIX: &str = "gemini:call:";

/// Prefix of a call id the client made up because the API gave none (never sent back).
pub const SYNTHETIC_CALL_PREFIX: &str = "gemini-call-";

/// How to reach the Gemini API.
#[derive(Clone, PartialEq)]
pub struct GeminiConfig {
    /// Name in messages and events.
    pub name: String,
    /// Base URL, e.g. `https://generativelanguage.googleapis.com` (`/v1beta` is added unless
    /// it ends with an API version).
    pub base_url: String,
    /// API key (`x-goog-api-key`); `None` sends none.
    pub api_key: Option<String>,
    /// Model used when a request names none.
    pub model: String,
    /// Stream the answer (SSE) or ask for one JSON response.
    pub stream: bool,
    /// Token cap (`maxOutputTokens`) used when a request sets none.
    pub default_max_tokens: Option<u32>,
    /// Limit on a whole call, streaming included.
    pub timeout: Duration,
    /// Limit on connecting.
    pub connect_timeout: Duration,
    /// Extra headers sent with every request.
    pub headers: BTreeMap<String, String>,
    /// Explicit context caching of a long, reused system instruction and tools.
    pub cache: CacheSettings,
}

shell::redacted_debug!(GeminiConfig { default_max_tokens, cache });

impl Default for GeminiConfig {
    fn default() -> Self {
        Self {
            name: "gemini".into(),
            base_url: DEFAULT_BASE_URL.into(),
            api_key: None,
            model: DEFAULT_MODEL.into(),
            stream: true,
            default_max_tokens: None,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            headers: BTreeMap::new(),
            cache: CacheSettings::default(),
        }
    }
}

impl GeminiConfig {
    /// A configuration for this base URL, with defaults for the rest.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self { base_url: base_url.into(), ..Self::default() }
    }

    /// The model a request goes to and its wire body.
    pub fn request_body<'a>(
        &self,
        request: &'a ChatRequest,
    ) -> Result<(String, wire::GenerateContentRequest<'a>), ProviderError> {
        let defaults = request::Defaults { name: &self.name, model: &self.model, max_tokens: self.default_max_tokens };
        request::request_body(&defaults, request)
    }

    /// The URL of a call of `model`: streamed (`:streamGenerateContent?alt=sse`) or not.
    pub fn url(&self, model: &str) -> String {
        let method = if self.stream { "streamGenerateContent?alt=sse" } else { "generateContent" };
        format!("{}/models/{model}:{method}", self.api_root())
    }

    /// The URL cached contents are created at.
    pub fn cache_url(&self) -> String {
        format!("{}/cachedContents", self.api_root())
    }

    /// The base URL with its API version (`/v1beta` added unless it names one).
    fn api_root(&self) -> String {
        let base = self.base_url.trim_end_matches('/');
        let versioned = base
            .rsplit('/')
            .next()
            .is_some_and(|last| last.strip_prefix('v').is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit())));
        if versioned { base.to_string() } else { join_url(base, API_VERSION) }
    }
}

type ChunkDecoder = sse::Decoding<ResponseAccumulator>;

impl Decoder for ChunkDecoder {
    fn take_reasoning(&mut self) -> Vec<String> {
        self.acc.take_reasoning()
    }

    fn feed(&mut self, frame: &SseFrame) -> Result<Vec<String>, ProviderError> {
        match sse::frame_json::<wire::GenerateContentResponse>(&self.provider, frame, "response chunk")? {
            Some(chunk) => self.acc.push(&self.provider, chunk),
            None => Ok(Vec::new()),
        }
    }

    /// The stream has no end event: it ends when the body does (the chunk with the finish
    /// reason also carries the final usage, which may follow in one more chunk).
    fn is_done(&self) -> bool {
        false
    }

    fn finish(&mut self) -> Result<ChatResponse, ProviderError> {
        let missing = "a chunk with a finish reason";
        sse::finished(&self.provider, self.acc.is_finished(), missing, &self.fallback_model, || self.acc.finish())
    }
}

/// A client of the Gemini API: the wire mapping of [`GeminiConfig`] over one HTTP client, with
/// the explicit caches it made (see [`cache`]). Clones share the caches.
#[derive(Debug, Clone)]
pub struct GeminiProvider {
    config: GeminiConfig,
    http: HttpClient,
    headers: Vec<(String, String)>,
    caches: Arc<cache::Caches>,
}

impl GeminiProvider {
    /// A client for this configuration.
    pub fn new(config: GeminiConfig) -> Result<Self, LlmError> {
        let http = HttpClient::new(&config.name, config.timeout, config.connect_timeout)?;
        let headers = WireApi::headers(&config);
        Ok(Self { config, http, headers, caches: Arc::default() })
    }

    /// The configuration.
    pub fn config(&self) -> &GeminiConfig {
        &self.config
    }

    /// One `generateContent` call with this body.
    async fn send(&self, model: &str, body: &wire::GenerateContentRequest<'_>) -> Result<ChatStream, ProviderError> {
        let url = self.config.url(model);
        let name = self.config.name.as_str();
        let decode = |bytes, model| <GeminiConfig as WireApi>::decode(name, bytes, model);
        let parse = |bytes: &[u8]| parse_response(name, bytes);
        self.http.exchange(&url, &self.headers, body, self.config.stream, model.to_string(), decode, parse).await
    }

    /// Stores `prefix` as a cached content for `model`.
    async fn create_cache(&self, model: &str, prefix: &wire::CachePrefix<'_>) -> Result<String, ProviderError> {
        let body = wire::CreateCachedContent {
            model: format!("models/{model}"),
            display_name: None,
            prefix,
            ttl: cache::ttl_text(self.config.cache.ttl),
        };
        let response = self.http.post_json(&self.config.cache_url(), &self.headers, &body).await?;
        let bytes = self.http.body(response).await?;
        let malformed = |message: String| ProviderError::Malformed { provider: self.config.name.clone(), message };
        let created: wire::CachedContent = serde_json::from_slice(&bytes)
            .map_err(|e| malformed(format!("cannot read the cached content created: {e}")))?;
        if created.name.is_empty() {
            return Err(malformed("the cached content created has no name".into()));
        }
        Ok(created.name)
    }

    /// The name of a live cache of `prefix`, made now if there is none (one maker at a time per
    /// prefix: a concurrent call waits and uses it); `None` when the prefix goes uncached.
    async fn cache_name(&self, model: &str, prefix: &wire::CachePrefix<'_>, key: cache::Key) -> Option<String> {
        let slot = self.caches.slot(key);
        let mut slot = slot.lock().await;
        if *slot == cache::Slot::Refused {
            return None;
        }
        if let Some(name) = slot.usable(Instant::now()) {
            return Some(name.to_string());
        }
        let started = Instant::now();
        let limit = self.config.timeout.min(cache::CREATE_TIMEOUT);
        let created = tokio::time::timeout(limit, self.create_cache(model, prefix)).await.unwrap_or_else(|_| {
            Err(ProviderError::Timeout { provider: self.config.name.clone(), secs: limit.as_secs_f64() })
        });
        match created {
            Ok(name) => {
                tracing::debug!(provider = %self.config.name, model, cache = %name, "cached the request prefix");
                *slot = cache::Slot::Live { name: name.clone(), until: started + self.config.cache.ttl };
                Some(name)
            }
            Err(e) => {
                tracing::warn!(provider = %self.config.name, model, error = %e, "could not cache the request prefix; sending it uncached");
                *slot = if cache::refused(&e) { cache::Slot::Refused } else { cache::Slot::Empty };
                None
            }
        }
    }

    /// After a request naming `name` found it gone: the slot forgets it (unless another call
    /// already replaced it), or refuses the prefix from now on when `last` (it was made anew).
    async fn forget(&self, key: cache::Key, name: &str, last: bool) {
        let slot = self.caches.slot(key);
        let mut slot = slot.lock().await;
        let same = matches!(&*slot, cache::Slot::Live { name: n, .. } if n == name);
        if same {
            *slot = if last { cache::Slot::Refused } else { cache::Slot::Empty };
        }
    }
}

#[async_trait]
impl ChatProvider for GeminiProvider {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn default_model(&self) -> &str {
        &self.config.model
    }

    /// Sends the request, its prefix from a cache when `cache::Caches::wants` it: a cache
    /// found gone is made anew once, then the request goes uncached.
    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ProviderError> {
        let (model, mut body) = self.config.request_body(&request)?;
        if self.config.cache.mode == CacheMode::Off || (body.system_instruction.is_none() && body.tools.is_empty()) {
            return self.send(&model, &body).await;
        }
        let prefix = wire::CachePrefix {
            system_instruction: body.system_instruction.take(),
            tools: std::mem::take(&mut body.tools),
            tool_config: body.tool_config.take(),
        };
        let json = serde_json::to_vec(&prefix).unwrap_or_default();
        let key = cache::Key::of(&model, &json);
        if !json.is_empty() && self.caches.wants(&self.config.cache, key, json.len()) {
            for attempt in 0..2 {
                let Some(name) = self.cache_name(&model, &prefix, key).await else { break };
                body.cached_content = Some(name.clone());
                match self.send(&model, &body).await {
                    Err(e) if cache::cache_gone(&e) => {
                        tracing::info!(provider = %self.config.name, cache = %name, error = %e, "the cache is gone");
                        self.forget(key, &name, attempt == 1).await;
                    }
                    other => return other,
                }
            }
        }
        body.cached_content = None;
        body.system_instruction = prefix.system_instruction;
        body.tools = prefix.tools;
        body.tool_config = prefix.tool_config;
        self.send(&model, &body).await
    }
}

impl WireApi for GeminiConfig {
    type Body<'a> = wire::GenerateContentRequest<'a>;

    shell::common_fields!();

    fn auth_headers(&self) -> Vec<(String, String)> {
        let key = self.api_key.as_ref().filter(|k| !k.is_empty());
        key.map(|k| ("x-goog-api-key".to_string(), k.clone())).into_iter().collect()
    }

    /// No `accept`: the streaming URL asks for SSE itself (`alt=sse`).
    fn accepts_sse(&self) -> bool {
        false
    }

    fn wire_body<'a>(&'a self, request: &'a ChatRequest) -> Result<(String, Self::Body<'a>), ProviderError> {
        self.request_body(request)
    }

    fn endpoint(&self, model: &str) -> String {
        self.url(model)
    }

    fn decode(provider: &str, bytes: ByteStream, fallback_model: String) -> ChatStream {
        sse::decode::<ResponseAccumulator>(provider, bytes, fallback_model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recursive_core::StopReason;
    use serde_json::{Value, json};

    fn chunk(value: Value) -> wire::GenerateContentResponse {
        serde_json::from_value(value).unwrap()
    }

    fn feed(acc: &mut ResponseAccumulator, chunks: Vec<Value>) -> Vec<String> {
        chunks.into_iter().flat_map(|c| acc.push("gemini", chunk(c)).unwrap()).collect()
    }

    #[test]
    fn thoughts_stream_as_reasoning_and_signatures_stay_with_their_parts() {
        let mut acc = ResponseAccumulator::new();
        let shown = feed(
            &mut acc,
            vec![
                json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Plan ", "thought": true}]}}]}),
                json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "it.", "thought": true}]}}]}),
                json!({"candidates": [{"content": {"role": "model", "parts": [
                    {"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": "sig-1"},
                    {"functionCall": {"name": "g", "args": {}}}]}, "finishReason": "STOP"}],
                    "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 4, "thoughtsTokenCount": 6},
                    "modelVersion": "gemini-2.5-flash"}),
            ],
        );
        assert!(shown.is_empty(), "neither thoughts nor calls are answer text: {shown:?}");
        assert_eq!(acc.take_reasoning(), ["Plan ", "it."]);
        let r = acc.finish();
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        let calls = &r.message.tool_calls;
        assert_eq!((calls[0].name.as_str(), &calls[0].arguments), ("f", &json!({"a": 1})));
        assert!(calls[0].id.starts_with(SYNTHETIC_CALL_PREFIX) && calls[0].id != calls[1].id);
        let reasoning = &r.message.reasoning;
        assert_eq!((reasoning[0].id.as_str(), reasoning[0].text.as_str()), (THOUGHT_ID, "Plan it."));
        assert_eq!(reasoning[1].id, format!("{CALL_SIGNATURE_PREFIX}{}", calls[0].id));
        assert_eq!(reasoning[1].signature, "sig-1");
        assert_eq!(reasoning.len(), 2, "the second call carried no signature");
        assert_eq!(r.usage.output_tokens, 10);
        assert_eq!(r.model, "gemini-2.5-flash");
    }

    #[test]
    fn a_signature_in_a_last_empty_text_chunk_belongs_to_the_text() {
        let mut acc = ResponseAccumulator::new();
        let shown = feed(
            &mut acc,
            vec![
                json!({"candidates": [{"content": {"parts": [{"text": "Hello "}]}}]}),
                json!({"candidates": [{"content": {"parts": [{"text": "world"}]}}]}),
                json!({"candidates": [{"content": {"parts": [{"text": "", "thoughtSignature": "sig-t"}]},
                    "finishReason": "STOP"}]}),
            ],
        );
        assert_eq!(shown.concat(), "Hello world");
        let r = acc.finish();
        assert_eq!(r.message.content, "Hello world");
        assert_eq!(r.stop_reason, StopReason::EndTurn);
        assert_eq!(
            (r.message.reasoning[0].id.as_str(), r.message.reasoning[0].signature.as_str()),
            (TEXT_SIGNATURE_ID, "sig-t")
        );
    }

    #[test]
    fn usage_counts_cached_prompt_tokens_as_cache_reads_and_thoughts_as_output() {
        let u: wire::UsageMetadata = serde_json::from_value(json!({"promptTokenCount": 1000,
            "cachedContentTokenCount": 600, "candidatesTokenCount": 100, "thoughtsTokenCount": 200,
            "totalTokenCount": 1300}))
        .unwrap();
        assert_eq!(
            usage(&u),
            recursive_core::Usage {
                input_tokens: 400,
                output_tokens: 300,
                cache_read_tokens: 600,
                cache_write_tokens: 0
            }
        );
    }

    #[test]
    fn finish_reasons_map_to_stop_reasons() {
        assert_eq!(finish_reason("STOP", false), StopReason::EndTurn);
        assert_eq!(finish_reason("STOP", true), StopReason::ToolUse);
        assert_eq!(finish_reason("MAX_TOKENS", true), StopReason::MaxTokens);
        assert_eq!(finish_reason("SAFETY", false), StopReason::Other("safety".into()));
        assert_eq!(finish_reason("RECITATION", false), StopReason::Other("recitation".into()));
        assert_eq!(finish_reason("PROHIBITED_CONTENT", false), StopReason::Other("prohibited_content".into()));
        assert_eq!(blocked_prompt("BLOCKLIST"), StopReason::Other("prompt_blocked_blocklist".into()));
    }

    #[test]
    fn an_error_object_is_an_error_with_its_status() {
        let mut acc = ResponseAccumulator::new();
        let err = acc
            .push(
                "gemini",
                chunk(json!({"error": {"code": 429, "message": "Quota exceeded.", "status": "RESOURCE_EXHAUSTED"}})),
            )
            .unwrap_err();
        assert!(
            matches!(&err, ProviderError::Http { status: 429, message, .. } if message == "RESOURCE_EXHAUSTED: Quota exceeded."),
            "{err:?}"
        );
    }

    #[test]
    fn a_whole_answer_parses_and_an_empty_one_is_malformed() {
        let body = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "42"}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 1}, "modelVersion": "gemini-2.5-pro"});
        let r = parse_response("gemini", body.to_string().as_bytes()).unwrap();
        assert_eq!((r.message.content.as_str(), r.usage.input_tokens), ("42", 5));
        assert!(matches!(parse_response("gemini", b"{}"), Err(ProviderError::Malformed { .. })));
    }

    #[test]
    fn urls_add_the_api_version_unless_the_base_names_one() {
        let mut c = GeminiConfig::new("http://127.0.0.1:9/");
        assert_eq!(
            c.url("gemini-2.5-flash"),
            "http://127.0.0.1:9/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        );
        c.base_url = "https://example.test/v1".into();
        c.stream = false;
        assert_eq!(c.url("m"), "https://example.test/v1/models/m:generateContent");
    }

    #[test]
    fn the_api_key_is_redacted_in_debug_output() {
        let c = GeminiConfig { api_key: Some("AIza-secret".into()), ..Default::default() };
        assert!(!format!("{c:?}").contains("AIza-secret"));
    }
}
