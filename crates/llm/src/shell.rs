//! The one HTTP provider shell: [`HttpProvider`] owns the HTTP client, the headers, the
//! [`ChatProvider`] impl and the driving of a streamed answer; each provider brings only its
//! wire mapping as a [`WireApi`] (implemented on its configuration): its name, model and
//! stream flag, its URL and auth headers, its request body, its stream decoder and its parse of
//! a complete answer — and, where the API wants every request signed (AWS SigV4), the headers
//! of its signature over the encoded body ([`WireApi::sign`]).

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use recursive_core::{ChatProvider, ChatRequest, ChatResponse, ChatStream, ProviderError};
use serde::Serialize;

use crate::error::LlmError;
use crate::http::HttpClient;

/// The bytes of a response body as they arrive.
pub type ByteStream = BoxStream<'static, Result<Bytes, ProviderError>>;

/// A request about to be sent, as a signature covers it.
#[derive(Debug, Clone, Copy)]
pub struct Unsigned<'a> {
    /// The URL it is posted to.
    pub url: &'a str,
    /// Every header it is sent with, `content-type` included.
    pub headers: &'a [(String, String)],
    /// The encoded body.
    pub body: &'a [u8],
}

/// One provider's wire mapping: everything [`HttpProvider`] does not share.
pub trait WireApi: Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The wire body of one request.
    type Body<'a>: Serialize + Send + Sync
    where
        Self: 'a;

    /// Name in messages and events.
    fn name(&self) -> &str;

    /// Model used when a request names none.
    fn default_model(&self) -> &str;

    /// Whether answers are streamed (SSE) rather than one JSON response.
    fn streams(&self) -> bool;

    /// Limits on a whole call and on connecting.
    fn timeouts(&self) -> (Duration, Duration);

    /// The headers that authenticate (and version) a request.
    fn auth_headers(&self) -> Vec<(String, String)>;

    /// Extra headers from the configuration.
    fn extra_headers(&self) -> &BTreeMap<String, String>;

    /// Whether a streamed request asks for SSE with `accept: text/event-stream` — not where the
    /// URL chooses the stream (Gemini's `alt=sse`) or the stream is framed otherwise (Bedrock).
    fn accepts_sse(&self) -> bool {
        self.streams()
    }

    /// Every header of a request: the extra ones, the auth ones, then `accept` when it asks
    /// for SSE.
    fn headers(&self) -> Vec<(String, String)> {
        let mut headers = pairs(self.extra_headers());
        headers.extend(self.auth_headers());
        headers.extend(accept(self.accepts_sse()));
        headers
    }

    /// The model a request goes to and its wire body.
    fn wire_body<'a>(&'a self, request: &'a ChatRequest) -> Result<(String, Self::Body<'a>), ProviderError>;

    /// The URL a call of `model` is posted to.
    fn endpoint(&self, model: &str) -> String;

    /// Headers computed for each request from its URL, headers and encoded body, added just
    /// before it is sent — a request signature (AWS SigV4, with credentials that may be
    /// refreshed first). None by default.
    fn sign<'a>(&'a self, _request: Unsigned<'a>) -> BoxFuture<'a, Result<Vec<(String, String)>, ProviderError>> {
        Box::pin(futures::future::ready(Ok(Vec::new())))
    }

    /// Decodes a streamed answer; a response naming no model gets `fallback_model`.
    fn decode(provider: &str, bytes: ByteStream, fallback_model: String) -> ChatStream;

    /// Parses a complete (non-streamed) answer.
    fn parse(provider: &str, body: &[u8]) -> Result<ChatResponse, ProviderError>;
}

/// The [`WireApi`] methods every configuration answers from its common fields (`name`,
/// `model`, `stream`, `timeout`, `connect_timeout`, `headers`), plus the parse of a complete
/// answer by the module's `parse_response`.
macro_rules! common_fields {
    () => {
        fn name(&self) -> &str {
            &self.name
        }

        fn default_model(&self) -> &str {
            &self.model
        }

        fn streams(&self) -> bool {
            self.stream
        }

        fn timeouts(&self) -> (std::time::Duration, std::time::Duration) {
            (self.timeout, self.connect_timeout)
        }

        fn extra_headers(&self) -> &std::collections::BTreeMap<String, String> {
            &self.headers
        }

        fn parse(provider: &str, body: &[u8]) -> Result<ChatResponse, ProviderError> {
            parse_response(provider, body)
        }
    };
}
pub(crate) use common_fields;

