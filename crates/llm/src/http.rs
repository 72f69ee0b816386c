//! HTTP plumbing shared by the HTTP providers: a client with its timeouts, posting a JSON body,
//! turning an error status into [`ProviderError::Http`] with the provider's own message and its
//! `Retry-After`, and classifying transport failures (timeout, refused, dropped).

use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use recursive_core::{ChatResponse, ChatStream, ProviderError, provider::response_stream};
use reqwest::header::{CONTENT_TYPE, HeaderMap};
use serde::Serialize;

use crate::error::LlmError;

/// Default limit on a whole call, streaming included.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Default limit on establishing the connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest error body quoted in an error message.
const MAX_ERROR_BODY: usize = 600;

/// Most bytes read of one response, streamed or not: far above any real completion (128K
/// output tokens streamed as one event each is about 25 MB), far below what would exhaust memory.
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// Most bytes of one line of an event stream (one `data:` line carries one event).
pub const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// Most bytes read of an error response.
const MAX_ERROR_BYTES: usize = 64 * 1024;

/// Byte counts of a response being read, against [`MAX_RESPONSE_BYTES`] and [`MAX_LINE_BYTES`].
#[derive(Debug, Default)]
struct Meter {
    total: usize,
    line: usize,
}

impl Meter {
    /// Counts a chunk; says which cap it broke, if any.
    fn count(&mut self, chunk: &[u8], max_total: usize, max_line: usize) -> Option<String> {
        self.total += chunk.len();
        if self.total > max_total {
            return Some(format!("the response is larger than {max_total} bytes; stopped reading it"));
        }
        let mut longest = 0;
        for (i, piece) in chunk.split(|b| *b == b'\n' || *b == b'\r').enumerate() {
            // The first piece continues the line of the previous chunk.
            self.line = if i == 0 { self.line + piece.len() } else { piece.len() };
            longest = longest.max(self.line);
        }
        (longest > max_line)
            .then(|| format!("a line of the response is longer than {max_line} bytes; stopped reading it"))
    }
}

/// A body stream that ends with an error once it passes a cap.
pub(crate) fn capped<S>(
    provider: &str,
    body: S,
    max_total: usize,
    max_line: usize,
) -> BoxStream<'static, Result<Bytes, ProviderError>>
where
    S: futures::Stream<Item = Result<Bytes, ProviderError>> + Send + 'static,
{
    let provider = provider.to_string();
    body.scan((Meter::default(), false), move |(meter, over), item| {
        if *over {
            return futures::future::ready(None);
        }
        let item = match item {
            Ok(chunk) => match meter.count(&chunk, max_total, max_line) {
                Some(message) => {
                    *over = true;
                    Err(ProviderError::Malformed { provider: provider.clone(), message })
                }
                None => Ok(chunk),
            },
            Err(e) => Err(e),
        };
        futures::future::ready(Some(item))
    })
    .boxed()
}

/// A reqwest client bound to one provider name and its timeouts.
#[derive(Debug, Clone)]
pub(crate) struct HttpClient {
    client: reqwest::Client,
    provider: String,
    timeout: Duration,
}

