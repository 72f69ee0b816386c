//! `web_fetch`: an HTTP GET that returns readable text — HTML converted to plain text,
//! JSON/XML/other text as it is — with a timeout and caps on bytes downloaded and characters
//! returned. Binary content is refused without reading its body.
//!
//! Where it may connect: loopback, private (RFC 1918, unique-local), link-local (with the cloud
//! metadata address 169.254.169.254), CGNAT, multicast, unspecified and broadcast addresses are
//! refused — for IP literals in any spelling the URL parser accepts (`0x7f000001`,
//! `[::ffff:127.0.0.1]`), for every address a host name resolves to, and again on every redirect
//! — unless the host is in [`WebConfig::allow_hosts`]. Proxies from the environment are not
//! used (they would make the check meaningless). The tool reaches the network, so the default
//! permission policy asks before each call (`default_network`). The whole call — connecting,
//! downloading at most `max_bytes`, converting — is bounded by `timeout_secs`; HTML converts
//! to text in one linear pass ([`crate::html`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use recursive_core::{ToolContext, ToolError, TypedTool};
use reqwest::header::CONTENT_TYPE;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::config::WebConfig;
use crate::truncate::clip_chars;

/// Redirects followed before a fetch gives up.
const MAX_REDIRECTS: usize = 10;

/// Why an address may not be fetched, or `None` when it may.
pub fn refused_address(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped().or_else(|| compat_v4(v6)) {
            Some(v4) => refused_v4(v4),
            None => refused_v6(v6),
        },
    }
}

fn refused_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_private() {
        Some("private")
    } else if ip.is_link_local() {
        Some("link-local (cloud metadata)")
    } else if ip.is_unspecified() || a == 0 {
        Some("unspecified")
    } else if ip.is_broadcast() || ip.is_multicast() || a >= 240 {
        Some("broadcast, multicast or reserved")
    } else if a == 100 && (64..128).contains(&b) {
        Some("shared (CGNAT)")
    } else {
        None
    }
}

fn refused_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_unspecified() {
        Some("unspecified")
    } else if first & 0xfe00 == 0xfc00 {
        Some("unique-local (private)")
    } else if first & 0xffc0 == 0xfe80 {
        Some("link-local")
    } else if ip.is_multicast() {
        Some("multicast")
    } else {
        None
    }
}

/// The IPv4 address of a deprecated IPv4-compatible IPv6 address (`::a.b.c.d`).
fn compat_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    (s[..6].iter().all(|x| *x == 0) && (s[6] != 0 || s[7] > 1)).then(|| {
        let [.., a, b, c, d] = ip.octets();
        Ipv4Addr::new(a, b, c, d)
    })
}

/// Where `web_fetch` may connect: every host name is resolved here and its refused addresses
/// dropped; URLs (the first and every redirect) are checked for refused IP literals.
#[derive(Debug, Clone)]
struct NetPolicy {
    allow_hosts: Arc<Vec<String>>,
}

impl NetPolicy {
    fn allowed_host(&self, host: &str) -> bool {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        self.allow_hosts.iter().any(|h| h.trim_start_matches('[').trim_end_matches(']').eq_ignore_ascii_case(host))
    }

    /// Why a URL may not be fetched (its scheme, or an IP literal host), or `None`.
    fn check_url(&self, url: &reqwest::Url) -> Option<String> {
        if !matches!(url.scheme(), "http" | "https") {
            return Some(format!("only http and https URLs can be fetched, not `{}`", url.scheme()));
        }
        // The URL parser has normalised IP literals (`0x7f000001` is `127.0.0.1` by now).
        let host = url.host_str()?;
        let ip: IpAddr = host.trim_start_matches('[').trim_end_matches(']').parse().ok()?;
        let why = refused_address(ip).filter(|_| !self.allowed_host(host))?;
        Some(format!("refused to fetch {url}: {ip} is a {why} address (add the host to [tools.web] allow_hosts)"))
    }
}

impl reqwest::dns::Resolve for NetPolicy {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if policy.allowed_host(&host) {
                return Ok(Box::new(found.into_iter()) as reqwest::dns::Addrs);
            }
            let (refused, kept): (Vec<SocketAddr>, Vec<SocketAddr>) =
                found.into_iter().partition(|a| refused_address(a.ip()).is_some());
            if kept.is_empty() {
                let why = refused.first().and_then(|a| refused_address(a.ip())).unwrap_or("unresolvable");
                let shown = refused.first().map(|a| a.ip().to_string()).unwrap_or_default();
                return Err(format!(
                    "refused: `{host}` resolves to {shown}, a {why} address (add the host to [tools.web] allow_hosts)"
                )
                .into());
            }
            Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Arguments of `web_fetch`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebFetchArgs {
    /// The `http://` or `https://` URL to fetch.
    pub url: String,
}

/// Fetches a URL as text.
#[derive(Debug, Clone)]
pub struct WebFetch {
    config: WebConfig,
    policy: NetPolicy,
}

impl WebFetch {
    /// The tool with these limits.
    pub fn new(config: WebConfig) -> Self {
        let policy = NetPolicy { allow_hosts: Arc::new(config.allow_hosts.clone()) };
        Self { config, policy }
    }

