//! AWS Bedrock Runtime's Converse API (`POST {endpoint}/model/{modelId}/converse-stream`, an
//! `application/vnd.amazon.eventstream` answer framed by [`crate::eventstream`], or
//! `/converse` for one JSON answer). The model id — a foundation model
//! (`anthropic.claude-sonnet-4-5-20250929-v1:0`), an inference profile
//! (`us.anthropic.…`, `global.anthropic.…`) or an ARN — is percent-encoded into the path.
//!
//! Every request is signed with AWS Signature Version 4 ([`signing`], service `bedrock`, the
//! configured region) by credentials from the standard chain ([`credentials`]: environment,
//! shared profile, web identity — temporary ones refreshed before they expire), through the
//! shell's signing hook ([`crate::shell::WireApi::sign`]); or, with a Bedrock API key
//! (`AWS_BEARER_TOKEN_BEDROCK`), it carries `Authorization: Bearer` and no signature.
//!
//! Two pure transforms around one HTTP call: [`request::request_body`] (core request → wire
//! body: system blocks, text, `toolUse` / `toolResult`, reasoning sent back with its signature,
//! cache points, inference config, Claude's thinking) and, back, [`ResponseAccumulator`]
//! (stream events → response) or [`parse_response`] (one whole answer → response).
//!
//! Reasoning is kept the way the Anthropic provider keeps Claude's thinking (a
//! [`recursive_core::Reasoning`] with no id: text and signature, or redacted data), so a
//! transcript moves between the two and the signed blocks go back on the next turn of a tool
//! loop, as Claude requires.

pub mod credentials;
pub mod request;
pub mod response;
pub mod signing;
pub mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use recursive_core::{ChatRequest, ChatResponse, ChatStream, ProviderError};

pub use credentials::{CredentialProvider, Credentials};
pub use response::{ResponseAccumulator, parse_response, stop_reason, usage};

use crate::eventstream::{self, EventMessage};
use crate::http::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT, join_url};
use crate::shell::{self, ByteStream, HttpProvider, Unsigned, WireApi};
use crate::sse::{self, Decoder};

/// Default model: Claude Sonnet 4.5 through the global cross-region inference profile.
pub const DEFAULT_MODEL: &str = "global.anthropic.claude-sonnet-4-5-20250929-v1:0";

/// The Bedrock Runtime endpoint of a region.
pub fn default_endpoint(region: &str) -> String {
    format!("https://bedrock-runtime.{region}.amazonaws.com")
}

/// What a model id keeps unencoded in the path: RFC 3986's unreserved characters.
const PATH_LABEL: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

/// How requests are authenticated.
#[derive(Debug, Clone, Default)]
pub enum Auth {
    /// Signed with AWS SigV4 by these credentials.
    SigV4(Arc<CredentialProvider>),
    /// `Authorization: Bearer` with a Bedrock API key.
    ApiKey(String),
    /// Neither (a local server, or a gateway that signs itself).
    #[default]
    None,
}

/// How to reach Bedrock Runtime.
#[derive(Clone)]
pub struct BedrockConfig {
    /// Name in messages and events.
    pub name: String,
    /// The endpoint, e.g. `https://bedrock-runtime.us-east-1.amazonaws.com`.
    pub base_url: String,
    /// A Bedrock API key (sent as a bearer token instead of a signature).
    pub api_key: Option<String>,
    /// Model used when a request names none.
    pub model: String,
    /// Stream the answer (`converse-stream`) or ask for one JSON response (`converse`).
    pub stream: bool,
    /// The region requests are signed for.
    pub region: String,
    /// The credentials that sign requests (unused with an API key).
    pub credentials: Option<Arc<CredentialProvider>>,
    /// Token cap (`maxTokens`) used when a request sets none.
    pub default_max_tokens: Option<u32>,
    /// Place prompt-cache points (after the system prompt, the tools and the last message).
    pub prompt_caching: bool,
    /// Limit on a whole call, streaming included.
    pub timeout: Duration,
    /// Limit on connecting.
    pub connect_timeout: Duration,
    /// Extra headers sent with every request (signed with it).
    pub headers: BTreeMap<String, String>,
}

shell::redacted_debug!(BedrockConfig { region, credentials, default_max_tokens, prompt_caching });

impl Default for BedrockConfig {
    fn default() -> Self {
        Self {
            name: "bedrock".into(),
            base_url: default_endpoint("us-east-1"),
            api_key: None,
            model: DEFAULT_MODEL.into(),
            stream: true,
            region: "us-east-1".into(),
            credentials: None,
            default_max_tokens: None,
            prompt_caching: true,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            headers: BTreeMap::new(),
        }
    }
}

