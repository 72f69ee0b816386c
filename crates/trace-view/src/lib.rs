//! A run tree as one self-contained HTML page (no network, no CDN): the events are embedded as
//! JSON and a small script draws the tree — collapsible runs with timing bars, tokens and cost,
//! model and tool calls, RLM iterations with their code, output and sub-calls, goal decisions,
//! graph supersteps drawn as a graph — with a search box. Every text from the run is inserted as
//! text, never as markup. The renderer ([`SCRIPT`], [`STYLE`]) takes events one by one too: the
//! live view of `recursive serve` draws running runs with it. The page reads events as JSON, so
//! this crate knows no engine and no exporter (the server takes it without either).

use serde_json::Value;

/// Event types left out of the page (streamed fragments of texts that are there whole).
const LEFT_OUT: [&str; 2] = ["partial_text", "partial_reasoning"];

/// The page for `events` (the lines of an `--events` file), titled `title`.
pub fn render(events: &[Value], title: &str) -> String {
    let kept: Vec<&Value> = events
        .iter()
        .filter(|e| !e.get("type").and_then(Value::as_str).is_some_and(|t| LEFT_OUT.contains(&t)))
        .collect();
    let data = serde_json::to_string(&kept).unwrap_or_else(|_| "[]".into());
    // Inside <script>, `</` could end the element: JSON allows `<\/` for it.
    let data = data.replace("</", "<\\/");
    let page = TEMPLATE.replace("{{STYLE}}", STYLE).replace("{{SCRIPT}}", SCRIPT);
    // The title goes in before the events, so no text of theirs is taken for a placeholder.
    let (head, tail) = page.split_once("{{EVENTS}}").unwrap_or((&page, ""));
    format!("{}{data}{tail}", head.replace("{{TITLE}}", &escape(title)))
}

/// The run tree's styles (also served by the live view of `recursive serve`).
pub const STYLE: &str = include_str!("trace.css");

/// The run tree's renderer: `RecursiveTrace.create(container)` takes events, all at once or
/// one by one as they arrive, and draws the tree (also served by the live view).
pub const SCRIPT: &str = include_str!("trace.js");

/// Text as HTML text.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

const TEMPLATE: &str = r##"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{TITLE}}</title>
<style>
{{STYLE}}</style>
</head>
<body>
<div id="error"></div>
<header><h1>{{TITLE}}</h1><input id="search" type="search" placeholder="Search the run tree"><span class="totals" id="totals"></span></header>
<main id="tree"></main>
<script type="application/json" id="events">{{EVENTS}}</script>
<script>
"use strict";
window.addEventListener("error", function (e) {
  var box = document.getElementById("error");
  box.style.display = "block";
  box.textContent = "The page failed: " + e.message;
  document.body.setAttribute("data-error", e.message);
});
{{SCRIPT}}
(function () {
  var view = RecursiveTrace.create(document.getElementById("tree"));
  view.addAll(JSON.parse(document.getElementById("events").textContent));
  view.render();
  document.getElementById("totals").textContent = view.totals();
  document.getElementById("search").addEventListener("input", function (ev) {
    RecursiveTrace.search(document.getElementById("tree"), ev.target.value);
  });
  document.body.setAttribute("data-rendered", String(view.runCount()));
})();
</script>
</body>
</html>
"##;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn run_text_cannot_close_the_script_element() {
        let page = render(&[json!({"type": "assistant_text", "text": "</script><img src=x onerror=alert(1)>"})], "t");
        assert!(!page.contains("</script><img"), "the text ends the data element");
        assert!(page.contains("<\\/script><img"));
    }

    #[test]
    fn the_shared_renderer_cannot_end_the_element_it_is_inlined_in() {
        for (asset, end) in [(SCRIPT, "</script"), (STYLE, "</style")] {
            assert!(!asset.to_ascii_lowercase().contains(end), "{end} in an inlined asset");
        }
        let page = render(&[], "t");
        assert!(page.contains("RecursiveTrace.create") && !page.contains("{{"), "every placeholder filled");
    }

    #[test]
    fn a_title_naming_a_placeholder_stays_text() {
        let page = render(&[json!({"type": "assistant_text", "text": "x"})], "{{EVENTS}}<b>");
        assert!(page.contains("<title>{{EVENTS}}&lt;b&gt;</title>"), "the title is not filled with the events");
    }

    #[test]
    fn streamed_fragments_are_left_out_and_the_title_is_escaped() {
        let page = render(&[json!({"type": "partial_text", "delta": "FRAGMENT"})], "<b>x</b>");
        assert!(!page.contains("FRAGMENT"));
        assert!(page.contains("<title>&lt;b&gt;x&lt;/b&gt;</title>"));
    }
}