/// A configuration's `Debug`, with the key redacted and only the extra headers' names: the
/// common fields, with the provider's own (`$field`s) between `stream` and `timeout`.
macro_rules! redacted_debug {
    ($config:ident { $($field:ident),* }) => {
        impl std::fmt::Debug for $config {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($config))
                    .field("name", &self.name)
                    .field("base_url", &self.base_url)
                    .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
                    .field("model", &self.model)
                    .field("stream", &self.stream)
                    $(.field(stringify!($field), &self.$field))*
                    .field("timeout", &self.timeout)
                    .field("connect_timeout", &self.connect_timeout)
                    .field("headers", &self.headers.keys().collect::<Vec<_>>())
                    .finish()
            }
        }
    };
}
pub(crate) use redacted_debug;

/// Configured headers as name–value pairs.
pub(crate) fn pairs(headers: &BTreeMap<String, String>) -> Vec<(String, String)> {
    headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// The `accept: text/event-stream` header when streaming.
pub(crate) fn accept(streaming: bool) -> Option<(String, String)> {
    streaming.then(|| ("accept".to_string(), "text/event-stream".to_string()))
}

/// The `Authorization: Bearer` header for a non-empty key.
pub(crate) fn bearer(api_key: Option<&String>) -> Vec<(String, String)> {
    api_key
        .filter(|k| !k.is_empty())
        .map(|k| ("authorization".to_string(), format!("Bearer {k}")))
        .into_iter()
        .collect()
}

/// Decodes an SSE byte stream of `W`'s protocol (no request model to fall back on).
pub fn stream_from_bytes<W, S>(provider: &str, bytes: S) -> ChatStream
where
    W: WireApi,
    S: Stream<Item = Result<Bytes, ProviderError>> + Send + 'static,
{
    W::decode(provider, bytes.boxed(), String::new())
}

/// A client of one HTTP model API, speaking it through `W`.
#[derive(Debug, Clone)]
pub struct HttpProvider<W> {
    config: W,
    http: HttpClient,
    headers: Vec<(String, String)>,
}

impl<W: WireApi> HttpProvider<W> {
    /// A client for this configuration.
    pub fn new(config: W) -> Result<Self, LlmError> {
        let (timeout, connect_timeout) = config.timeouts();
        let http = HttpClient::new(config.name(), timeout, connect_timeout)?;
        let headers = config.headers();
        Ok(Self { config, http, headers })
    }

    /// The configuration.
    pub fn config(&self) -> &W {
        &self.config
    }

    /// The headers of one request: the configured ones, then its signature's (if any).
    async fn signed_headers(&self, url: &str, payload: &[u8]) -> Result<Vec<(String, String)>, ProviderError> {
        let mut sent = vec![("content-type".to_string(), "application/json".to_string())];
        sent.extend(self.headers.iter().cloned());
        let signature = self.config.sign(Unsigned { url, headers: &sent, body: payload }).await?;
        let mut headers = self.headers.clone();
        headers.extend(signature);
        Ok(headers)
    }
}

#[async_trait]
impl<W: WireApi> ChatProvider for HttpProvider<W> {
    fn name(&self) -> &str {
        self.config.name()
    }

    fn default_model(&self) -> &str {
        self.config.default_model()
    }

    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ProviderError> {
        let (model, body) = self.config.wire_body(&request)?;
        let url = self.config.endpoint(&model);
        let payload = self.http.encode(&body)?;
        let headers = self.signed_headers(&url, &payload).await?;
        let name = self.config.name();
        let decode = |bytes, model| W::decode(name, bytes, model);
        let parse = |bytes: &[u8]| W::parse(name, bytes);
        self.http.exchange_payload(&url, &headers, payload, self.config.streams(), model, decode, parse).await
    }
}