    fn client(&self) -> Result<reqwest::Client, ToolError> {
        let policy = self.policy.clone();
        let redirects = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= MAX_REDIRECTS {
                return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
            }
            match policy.check_url(attempt.url()) {
                Some(why) => attempt.error(why),
                None => attempt.follow(),
            }
        });
        recursive_http::client_builder()
            .timeout(Duration::from_secs(self.config.timeout_secs.max(1)))
            .user_agent(&self.config.user_agent)
            .no_proxy()
            .dns_resolver(Arc::new(self.policy.clone()))
            .redirect(redirects)
            .build()
            .map_err(|e| {
                ToolError::failed(format!("could not set up the HTTP client: {}", recursive_http::error_chain(&e)))
            })
    }
}

/// What a response body is, judged by its content type (and its bytes when there is none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyKind {
    Html,
    Text,
    Binary,
}

fn kind_of(content_type: Option<&str>) -> Option<BodyKind> {
    let ct = content_type?.split(';').next()?.trim().to_ascii_lowercase();
    if ct.is_empty() {
        return None;
    }
    if ct == "text/html" || ct == "application/xhtml+xml" {
        return Some(BodyKind::Html);
    }
    let (top, sub) = ct.split_once('/').unwrap_or((ct.as_str(), ""));
    let texty_sub = sub.ends_with("+json")
        || sub.ends_with("+xml")
        || matches!(
            sub,
            "json"
                | "xml"
                | "javascript"
                | "ecmascript"
                | "x-javascript"
                | "yaml"
                | "x-yaml"
                | "toml"
                | "x-sh"
                | "sql"
                | "graphql"
                | "x-ndjson"
                | "ndjson"
                | "csv"
        );
    Some(if top == "text" || texty_sub { BodyKind::Text } else { BodyKind::Binary })
}

/// The body as text, decoded with the charset the `Content-Type` header declares, else (for
/// HTML) the one a `<meta>` tag near the top declares, else UTF-8; a byte-order mark wins
/// over both. Undecodable bytes become U+FFFD.
fn decode_body(body: &[u8], content_type: Option<&str>, html: bool) -> String {
    let declared = content_type.and_then(charset_param).or_else(|| html.then(|| meta_charset(body)).flatten());
    let encoding =
        declared.and_then(|label| encoding_rs::Encoding::for_label(label.as_bytes())).unwrap_or(encoding_rs::UTF_8);
    let (text, _, _) = encoding.decode(body);
    text.into_owned()
}

/// The `charset=` parameter of a `Content-Type` value.
fn charset_param(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|param| {
        let (name, value) = param.split_once('=')?;
        name.trim().eq_ignore_ascii_case("charset").then(|| value.trim().trim_matches(['"', '\'']).to_string())
    })
}

/// The charset named by `<meta charset=..>` or `<meta http-equiv .. content="..; charset=..">`
/// in the first 1024 bytes of an HTML document.
fn meta_charset(body: &[u8]) -> Option<String> {
    let head = String::from_utf8_lossy(&body[..body.len().min(1024)]).to_ascii_lowercase();
    let at = head.find("charset=")? + "charset=".len();
    let rest = head[at..].trim_start_matches(['"', '\'', ' ']);
    let label: String =
        rest.chars().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.')).collect();
    (!label.is_empty()).then_some(label)
}

fn sniff(bytes: &[u8]) -> BodyKind {
    let head = &bytes[..bytes.len().min(8192)];
    let valid = match std::str::from_utf8(head) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none(),
    };
    if head.contains(&0) || !valid {
        return BodyKind::Binary;
    }
    let start = String::from_utf8_lossy(&head[..head.len().min(512)]).trim_start().to_ascii_lowercase();
    if start.starts_with("<!doctype html") || start.starts_with("<html") { BodyKind::Html } else { BodyKind::Text }
}

#[async_trait]
impl TypedTool for WebFetch {
    type Args = WebFetchArgs;

    fn name(&self) -> &str {
        "web_fetch"
    }

