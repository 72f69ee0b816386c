//! The live web view at `/`: one page served by the binary (no build step, no CDN) that lists
//! the server's runs and draws the chosen run's tree — agents, RLM iterations with their code and
//! observations, goals, graph nodes, tokens and cost per node — as its events arrive.
//!
//! The tree is drawn by the renderer of `recursive trace --html`
//! ([`recursive_trace_view::SCRIPT`]), fed event by event; `web.js` adds the run list
//! (polled from `GET /v1/runs`), the events stream (`GET /v1/runs/{id}/events`, read with
//! `fetch` so it can carry the token, resumed with `Last-Event-ID`), a form to start a run and
//! the token prompt.
//!
//! **Auth**: the page and its assets hold no run data and are served without a token; every
//! call the page makes to the API carries `Authorization: Bearer <token>` when the server has
//! one. The page asks for the token when the API answers 401 and keeps it in the tab's
//! `sessionStorage` — never in a URL, so never in a log. The page is same-origin, so the
//! `Host`/`Origin` guard ([`crate::guard`]) holds for it as for any client. A Content Security
//! Policy allows only the server's own script and styles: even a run text that slipped in as
//! markup could not run a script.

use std::sync::LazyLock;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The page's path of its script.
const SCRIPT_PATH: &str = "/web/app.js";
/// The page's path of its styles.
const STYLE_PATH: &str = "/web/app.css";

/// What a browser may load for the page: the server's own script, styles and API, nothing else.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
    img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The page itself (no run data: the script fetches it).
const PAGE: &str = include_str!("web.html");

/// The script: the shared run-tree renderer, then the live view.
static SCRIPT: LazyLock<String> =
    LazyLock::new(|| format!("{}\n{}", recursive_trace_view::SCRIPT, include_str!("web.js")));

/// The styles: the run tree's, then the live view's.
static STYLE: LazyLock<String> =
    LazyLock::new(|| format!("{}\n{}", recursive_trace_view::STYLE, include_str!("web.css")));

/// The routes of the web view, served without a token (they hold no run data).
pub(crate) fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { asset("text/html; charset=utf-8", PAGE) }))
        .route(SCRIPT_PATH, get(|| async { asset("text/javascript; charset=utf-8", SCRIPT.as_str()) }))
        .route(STYLE_PATH, get(|| async { asset("text/css; charset=utf-8", STYLE.as_str()) }))
}

/// A response with `body` of `content_type`, the page's security headers, and no caching (a
/// new binary serves a new page).
fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_only_its_own_assets() {
        assert!(PAGE.contains(&format!("src=\"{SCRIPT_PATH}\"")) && PAGE.contains(&format!("href=\"{STYLE_PATH}\"")));
        for external in ["http:", "https:", "//", "<script>", "style="] {
            assert!(!PAGE.replace("<!--", "").contains(external), "the page holds {external}");
        }
    }

    #[test]
    fn the_script_is_the_shared_renderer_and_the_live_view() {
        assert!(SCRIPT.starts_with(recursive_trace_view::SCRIPT));
        assert!(SCRIPT.contains("RecursiveTrace.create("), "the live view draws with the shared renderer");
        assert!(!SCRIPT.contains("innerHTML") && !SCRIPT.contains("insertAdjacentHTML"), "no text as markup");
    }
}