impl HttpClient {
    /// A client for `provider` with a total and a connect timeout.
    pub(crate) fn new(provider: &str, timeout: Duration, connect_timeout: Duration) -> Result<Self, LlmError> {
        let client = recursive_http::client_builder()
            .timeout(timeout)
            .connect_timeout(connect_timeout)
            .user_agent(concat!("recursive/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| LlmError::HttpClient { provider: provider.to_string(), message: e.to_string() })?;
        Ok(Self { client, provider: provider.to_string(), timeout })
    }

    /// Posts `body` as JSON with extra headers; an error status becomes [`ProviderError::Http`].
    pub(crate) async fn post_json(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &impl Serialize,
    ) -> Result<reqwest::Response, ProviderError> {
        let payload = self.encode(body)?;
        self.post_payload(url, headers, payload).await
    }

    /// A request body as JSON bytes.
    pub(crate) fn encode(&self, body: &impl Serialize) -> Result<Vec<u8>, ProviderError> {
        serde_json::to_vec(body)
            .map_err(|e| ProviderError::Invalid(format!("{}: cannot encode the request: {e}", self.provider)))
    }

    /// Posts JSON bytes with extra headers; an error status becomes [`ProviderError::Http`].
    pub(crate) async fn post_payload(
        &self,
        url: &str,
        headers: &[(String, String)],
        payload: Vec<u8>,
    ) -> Result<reqwest::Response, ProviderError> {
        let mut builder = self.client.post(url).header(CONTENT_TYPE, "application/json").body(payload);
        for (name, value) in headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        tracing::debug!(provider = %self.provider, url, "sending request");
        let response = builder.send().await.map_err(|e| self.transport_error(e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let header_wait = retry_after(response.headers());
        let bytes = self.read_all(response, MAX_ERROR_BYTES).await.unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        let retry_after_secs = header_wait.or_else(|| retry_delay_in_body(&text));
        Err(ProviderError::Http {
            provider: self.provider.clone(),
            status: status.as_u16(),
            message: error_message(&text, status.canonical_reason().unwrap_or("error")),
            retry_after_secs,
        })
    }

    /// One completion exchange: posts `body`; a streamed (SSE) answer is decoded by `decode`, a
    /// JSON one (non-streaming mode, or a server that ignored `stream: true`) by `parse`. The
    /// request's `model` fills in a response that names none.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn exchange(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &impl Serialize,
        streaming: bool,
        model: String,
        decode: impl FnOnce(BoxStream<'static, Result<Bytes, ProviderError>>, String) -> ChatStream,
        parse: impl FnOnce(&[u8]) -> Result<ChatResponse, ProviderError>,
    ) -> Result<ChatStream, ProviderError> {
        let payload = self.encode(body)?;
        self.exchange_payload(url, headers, payload, streaming, model, decode, parse).await
    }

    /// [`HttpClient::exchange`] of a body already encoded (and signed over).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn exchange_payload(
        &self,
        url: &str,
        headers: &[(String, String)],
        payload: Vec<u8>,
        streaming: bool,
        model: String,
        decode: impl FnOnce(BoxStream<'static, Result<Bytes, ProviderError>>, String) -> ChatStream,
        parse: impl FnOnce(&[u8]) -> Result<ChatResponse, ProviderError>,
    ) -> Result<ChatStream, ProviderError> {
        let response = self.post_payload(url, headers, payload).await?;
        let is_json = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        if streaming && !is_json {
            return Ok(decode(self.byte_stream(response), model));
        }
        let bytes = self.body(response).await?;
        let mut parsed = parse(&bytes)?;
        if parsed.model.is_empty() {
            parsed.model = model;
        }
        Ok(response_stream(parsed))
    }

    /// Reads a whole (non-streamed) body, at most [`MAX_RESPONSE_BYTES`].
    pub(crate) async fn body(&self, response: reqwest::Response) -> Result<Bytes, ProviderError> {
        self.read_all(response, MAX_RESPONSE_BYTES).await
    }

    /// Reads a body up to `max` bytes; more is an error.
    async fn read_all(&self, response: reqwest::Response, max: usize) -> Result<Bytes, ProviderError> {
        let mut chunks = capped(&self.provider, self.raw_stream(response), max, usize::MAX);
        let mut body = Vec::new();
        while let Some(chunk) = chunks.next().await {
            body.extend_from_slice(&chunk?);
        }
        Ok(Bytes::from(body))
    }

    fn raw_stream(&self, response: reqwest::Response) -> BoxStream<'static, Result<Bytes, ProviderError>> {
        let this = self.clone();
        response.bytes_stream().map_err(move |e| this.body_error(e)).boxed()
    }

    /// The body as a stream of chunks, transport failures classified, capped at
    /// [`MAX_RESPONSE_BYTES`] in all and [`MAX_LINE_BYTES`] per line.
    pub(crate) fn byte_stream(&self, response: reqwest::Response) -> BoxStream<'static, Result<Bytes, ProviderError>> {
        capped(&self.provider, self.raw_stream(response), MAX_RESPONSE_BYTES, MAX_LINE_BYTES)
    }

    /// Classifies a failure before any response arrived.
    pub(crate) fn transport_error(&self, e: reqwest::Error) -> ProviderError {
        if e.is_timeout() {
            ProviderError::Timeout { provider: self.provider.clone(), secs: self.timeout.as_secs_f64() }
        } else {
            ProviderError::Connection { provider: self.provider.clone(), message: recursive_http::error_chain(&e) }
        }
    }

    /// Classifies a failure while the body was being read.
    fn body_error(&self, e: reqwest::Error) -> ProviderError {
        if e.is_timeout() {
            ProviderError::Timeout { provider: self.provider.clone(), secs: self.timeout.as_secs_f64() }
        } else {
            ProviderError::Truncated {
                provider: self.provider.clone(),
                message: format!(
                    "the connection dropped while the response was being read: {}",
                    recursive_http::error_chain(&e)
                ),
            }
        }
    }
}

/// The provider's own message from an error body: `{"error":{"message":..}}` (OpenAI and
/// Anthropic), `{"error":"..."}` (Ollama), `{"message":..}`, `{"Message":..}` (AWS) or
/// `{"detail":..}`; otherwise the body itself, clipped, or `fallback` when it is empty.
pub fn error_message(body: &str, fallback: &str) -> String {
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(body) {
        let error = &v["error"];
        // `Message`: AWS services' spelling.
        let candidates = [&error["message"], error, &v["message"], &v["Message"], &v["detail"]];
        for c in candidates {
            if let Some(s) = c.as_str().filter(|s| !s.trim().is_empty()) {
                return s.to_string();
            }
        }
        if let Some(detail) = v.get("detail").filter(|d| !d.is_null()) {
            return clip(&detail.to_string(), MAX_ERROR_BODY);
        }
    }
    let trimmed = body.trim();
    if trimmed.is_empty() { fallback.to_string() } else { clip(trimmed, MAX_ERROR_BODY) }
}

/// Seconds to wait from `retry-after-ms`, or `retry-after` as seconds or an HTTP date.
pub fn retry_after(headers: &HeaderMap) -> Option<f64> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()).filter(|v| v.is_finite()) {
        return Some((ms / 1000.0).max(0.0));
    }
    parse_retry_after(text("retry-after")?)
}