    fn description(&self) -> String {
        format!(
            "Fetch a web page or other text resource with HTTP GET. HTML is converted to readable plain text; \
             JSON, XML and other text is returned as it is; binary content (images, archives, PDFs) is \
             refused. At most {} characters are returned and at most {} bytes downloaded; the request times \
             out after {}s.",
            self.config.max_chars, self.config.max_bytes, self.config.timeout_secs
        )
    }

    fn read_only(&self) -> bool {
        true
    }

    fn reaches_network(&self) -> bool {
        true
    }

    async fn run(&self, args: WebFetchArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let limit = Duration::from_secs(self.config.timeout_secs.max(1));
        tokio::time::timeout(limit, self.fetch(&args.url)).await.unwrap_or_else(|_| {
            Err(ToolError::failed(format!("fetching {} timed out after {}s", args.url, limit.as_secs())))
        })
    }
}

impl WebFetch {
    async fn fetch(&self, raw_url: &str) -> Result<String, ToolError> {
        let url = reqwest::Url::parse(raw_url.trim())
            .map_err(|e| ToolError::failed(format!("invalid URL `{raw_url}`: {e}")))?;
        if let Some(why) = self.policy.check_url(&url) {
            return Err(ToolError::Denied(why));
        }
        let client = self.client()?;
        let failed = |e: reqwest::Error| {
            if e.is_timeout() {
                ToolError::failed(format!("fetching {url} timed out after {}s", self.config.timeout_secs))
            } else {
                ToolError::failed(format!("could not fetch {url}: {}", recursive_http::error_chain(&e)))
            }
        };
        let mut response = client.get(url.clone()).send().await.map_err(failed)?;
        let status = response.status();
        let final_url = response.url().to_string();
        let content_type = response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_string);
        let declared = kind_of(content_type.as_deref());
        if declared == Some(BodyKind::Binary) && status.is_success() {
            let size = response.content_length().map(|n| format!(", {n} bytes")).unwrap_or_default();
            return Err(ToolError::failed(format!(
                "{final_url} is binary content ({}{size}); web_fetch only returns text",
                content_type.as_deref().unwrap_or("unknown type")
            )));
        }
        let mut body = Vec::new();
        let mut truncated_download = false;
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            let room = self.config.max_bytes.saturating_sub(body.len());
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                truncated_download = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        let kind = declared.unwrap_or_else(|| sniff(&body));
        if !status.is_success() {
            let snippet = String::from_utf8_lossy(&body[..body.len().min(500)]).trim().to_string();
            let snippet = if snippet.is_empty() { String::new() } else { format!(": {}", clip_chars(&snippet, 300)) };
            return Err(ToolError::failed(format!("HTTP {status} from {final_url}{snippet}")));
        }
        if kind == BodyKind::Binary {
            return Err(ToolError::failed(format!(
                "{final_url} is binary content ({}, {} bytes read); web_fetch only returns text",
                content_type.as_deref().unwrap_or("no content type"),
                body.len()
            )));
        }
        let decoded = decode_body(&body, content_type.as_deref(), kind == BodyKind::Html);
        let text = match kind {
            BodyKind::Html => {
                let max_chars = self.config.max_chars;
                tokio::task::spawn_blocking(move || crate::html::to_text(&decoded, max_chars))
                    .await
                    .map_err(|e| ToolError::failed(format!("converting the page failed: {e}")))?
            }
            _ => decoded,
        };
        let text = text.trim();
        let total_chars = text.chars().count();
        let mut out = format!(
            "URL: {final_url}\nStatus: {status}\nContent-Type: {}\n\n",
            content_type.as_deref().unwrap_or("(none)")
        );
        if total_chars > self.config.max_chars {
            let kept: String = text.chars().take(self.config.max_chars).collect();
            out.push_str(&kept);
            out.push_str(&format!("\n[cut at {} of {total_chars} characters]", self.config.max_chars));
        } else {
            out.push_str(text);
        }
        if truncated_download {
            out.push_str(&format!(
                "\n[download stopped at {} bytes; the rest of the response was not read]",
                self.config.max_bytes
            ));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::http::header;
    use axum::routing::get;
    use recursive_core::typed;
    use serde_json::json;

    async fn serve() -> String {
        let app = Router::new()
            .route(
                "/page",
                get(|| async {
                    (
                        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                        "<html><head><title>T</title><style>p{color:red}</style></head><body>\
                         <h1>Main Title</h1><p>First <b>bold</b> paragraph.</p>\
                         <ul><li>one</li><li>two</li></ul></body></html>",
                    )
                }),
            )
            .route("/data.json", get(|| async { axum::Json(json!({"answer": 42})) }))
            .route("/plain", get(|| async { "just text" }))
            .route(
                "/image.png",
                get(|| async { ([(header::CONTENT_TYPE, "image/png")], vec![0x89u8, b'P', b'N', b'G', 0, 0]) }),
            )
            .route("/untyped", get(|| async { ([(header::CONTENT_TYPE, "")], vec![1u8, 0, 2, 0, 3]) }))
            .route("/missing", get(|| async { (axum::http::StatusCode::NOT_FOUND, "no such page here") }))
            .route("/big", get(|| async { "abcdefghij".repeat(1000) }))
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    "late"
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}")
    }

