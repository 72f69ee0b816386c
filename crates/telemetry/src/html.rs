//! A run tree as one self-contained HTML page (no network, no CDN): the events are embedded as
//! JSON and a small script draws the tree — collapsible runs with timing bars, tokens and cost,
//! model and tool calls, RLM iterations with their code, output and sub-calls, goal decisions,
//! graph supersteps drawn as a graph — with a search box. Every text from the run is inserted as
//! text, never as markup.

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
    let title = escape(title);
    TEMPLATE.replace("{{TITLE}}", &title).replace("{{EVENTS}}", &data)
}

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
:root { --fg:#1d2330; --muted:#667085; --line:#e4e7ec; --bar:#7f9cf5; --err:#d92d20; --ok:#079455; --bg:#fff; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); margin: 0; }
header { position: sticky; top: 0; background: #f8f9fb; border-bottom: 1px solid var(--line); padding: 10px 16px; display: flex; gap: 16px; align-items: center; z-index: 2; }
header h1 { font-size: 16px; margin: 0; }
header input { flex: 1; max-width: 420px; padding: 5px 8px; border: 1px solid var(--line); border-radius: 6px; }
header .totals { color: var(--muted); }
main { padding: 12px 16px 40px; }
details.run { border-left: 2px solid var(--line); margin: 6px 0 6px 4px; padding-left: 10px; }
details.run > summary { cursor: pointer; list-style: none; display: grid; grid-template-columns: minmax(260px, 2fr) 3fr auto; gap: 12px; align-items: center; padding: 3px 0; }
details.run > summary::-webkit-details-marker { display: none; }
.name { font-weight: 600; }
.kind { font-size: 11px; text-transform: uppercase; letter-spacing: .04em; color: #fff; background: #6172f3; border-radius: 4px; padding: 1px 5px; margin-right: 6px; }
.kind.rlm { background: #0e9384; } .kind.goal { background: #dc6803; } .kind.graph { background: #7a5af8; }
.status { font-size: 12px; margin-left: 6px; color: var(--ok); } .status.bad { color: var(--err); }
.timeline { position: relative; height: 10px; background: #f2f4f7; border-radius: 3px; }
.timeline span { position: absolute; top: 0; height: 10px; background: var(--bar); border-radius: 3px; min-width: 2px; }
.nums { color: var(--muted); font-variant-numeric: tabular-nums; white-space: nowrap; }
.item { margin: 3px 0 3px 6px; padding: 3px 8px; border-radius: 4px; background: #f9fafb; }
.item .what { font-weight: 600; margin-right: 6px; } .item .meta { color: var(--muted); }
.item.error { background: #fef3f2; }
pre { background: #101828; color: #e4e7ec; padding: 8px; border-radius: 6px; overflow-x: auto; max-height: 340px; margin: 4px 0; white-space: pre-wrap; }
pre.out { background: #f2f4f7; color: var(--fg); }
.iteration { border: 1px solid var(--line); border-radius: 6px; margin: 6px 0 6px 6px; padding: 4px 8px; }
.goal { margin-left: 10px; border-left: 2px dotted #fdb022; padding-left: 8px; }
svg.graph { display: block; margin: 6px 0; }
svg.graph rect { fill: #f4f3ff; stroke: #7a5af8; } svg.graph text { font-size: 12px; fill: var(--fg); }
svg.graph line { stroke: #98a2b3; marker-end: url(#arrow); }
.hidden { display: none; } mark { background: #fef0c7; }
#error { display: none; background: #fef3f2; color: var(--err); padding: 8px 16px; }
</style>
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
(function () {
  var events = JSON.parse(document.getElementById("events").textContent);
  function el(tag, cls, text) {
    var n = document.createElement(tag);
    if (cls) n.className = cls;
    if (text !== undefined && text !== null) n.textContent = String(text);
    return n;
  }
  function ms(t) { return new Date(t).getTime(); }
  function tokens(u) { return u ? (u.input_tokens || 0) + (u.output_tokens || 0) : 0; }
  function clip(t, n) { t = String(t || ""); return t.length > n ? t.slice(0, n) + "…" : t; }
  var runs = {}, order = [];
  var childKind = {};
  events.forEach(function (e) {
    var r = runs[e.run_id];
    if (!r) {
      r = runs[e.run_id] = { id: e.run_id, parent: e.parent_run_id, name: e.run_name, depth: e.depth, items: [], start: ms(e.timestamp), end: ms(e.timestamp), status: "running", usage: null, cost: 0, input: "" };
      order.push(e.run_id);
    }
    r.start = Math.min(r.start, ms(e.timestamp));
    r.end = Math.max(r.end, ms(e.timestamp));
    if (e.type === "sub_agent_started") childKind[e.child_run_id] = { kind: e.kind, agent: e.agent };
    if (e.type === "run_started") r.input = e.goal;
    if (e.type === "run_finished") { r.status = e.finish_reason && e.finish_reason.kind || String(e.finish_reason); r.usage = e.usage; r.cost = e.cost_usd; r.error = e.error; }
    r.items.push(e);
  });
  var roots = order.filter(function (id) { return !runs[id].parent || !runs[runs[id].parent]; });
  var t0 = Math.min.apply(null, order.map(function (id) { return runs[id].start; }));
  var t1 = Math.max.apply(null, order.map(function (id) { return runs[id].end; }));
  var span = Math.max(1, t1 - t0);
  function kindOf(r) {
    if (childKind[r.id]) return childKind[r.id].kind;
    var n = String(r.name || "").replace(/-d\d+$/, "");
    if (n === "rlm" || n === "repl") return "rlm";
    if (n === "goal") return "goal";
    if (n === "graph" || n === "graph-new") return "graph";
    return "agent";
  }
  function item(what, meta, cls) {
    var d = el("div", "item" + (cls ? " " + cls : ""));
    d.appendChild(el("span", "what", what));
    if (meta) d.appendChild(el("span", "meta", meta));
    return d;
  }
  function drawGraph(steps) {
    var ns = "http://www.w3.org/2000/svg";
    var colW = 170, rowH = 34, w = Math.max(1, steps.length) * colW, rows = 1;
    steps.forEach(function (s) { rows = Math.max(rows, s.nodes.length); });
    var svg = document.createElementNS(ns, "svg");
    svg.setAttribute("class", "graph");
    svg.setAttribute("width", w); svg.setAttribute("height", rows * rowH + 8);
    var defs = document.createElementNS(ns, "defs");
    var marker = document.createElementNS(ns, "marker");
    marker.setAttribute("id", "arrow"); marker.setAttribute("markerWidth", "8"); marker.setAttribute("markerHeight", "8");
    marker.setAttribute("refX", "8"); marker.setAttribute("refY", "4"); marker.setAttribute("orient", "auto");
    var path = document.createElementNS(ns, "path"); path.setAttribute("d", "M0,0 L8,4 L0,8 z"); path.setAttribute("fill", "#98a2b3");
    marker.appendChild(path); defs.appendChild(marker); svg.appendChild(defs);
    var pos = [];
    steps.forEach(function (s, i) {
      pos[i] = s.nodes.map(function (n, j) { return { x: i * colW + 4, y: j * rowH + 4, name: n }; });
      if (i > 0) pos[i - 1].forEach(function (a) { pos[i].forEach(function (b) {
        var l = document.createElementNS(ns, "line");
        l.setAttribute("x1", a.x + 130); l.setAttribute("y1", a.y + 13); l.setAttribute("x2", b.x - 2); l.setAttribute("y2", b.y + 13);
        svg.appendChild(l);
      }); });
      pos[i].forEach(function (p) {
        var r = document.createElementNS(ns, "rect");
        r.setAttribute("x", p.x); r.setAttribute("y", p.y); r.setAttribute("width", 130); r.setAttribute("height", 26); r.setAttribute("rx", 5);
        var t = document.createElementNS(ns, "text"); t.setAttribute("x", p.x + 8); t.setAttribute("y", p.y + 17); t.textContent = clip(p.name, 18);
        svg.appendChild(r); svg.appendChild(t);
      });
    });
    return svg;
  }
  function renderRun(id) {
    var r = runs[id];
    var kind = kindOf(r);
    var box = el("details", "run node"); box.open = r.depth < 2;
    var sum = el("summary");
    var left = el("span");
    left.appendChild(el("span", "kind " + kind, kind));
    left.appendChild(el("span", "name", String(r.name || id).replace(/-d\d+$/, "")));
    var bad = r.status !== "completed" && r.status !== "no_more_tool_calls" && r.status !== "running";
    left.appendChild(el("span", "status" + (bad ? " bad" : ""), r.status));
    var line = el("div", "timeline"); var bar = el("span");
    bar.style.left = ((r.start - t0) / span * 100) + "%"; bar.style.width = ((r.end - r.start) / span * 100) + "%";
    line.appendChild(bar);
    var nums = el("span", "nums", ((r.end - r.start) / 1000).toFixed(2) + " s · " + tokens(r.usage) + " tok · $" + Number(r.cost || 0).toFixed(4));
    sum.appendChild(left); sum.appendChild(line); sum.appendChild(nums);
    box.appendChild(sum);
    if (r.input) box.appendChild(item("input", clip(r.input, 600)));
    var body = box, iteration = null, goals = {}, steps = [], graphBox = null;
    var tools = {};
    r.items.forEach(function (e) {
      var target = iteration || body;
      switch (e.type) {
        case "rlm_iteration":
          iteration = el("div", "iteration node"); iteration.appendChild(el("div", "what", "iteration " + e.iteration)); body.appendChild(iteration); break;
        case "rlm_snippet": { var c = el("pre", "code", e.code); target.appendChild(c); break; }
        case "rlm_observation": { var o = el("pre", "out", e.observation); target.appendChild(o); break; }
        case "rlm_sub_call": target.appendChild(item("↳ " + e.kind, clip(e.prompt_head, 160) + (e.answer_head ? "  →  " + clip(e.answer_head, 160) : "") + "  (" + e.latency_ms + " ms)", e.ok ? "" : "error")); break;
        case "rlm_submit": target.appendChild(item(e.valid ? "✓ submit" : "✗ submit", JSON.stringify(e.output), e.valid ? "" : "error")); break;
        case "rlm_finished": iteration = null; body.appendChild(item("rlm", e.outcome && (e.outcome.kind || e.outcome) )); break;
        case "usage": target.appendChild(item("model " + (e.model || ""), tokens(e.usage) + " tok" + (e.duration_ms !== undefined ? " · " + e.duration_ms + " ms" : "") + (e.cost_usd ? " · $" + Number(e.cost_usd).toFixed(4) : ""))); break;
        case "assistant_text": target.appendChild(item("assistant", clip(e.text, 800))); break;
        case "tool_call": tools[e.call.id] = item("tool " + e.call.name, clip(JSON.stringify(e.call.arguments), 300)); target.appendChild(tools[e.call.id]); break;
        case "permission": if (tools[e.id]) tools[e.id].appendChild(el("span", "meta", "  [" + e.decision + "]")); break;
        case "tool_result": target.appendChild(item("→ " + e.name, clip(e.output, 400) + " (" + e.duration_ms + " ms)", e.is_error ? "error" : "")); break;
        case "goal": {
          var g = goals[e.goal_id];
          if (!g) {
            g = goals[e.goal_id] = el("div", "goal node");
            g.appendChild(el("div", "what", e.goal_id + "  " + clip(e.goal, 200)));
            var parent = e.parent_goal_id && goals[e.parent_goal_id];
            (parent || body).appendChild(g);
          }
          g.appendChild(item(e.event + (e.status ? " → " + e.status : ""), e.data && e.data !== null ? clip(JSON.stringify(e.data), 300) : ""));
          break;
        }
        case "graph_superstep":
          steps.push({ step: e.step, nodes: e.nodes });
          if (!graphBox) { graphBox = el("div", "node"); body.appendChild(graphBox); }
          graphBox.textContent = ""; graphBox.appendChild(drawGraph(steps)); break;
        case "graph_node_finished": target.appendChild(item("node " + e.node, e.outcome, e.outcome === "ok" ? "" : "error")); break;
        case "sub_agent_started": if (runs[e.child_run_id]) target.appendChild(renderRun(e.child_run_id)); break;
        case "error": target.appendChild(item("error", e.message, "error")); break;
        default: break;
      }
    });
    order.forEach(function (cid) {
      var c = runs[cid];
      if (c.parent === id && !childKind[cid]) box.appendChild(renderRun(cid));
    });
    if (r.error) box.appendChild(item("fault", r.error, "error"));
    return box;
  }
  var tree = document.getElementById("tree");
  roots.forEach(function (id) { tree.appendChild(renderRun(id)); });
  var total = 0, cost = 0;
  roots.forEach(function (id) { total += tokens(runs[id].usage); cost += Number(runs[id].cost || 0); });
  document.getElementById("totals").textContent = order.length + " runs · " + ((t1 - t0) / 1000).toFixed(2) + " s · " + total + " tok · $" + cost.toFixed(4);
  document.getElementById("search").addEventListener("input", function (ev) {
    var q = ev.target.value.toLowerCase();
    document.querySelectorAll(".item, pre").forEach(function (n) {
      n.classList.toggle("hidden", q !== "" && n.textContent.toLowerCase().indexOf(q) < 0);
    });
    if (q !== "") document.querySelectorAll("details.run").forEach(function (d) { d.open = d.textContent.toLowerCase().indexOf(q) >= 0; });
  });
  document.body.setAttribute("data-rendered", String(order.length));
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
    fn streamed_fragments_are_left_out_and_the_title_is_escaped() {
        let page = render(&[json!({"type": "partial_text", "delta": "FRAGMENT"})], "<b>x</b>");
        assert!(!page.contains("FRAGMENT"));
        assert!(page.contains("<title>&lt;b&gt;x&lt;/b&gt;</title>"));
    }
}