/// The wait a Google API names in its error body instead of a header: a `RetryInfo` detail's
/// `retryDelay` (`{"error": {"details": [{"retryDelay": "37s"}]}}`, a protobuf duration).
///
/// None for a quota that lasts the day (a `QuotaFailure` violation naming a per-day quota): no
/// wait within a run ends it, so the retries stay within their count.
pub fn retry_delay_in_body(body: &str) -> Option<f64> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let details = v["error"]["details"].as_array()?;
    let per_day = |d: &serde_json::Value| {
        d["violations"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|violation| violation["quotaId"].as_str().is_some_and(|q| q.contains("PerDay")))
    };
    if details.iter().any(per_day) {
        return None;
    }
    let delay = details.iter().find_map(|d| d["retryDelay"].as_str())?;
    let secs = delay.trim().strip_suffix('s')?.parse::<f64>().ok()?;
    (secs.is_finite() && secs > 0.0).then_some(secs)
}

/// Parses a `Retry-After` value: delay seconds (`"2"`, `"1.5"`) or an HTTP date, giving the
/// seconds from now until then (0 when it is past).
pub fn parse_retry_after(value: &str) -> Option<f64> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return secs.is_finite().then_some(secs.max(0.0));
    }
    let date = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = date.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some((wait.num_milliseconds() as f64 / 1000.0).max(0.0))
}