    /// Fetches with the test server's host allowed (it listens on loopback).
    async fn fetch(mut config: WebConfig, url: String) -> Result<String, ToolError> {
        config.allow_hosts.push("127.0.0.1".into());
        fetch_strict(config, url).await
    }

    async fn fetch_strict(config: WebConfig, url: String) -> Result<String, ToolError> {
        typed(WebFetch::new(config)).call(json!({"url": url}), &ToolContext::detached()).await
    }

    #[tokio::test]
    async fn loopback_private_and_metadata_addresses_are_refused_in_every_spelling() {
        let base = serve().await;
        let port = base.rsplit(':').next().unwrap();
        let attacks = [
            format!("http://127.0.0.1:{port}/plain"),
            format!("http://0x7f000001:{port}/plain"),
            format!("http://2130706433:{port}/plain"),
            format!("http://127.1:{port}/plain"),
            format!("http://[::ffff:127.0.0.1]:{port}/plain"),
            format!("http://[::1]:{port}/plain"),
            format!("http://localhost:{port}/plain"),
            "http://169.254.169.254/latest/meta-data/".to_string(),
            "http://10.0.0.1/".to_string(),
            "http://192.168.1.1/".to_string(),
            "http://[fd00::1]/".to_string(),
            "http://0.0.0.0/".to_string(),
        ];
        for url in attacks {
            let err = fetch_strict(WebConfig::default(), url.clone()).await.unwrap_err();
            assert!(err.to_string().contains("refused"), "{url}: {err}");
            assert!(!err.to_string().contains("just text"), "{url}: {err}");
        }
    }

