//! Which requests reach the server at all, checked on every route before anything else:
//!
//! - **`Host`**: the names the server answers to. By default the loopback names (`localhost`,
//!   `127.0.0.1`, `[::1]`) and the address it listens on, so a web page that rebinds its own
//!   name to 127.0.0.1 (DNS rebinding) is refused; `--allowed-host` adds names. A server with a
//!   bearer token listening off loopback answers any name unless names are given: the token
//!   guards it, and a browser page cannot send the token.
//! - **`Origin`**: a browser's request from a page must come from the server's own origin (the
//!   `Origin` names the same host and port as `Host`) or from an origin configured for CORS
//!   (`--cors-origin`); a request without `Origin` (curl, the SDKs) is not a browser's.
//!
//! CORS itself (preflight answers and the response headers) is tower-http's layer, built here
//! from the same list and off unless origins are configured.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use std::net::SocketAddr;
use std::sync::Arc;

/// The host and origin policy of one server.
#[derive(Debug, Clone)]
pub struct Guard {
    /// Host names answered to (lower case, without port); `None`: any.
    hosts: Option<Vec<String>>,
    /// Origins allowed besides the server's own (`scheme://host[:port]`, lower case).
    cors: Vec<String>,
}

/// The loopback names every server answers to unless told otherwise.
const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

impl Guard {
    /// The policy of a server listening on `listen`, with or without a token, with the extra
    /// host names and CORS origins it was given.
    pub fn new(listen: SocketAddr, has_token: bool, extra_hosts: &[String], cors: &[String]) -> Self {
        let open = has_token && !listen.ip().is_loopback() && extra_hosts.is_empty();
        let hosts = (!open).then(|| {
            let mut names: Vec<String> = LOOPBACK_NAMES.iter().map(|n| n.to_string()).collect();
            if !listen.ip().is_unspecified() {
                names.push(listen.ip().to_string());
            }
            names.extend(extra_hosts.iter().map(|h| host_of(h).to_string()));
            names
        });
        let cors = cors.iter().map(|o| o.trim_end_matches('/').to_ascii_lowercase()).collect();
        Guard { hosts, cors }
    }

    /// Whether a request naming `host` (a `Host` header: `name[:port]`) is answered.
    pub fn host_allowed(&self, host: &str) -> bool {
        match &self.hosts {
            None => true,
            Some(names) => names.iter().any(|n| *n == host_of(host)),
        }
    }

    /// Whether a request with `Origin: origin` to `host` is answered: same origin, or a CORS
    /// origin.
    pub fn origin_allowed(&self, origin: &str, host: Option<&str>) -> bool {
        let origin = origin.trim_end_matches('/').to_ascii_lowercase();
        if self.cors.contains(&origin) {
            return true;
        }
        let authority = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
        matches!((authority, host), (Some(a), Some(h)) if a == h.to_ascii_lowercase())
    }

    /// The CORS layer for the configured origins (none configured: no CORS headers at all, so
    /// browsers keep other sites' pages from reading responses).
    pub fn cors_layer(&self) -> Option<tower_http::cors::CorsLayer> {
        if self.cors.is_empty() {
            return None;
        }
        let origins: Vec<HeaderValue> = self.cors.iter().filter_map(|o| HeaderValue::from_str(o).ok()).collect();
        Some(
            tower_http::cors::CorsLayer::new()
                .allow_origin(origins)
                // PUT and PATCH, and `x-api-key`: the LangGraph API's store, threads and auth.
                .allow_methods([Method::GET, Method::POST, Method::PUT, Method::PATCH, Method::DELETE, Method::OPTIONS])
                .allow_headers([
                    header::AUTHORIZATION,
                    header::CONTENT_TYPE,
                    header::HeaderName::from_static("x-api-key"),
                    header::HeaderName::from_static("last-event-id"),
                    header::HeaderName::from_static("mcp-session-id"),
                    header::HeaderName::from_static("mcp-protocol-version"),
                ])
                .expose_headers([header::HeaderName::from_static("mcp-session-id")])
                .max_age(std::time::Duration::from_secs(600)),
        )
    }
}

/// The host part of `name[:port]` (IPv6 in brackets or bare), lower case.
fn host_of(authority: &str) -> String {
    let a = authority.trim().to_ascii_lowercase();
    if let Some(rest) = a.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default().to_string();
    }
    match a.matches(':').count() {
        1 => a.split(':').next().unwrap_or_default().to_string(),
        _ => a,
    }
}

/// The middleware: 403 in OpenAI's error shape for a foreign `Host` or `Origin`.
pub(crate) async fn check(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| request.uri().authority().map(|a| a.to_string()));
    if let Some(h) = &host
        && !guard.host_allowed(h)
    {
        let message = format!(
            "the Host `{h}` is not one this server answers to (start it with --allowed-host {} to add it)",
            host_of(h)
        );
        return crate::server::error(StatusCode::FORBIDDEN, "permission_error", &message);
    }
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok())
        && !guard.origin_allowed(origin, host.as_deref())
    {
        let message = format!(
            "requests from pages of `{origin}` are refused (start the server with --cors-origin {origin} to allow them)"
        );
        return crate::server::error(StatusCode::FORBIDDEN, "permission_error", &message);
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback() -> Guard {
        Guard::new("127.0.0.1:8787".parse().unwrap(), false, &[], &[])
    }

    #[test]
    fn a_loopback_server_answers_loopback_names_only() {
        let g = loopback();
        for ok in ["127.0.0.1:8787", "localhost:8787", "LOCALHOST", "[::1]:8787", "127.0.0.1"] {
            assert!(g.host_allowed(ok), "{ok}");
        }
        for refused in ["evil.example", "evil.example:8787", "127.0.0.1.nip.io:8787", "localhost.evil.example"] {
            assert!(!g.host_allowed(refused), "{refused}");
        }
    }

    #[test]
    fn allowed_hosts_are_added_to_the_loopback_names() {
        let g = Guard::new("0.0.0.0:8787".parse().unwrap(), true, &["api.example.com".into()], &[]);
        assert!(g.host_allowed("api.example.com:8787"));
        assert!(g.host_allowed("localhost"));
        assert!(!g.host_allowed("other.example.com"));
    }

    #[test]
    fn a_token_server_off_loopback_answers_any_name_unless_names_are_given() {
        let g = Guard::new("0.0.0.0:8787".parse().unwrap(), true, &[], &[]);
        assert!(g.host_allowed("my-host.internal:8787"));
        let without_token = Guard::new("10.0.0.5:8787".parse().unwrap(), false, &[], &[]);
        assert!(without_token.host_allowed("10.0.0.5:8787"));
        assert!(!without_token.host_allowed("my-host.internal"));
    }

    #[test]
    fn an_origin_must_be_the_servers_own_or_configured_for_cors() {
        let g = Guard::new("127.0.0.1:8787".parse().unwrap(), false, &[], &["https://app.example.com/".into()]);
        assert!(g.origin_allowed("http://127.0.0.1:8787", Some("127.0.0.1:8787")));
        assert!(g.origin_allowed("https://app.example.com", Some("127.0.0.1:8787")));
        assert!(!g.origin_allowed("http://evil.example", Some("127.0.0.1:8787")));
        assert!(!g.origin_allowed("http://127.0.0.1:9999", Some("127.0.0.1:8787")), "another port is another origin");
        assert!(!g.origin_allowed("null", Some("127.0.0.1:8787")));
        assert!(g.cors_layer().is_some());
        assert!(loopback().cors_layer().is_none(), "CORS is off unless configured");
    }
}