/// Shortens `text` to at most `max` characters, marking the cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    recursive_core::text::clip_chars(text, max)
}

/// Joins a base URL and a path with exactly one slash.
pub(crate) fn join_url(base: &str, path: &str) -> String {
    format!("{}/{}", base.trim_end_matches('/'), path.trim_start_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[tokio::test]
    async fn streams_end_with_an_error_past_their_caps() {
        let chunks =
            |parts: Vec<&'static [u8]>| futures::stream::iter(parts.into_iter().map(|p| Ok(Bytes::from_static(p))));
        let read = |s: BoxStream<'static, Result<Bytes, ProviderError>>| async move { s.collect::<Vec<_>>().await };

        let out = read(capped("p", chunks(vec![b"data: a\n\n", b"data: b\n\n"]), 100, 10)).await;
        assert!(out.iter().all(Result::is_ok));

        let out = read(capped("p", chunks(vec![b"data: 1234", b"567890\n", b"never read"]), 100, 10)).await;
        assert_eq!(out.len(), 2, "the stream ends at the error");
        assert!(out[1].as_ref().unwrap_err().to_string().contains("line of the response is longer than 10"));

        let out = read(capped("p", chunks(vec![b"0123\n", b"4567\n", b"89ab\n"]), 12, 100)).await;
        assert!(out[2].as_ref().unwrap_err().to_string().contains("larger than 12 bytes"));
    }

    #[test]
    fn error_message_reads_openai_and_anthropic_shapes() {
        let openai = r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}"#;
        assert_eq!(error_message(openai, "x"), "Incorrect API key provided");
        let anthropic = r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
        assert_eq!(error_message(anthropic, "x"), "invalid x-api-key");
        assert_eq!(error_message(r#"{"error":"model 'x' not found"}"#, "x"), "model 'x' not found");
        assert_eq!(
            error_message(r#"{"Message":"The security token is invalid"}"#, "x"),
            "The security token is invalid"
        );
    }

    #[test]
    fn error_message_falls_back_to_the_body_or_the_reason() {
        assert_eq!(error_message("Bad gateway from proxy", "x"), "Bad gateway from proxy");
        assert_eq!(error_message("  ", "Service Unavailable"), "Service Unavailable");
    }

    #[test]
    fn retry_after_accepts_seconds_and_milliseconds() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("3"));
        assert_eq!(retry_after(&h), Some(3.0));
        h.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&h), Some(0.25));
    }

    #[test]
    fn a_google_retry_delay_in_the_error_body_is_the_wait() {
        let body = r#"{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "Quota exceeded",
            "details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure"},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37.5s"}]}}"#;
        assert_eq!(retry_delay_in_body(body), Some(37.5));
        assert_eq!(retry_delay_in_body(r#"{"error": {"message": "no"}}"#), None);
        let daily = r#"{"error": {"code": 429, "details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure",
            "violations": [{"quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "20s"}]}}"#;
        assert_eq!(retry_delay_in_body(daily), None, "a spent daily quota is no wait");
        assert_eq!(retry_delay_in_body(r#"{"error": {"details": [{"retryDelay": "0s"}]}}"#), None);
        assert_eq!(retry_delay_in_body("not json"), None);
    }

    #[test]
    fn retry_after_accepts_an_http_date() {
        let future = chrono::Utc::now() + chrono::Duration::seconds(120);
        let text = future.format("%a, %d %b %Y %H:%M:%S GMT").to_string();
        let secs = parse_retry_after(&text).unwrap();
        assert!(secs > 100.0 && secs <= 120.0, "{secs}");
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), Some(0.0));
        assert_eq!(parse_retry_after("soon"), None);
    }

    #[test]
    fn join_url_keeps_one_slash() {
        assert_eq!(join_url("http://h/v1/", "/chat/completions"), "http://h/v1/chat/completions");
        assert_eq!(join_url("http://h/v1", "chat/completions"), "http://h/v1/chat/completions");
    }
}