    #[tokio::test]
    async fn redirects_to_refused_addresses_are_refused() {
        let base = serve().await;
        let port = base.rsplit(':').next().unwrap();
        let target = format!("http://localhost:{port}/plain");
        let app = Router::new().route(
            "/go",
            get(move || {
                let target = target.clone();
                async move { axum::response::Redirect::temporary(&target) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        // The first hop is allowed by name; the redirect's host is not.
        let err = fetch(WebConfig::default(), format!("http://{addr}/go")).await.unwrap_err();
        assert!(err.to_string().contains("refused"), "{err}");
        let allowed = WebConfig { allow_hosts: vec!["localhost".into()], ..Default::default() };
        let out = fetch(allowed, format!("http://{addr}/go")).await.unwrap();
        assert!(out.ends_with("just text"), "{out}");
    }

    #[test]
    fn public_addresses_are_not_refused() {
        for ip in ["93.184.216.34", "2606:4700::1111", "100.128.0.1", "172.32.0.1"] {
            assert_eq!(refused_address(ip.parse().unwrap()), None, "{ip}");
        }
        for ip in ["100.64.0.1", "172.16.0.1", "fe80::1", "::127.0.0.1", "224.0.0.1"] {
            assert!(refused_address(ip.parse().unwrap()).is_some(), "{ip}");
        }
    }

    #[tokio::test]
    async fn html_becomes_readable_text() {
        let base = serve().await;
        let out = fetch(WebConfig::default(), format!("{base}/page")).await.unwrap();
        assert!(out.contains("Status: 200 OK"), "{out}");
        assert!(out.contains("Main Title"), "{out}");
        assert!(out.contains("First bold paragraph."), "{out}");
        assert!(out.contains("one") && out.contains("two"), "{out}");
        assert!(!out.contains("<p>"), "{out}");
        assert!(!out.contains("color:red"), "{out}");
    }

    #[tokio::test]
    async fn json_is_returned_as_text() {
        let base = serve().await;
        let out = fetch(WebConfig::default(), format!("{base}/data.json")).await.unwrap();
        assert!(out.contains("Content-Type: application/json"), "{out}");
        assert!(out.ends_with("{\"answer\":42}"), "{out}");
    }

    #[tokio::test]
    async fn plain_text_is_returned() {
        let base = serve().await;
        let out = fetch(WebConfig::default(), format!("{base}/plain")).await.unwrap();
        assert!(out.ends_with("\n\njust text"), "{out}");
    }

    #[tokio::test]
    async fn binary_is_refused() {
        let base = serve().await;
        let err = fetch(WebConfig::default(), format!("{base}/image.png")).await.unwrap_err();
        assert!(err.to_string().contains("binary content (image/png"), "{err}");
        let err = fetch(WebConfig::default(), format!("{base}/untyped")).await.unwrap_err();
        assert!(err.to_string().contains("binary content"), "{err}");
    }

    #[tokio::test]
    async fn http_status_errors_are_clear() {
        let base = serve().await;
        let err = fetch(WebConfig::default(), format!("{base}/missing")).await.unwrap_err();
        let text = err.to_string();
        assert!(text.contains("HTTP 404 Not Found"), "{text}");
        assert!(text.contains("no such page here"), "{text}");
    }

    #[tokio::test]
    async fn connection_errors_are_clear() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let err = fetch(WebConfig::default(), format!("http://127.0.0.1:{port}/")).await.unwrap_err();
        assert!(err.to_string().contains(&format!("could not fetch http://127.0.0.1:{port}/")), "{err}");
    }

    #[tokio::test]
    async fn timeouts_are_reported() {
        let base = serve().await;
        let config = WebConfig { timeout_secs: 1, ..Default::default() };
        let err = fetch(config, format!("{base}/slow")).await.unwrap_err();
        assert!(err.to_string().contains("timed out after 1s"), "{err}");
    }

    #[tokio::test]
    async fn output_is_capped_by_characters_and_bytes() {
        let base = serve().await;
        let out = fetch(WebConfig { max_chars: 25, ..Default::default() }, format!("{base}/big")).await.unwrap();
        assert!(out.contains("\n\nabcdefghijabcdefghijabcde\n[cut at 25 of 10000 characters]"), "{out}");
        let out = fetch(WebConfig { max_bytes: 15, ..Default::default() }, format!("{base}/big")).await.unwrap();
        assert!(out.contains("\n\nabcdefghijabcde\n[download stopped at 15 bytes"), "{out}");
    }

    #[tokio::test]
    async fn other_schemes_are_refused() {
        let err = fetch(WebConfig::default(), "file:///etc/passwd".into()).await.unwrap_err();
        assert!(err.to_string().contains("only http and https"), "{err}");
        let err = fetch(WebConfig::default(), "not a url".into()).await.unwrap_err();
        assert!(err.to_string().contains("invalid URL"), "{err}");
    }

    #[test]
    fn bodies_are_decoded_with_their_declared_charset() {
        // "café" in ISO-8859-1 / windows-1252.
        let latin1 = b"caf\xe9";
        assert_eq!(decode_body(latin1, Some("text/plain; charset=ISO-8859-1"), false), "café");
        assert_eq!(decode_body(latin1, Some("text/plain; charset=\"windows-1252\""), false), "café");
        let page = b"<html><head><meta charset=\"windows-1252\"></head><body>caf\xe9</body></html>";
        assert!(decode_body(page, Some("text/html"), true).contains("café"));
        let page = b"<meta http-equiv=\"Content-Type\" content=\"text/html; charset=iso-8859-1\"><p>caf\xe9";
        assert!(decode_body(page, None, true).contains("café"));
        assert_eq!(decode_body("café".as_bytes(), Some("text/plain"), false), "café");
        assert_eq!(decode_body(b"caf\xe9", Some("text/plain; charset=no-such-charset"), false), "caf\u{fffd}");
    }

    #[test]
    fn content_types_are_classified() {
        assert_eq!(kind_of(Some("text/html; charset=utf-8")), Some(BodyKind::Html));
        assert_eq!(kind_of(Some("application/ld+json")), Some(BodyKind::Text));
        assert_eq!(kind_of(Some("image/svg+xml")), Some(BodyKind::Text));
        assert_eq!(kind_of(Some("text/csv")), Some(BodyKind::Text));
        assert_eq!(kind_of(Some("application/pdf")), Some(BodyKind::Binary));
        assert_eq!(kind_of(Some("application/octet-stream")), Some(BodyKind::Binary));
        assert_eq!(kind_of(None), None);
        assert_eq!(sniff(b"<!DOCTYPE html><p>x</p>"), BodyKind::Html);
        assert_eq!(sniff(b"plain"), BodyKind::Text);
        assert_eq!(sniff(&[0xff, 0xfe, 0x00]), BodyKind::Binary);
    }
}