impl BedrockConfig {
    /// A configuration for this endpoint and region, with defaults for the rest.
    pub fn new(base_url: impl Into<String>, region: impl Into<String>) -> Self {
        Self { base_url: base_url.into(), region: region.into(), ..Self::default() }
    }

    /// How requests are authenticated: the API key, else the credentials, else not at all.
    pub fn auth(&self) -> Auth {
        match (self.api_key.as_ref().filter(|k| !k.is_empty()), &self.credentials) {
            (Some(key), _) => Auth::ApiKey(key.clone()),
            (None, Some(credentials)) => Auth::SigV4(credentials.clone()),
            (None, None) => Auth::None,
        }
    }

    /// The model a request goes to and its wire body.
    pub fn request_body(&self, request: &ChatRequest) -> Result<(String, wire::ConverseRequest), ProviderError> {
        let defaults = request::Defaults {
            name: &self.name,
            model: &self.model,
            max_tokens: self.default_max_tokens,
            prompt_caching: self.prompt_caching,
        };
        request::request_body(&defaults, request)
    }

    /// The URL of a call of `model`: `{endpoint}/model/{model id, percent-encoded}/converse-stream`
    /// (or `/converse`).
    pub fn url(&self, model: &str) -> String {
        let method = if self.stream { "converse-stream" } else { "converse" };
        let model = utf8_percent_encode(model, PATH_LABEL);
        join_url(&self.base_url, &format!("model/{model}/{method}"))
    }
}

/// A client of Bedrock Runtime's Converse API.
pub type BedrockProvider = HttpProvider<BedrockConfig>;

type EventDecoder = sse::Decoding<ResponseAccumulator>;

impl Decoder<EventMessage> for EventDecoder {
    fn feed(&mut self, message: &EventMessage) -> Result<Vec<String>, ProviderError> {
        self.acc.push(&self.provider, message)
    }

    fn take_reasoning(&mut self) -> Vec<String> {
        self.acc.take_reasoning()
    }

    fn is_done(&self) -> bool {
        self.acc.is_done()
    }

    fn finish(&mut self) -> Result<ChatResponse, ProviderError> {
        let missing = "the messageStop event";
        sse::finished(&self.provider, self.acc.is_finished(), missing, &self.fallback_model, || self.acc.finish())
    }
}

impl WireApi for BedrockConfig {
    type Body<'a> = wire::ConverseRequest;

    shell::common_fields!();

    fn auth_headers(&self) -> Vec<(String, String)> {
        match self.auth() {
            Auth::ApiKey(key) => shell::bearer(Some(&key)),
            Auth::SigV4(_) | Auth::None => Vec::new(),
        }
    }

    /// No `accept`: the answer is an AWS event stream, not SSE.
    fn accepts_sse(&self) -> bool {
        false
    }

    fn wire_body<'a>(&'a self, request: &'a ChatRequest) -> Result<(String, Self::Body<'a>), ProviderError> {
        self.request_body(request)
    }

    fn endpoint(&self, model: &str) -> String {
        self.url(model)
    }

    fn sign<'a>(&'a self, request: Unsigned<'a>) -> BoxFuture<'a, Result<Vec<(String, String)>, ProviderError>> {
        Box::pin(async move {
            let Auth::SigV4(provider) = self.auth() else { return Ok(Vec::new()) };
            let credentials = provider.credentials().await?;
            signing::signature_headers(&self.name, &credentials, &self.region, request, SystemTime::now())
        })
    }

    fn decode(provider: &str, bytes: ByteStream, fallback_model: String) -> ChatStream {
        let decoder = EventDecoder { provider: provider.to_string(), acc: ResponseAccumulator::new(), fallback_model };
        sse::drive(provider, eventstream::messages(provider, bytes), decoder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_ids_are_percent_encoded_into_the_path() {
        let config = BedrockConfig::new("https://bedrock-runtime.us-east-1.amazonaws.com/", "us-east-1");
        assert_eq!(
            config.url("us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
            "https://bedrock-runtime.us-east-1.amazonaws.com/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream"
        );
        let arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.amazon.nova-pro-v1:0";
        let plain = BedrockConfig { stream: false, ..config };
        assert_eq!(
            plain.url(arn),
            "https://bedrock-runtime.us-east-1.amazonaws.com/model/\
             arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.amazon.nova-pro-v1%3A0/converse"
        );
    }

    #[test]
    fn an_api_key_is_a_bearer_token_and_the_debug_output_hides_it() {
        let config = BedrockConfig { api_key: Some("ABSK-secret".into()), ..Default::default() };
        assert_eq!(config.headers(), vec![("authorization".to_string(), "Bearer ABSK-secret".to_string())]);
        assert!(!format!("{config:?}").contains("ABSK-secret"));
        assert!(BedrockConfig::default().headers().is_empty());
    }
}
