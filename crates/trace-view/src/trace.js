/* The run-tree renderer shared by `recursive trace --html` (a finished run, its events embedded
   in the page) and the live view of `recursive serve` (events arriving over SSE): collapsible runs
   with timing bars, tokens and cost, model and tool calls, RLM iterations with their code, output
   and sub-calls, goal decisions, graph supersteps and Mermaid flowcharts drawn as SVG.

   RecursiveTrace.create(container, onRender) gives a view: add(event) takes events one by one (or
   addAll(events)), render() redraws the tree from every event so far, schedule() redraws soon
   (many events, one redraw). Every text from a run is set as text, never as markup. */
var RecursiveTrace = (function () {
  "use strict";
  /* Streamed fragments of texts that arrive whole later. */
  var LEFT_OUT = { partial_text: true, partial_reasoning: true };
  var SVG = "http://www.w3.org/2000/svg";

  function el(tag, cls, text) {
    var n = document.createElement(tag);
    if (cls) n.className = cls;
    if (text !== undefined && text !== null) n.textContent = String(text);
    return n;
  }
  function svgEl(tag, attrs) {
    var n = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { n.setAttribute(k, attrs[k]); });
    return n;
  }
  function ms(t) { return new Date(t).getTime(); }
  /* A map with no inherited keys: a node or run named `constructor` or `__proto__` is a key
     like any other. */
  function dict() { return Object.create(null); }
  /* USD as people read it: four decimals, or two significant digits for what is smaller. */
  function usd(x) {
    x = Number(x || 0);
    if (x === 0) return "$0";
    return "$" + (x < 0.00005 ? x.toPrecision(2) : x.toFixed(4));
  }
  function tokens(u) { return u ? (u.input_tokens || 0) + (u.output_tokens || 0) : 0; }
  function clip(t, n) { t = String(t || ""); return t.length > n ? t.slice(0, n) + "…" : t; }
  function item(what, meta, cls) {
    var d = el("div", "item" + (cls ? " " + cls : ""));
    d.appendChild(el("span", "what", what));
    if (meta) d.appendChild(el("span", "meta", meta));
    return d;
  }
  function arrowDefs(svg) {
    var defs = svgEl("defs");
    var marker = svgEl("marker", { id: "arrow", markerWidth: "8", markerHeight: "8", refX: "8", refY: "4", orient: "auto" });
    marker.appendChild(svgEl("path", { d: "M0,0 L8,4 L0,8 z", fill: "#98a2b3" }));
    defs.appendChild(marker);
    svg.appendChild(defs);
  }

  /* A graph's supersteps: one column per step, edges from each node of a step to the next's. */
  function drawGraph(steps) {
    var colW = 170, rowH = 34, w = Math.max(1, steps.length) * colW, rows = 1;
    steps.forEach(function (s) { rows = Math.max(rows, s.nodes.length); });
    var svg = svgEl("svg", { "class": "graph", width: w, height: rows * rowH + 8 });
    arrowDefs(svg);
    var pos = [];
    steps.forEach(function (s, i) {
      pos[i] = s.nodes.map(function (n, j) { return { x: i * colW + 4, y: j * rowH + 4, name: n }; });
      if (i > 0) pos[i - 1].forEach(function (a) { pos[i].forEach(function (b) {
        svg.appendChild(svgEl("line", { x1: a.x + 130, y1: a.y + 13, x2: b.x - 2, y2: b.y + 13 }));
      }); });
      pos[i].forEach(function (p) {
        svg.appendChild(svgEl("rect", { x: p.x, y: p.y, width: 130, height: 26, rx: 5 }));
        var t = svgEl("text", { x: p.x + 8, y: p.y + 17 }); t.textContent = clip(p.name, 18);
        svg.appendChild(t);
      });
    });
    return svg;
  }

  /* The flowchart our blueprint generator writes (`flowchart TD`, nodes `id["label"]`,
     `id([label])`, edges `a --> b`, `a -- "when" --> b`, `a -. otherwise .-> b`) as
     {direction, nodes: [{id, label}], edges: [{from, to, label, dotted}]}; other lines are
     skipped. Labels lose their markup (`<br/>` becomes a line break). */
  function parseMermaid(text) {
    var g = { direction: "TD", nodes: [], edges: [] }, seen = dict();
    var ID = "([^\\s\\[\\]\\(\\)\\{\\}\"|.-]+)";
    var edgeRe = new RegExp("^" + ID + "\\s*(?:-->\\s*\\|([^|]*)\\||-- \"(.*)\" -->|-\\.\\s*(.*?)\\s*\\.->|-->|==>)\\s*" + ID + "$");
    var nodeRe = new RegExp("^" + ID + "\\s*(\\(\\[|\\[\\(|\\[\\[|\\(\\(|\\[|\\(|\\{)(.*?)(\\]\\)|\\)\\]|\\]\\]|\\)\\)|\\]|\\)|\\})$");
    function label(raw) {
      var t = String(raw).replace(/^"|"$/g, "").replace(/<br\s*\/?>/gi, "\n").replace(/<[^>]*>/g, "");
      return t.replace(/#quot;/g, "\"").replace(/#amp;/g, "&").replace(/#lt;/g, "<").replace(/#gt;/g, ">");
    }
    function node(id, text) {
      if (!seen[id]) { seen[id] = { id: id, label: id }; g.nodes.push(seen[id]); }
      if (text !== undefined) seen[id].label = label(text);
      return seen[id];
    }
    String(text || "").split(/\r?\n/).forEach(function (line, i) {
      line = line.trim();
      var m;
      if (i === 0 || /^(flowchart|graph)\b/.test(line)) {
        m = /^(?:flowchart|graph)\s+(TD|TB|LR|RL|BT)/.exec(line);
        if (m) g.direction = m[1];
        return;
      }
      if ((m = edgeRe.exec(line))) {
        node(m[1]); node(m[5]);
        var lbl = m[2] !== undefined ? m[2] : m[3] !== undefined ? m[3] : m[4];
        g.edges.push({ from: m[1], to: m[5], label: lbl ? label(lbl) : "", dotted: m[4] !== undefined });
      } else if ((m = nodeRe.exec(line))) {
        node(m[1], m[3]);
      }
    });
    return g;
  }

  /* Layers by longest path from the sources, edges that close a cycle left out of it. */
  function layers(g) {
    var out = dict(), layer = dict(), state = dict(), back = dict();
    g.nodes.forEach(function (n) { out[n.id] = []; layer[n.id] = 0; });
    g.edges.forEach(function (e, i) { out[e.from].push({ to: e.to, i: i }); });
    function visit(id) {
      state[id] = 1;
      out[id].forEach(function (e) {
        if (state[e.to] === 1) back[e.i] = true; else if (!state[e.to]) visit(e.to);
      });
      state[id] = 2;
    }
    g.nodes.forEach(function (n) { if (!state[n.id]) visit(n.id); });
    for (var round = 0; round < g.nodes.length; round++) {
      g.edges.forEach(function (e, i) {
        if (!back[i] && layer[e.to] < layer[e.from] + 1) layer[e.to] = layer[e.from] + 1;
      });
    }
    return { layer: layer, back: back };
  }

  /* A Mermaid flowchart drawn as SVG (no mermaid.js): boxes in layers, arrows between them. */
  function drawMermaid(text) {
    var g = parseMermaid(text);
    if (!g.nodes.length) return null;
    var across = g.direction === "LR" || g.direction === "RL";
    var L = layers(g), rows = dict(), pos = dict(), gapMain = 56, gapSide = 24, width = 0, height = 0;
    g.nodes.forEach(function (n) {
      var lines = n.label.split("\n");
      n.w = Math.max(60, Math.max.apply(null, lines.map(function (l) { return l.length; })) * 7 + 18);
      n.h = 12 + 15 * lines.length;
      (rows[L.layer[n.id]] = rows[L.layer[n.id]] || []).push(n);
    });
    var main = 4;
    Object.keys(rows).map(Number).sort(function (a, b) { return a - b; }).forEach(function (k) {
      var side = 4, depth = 0;
      rows[k].forEach(function (n) {
        pos[n.id] = across ? { x: main, y: side } : { x: side, y: main };
        side += (across ? n.h : n.w) + gapSide;
        depth = Math.max(depth, across ? n.w : n.h);
      });
      main += depth + gapMain;
    });
    g.nodes.forEach(function (n) {
      width = Math.max(width, pos[n.id].x + n.w + 60);
      height = Math.max(height, pos[n.id].y + n.h + 30);
    });
    var svg = svgEl("svg", { "class": "graph mermaid", width: width, height: height });
    arrowDefs(svg);
    var byId = dict();
    g.nodes.forEach(function (n) { byId[n.id] = n; });
    g.edges.forEach(function (e, i) {
      var a = byId[e.from], b = byId[e.to], pa = pos[e.from], pb = pos[e.to], d;
      var x1 = across ? pa.x + a.w : pa.x + a.w / 2, y1 = across ? pa.y + a.h / 2 : pa.y + a.h;
      var x2 = across ? pb.x - 2 : pb.x + b.w / 2, y2 = across ? pb.y + b.h / 2 : pb.y - 2;
      if (L.back[i]) {
        var side = Math.max(pa.x + a.w, pb.x + b.w) + 40;
        d = across ? "M" + (pa.x + a.w / 2) + "," + (pa.y + a.h) + " C" + (pa.x + a.w / 2) + "," + (height - 4) + " " + (pb.x + b.w / 2) + "," + (height - 4) + " " + (pb.x + b.w / 2) + "," + (pb.y + b.h + 2)
          : "M" + (pa.x + a.w) + "," + (pa.y + a.h / 2) + " C" + side + "," + (pa.y + a.h / 2) + " " + side + "," + (pb.y + b.h / 2) + " " + (pb.x + b.w + 2) + "," + (pb.y + b.h / 2);
      } else {
        d = "M" + x1 + "," + y1 + " L" + x2 + "," + y2;
      }
      svg.appendChild(svgEl("path", { d: d, "class": "edge" + (e.dotted ? " dotted" : "") }));
      if (e.label) {
        var t = svgEl("text", { x: (x1 + x2) / 2 + 4, y: (y1 + y2) / 2, "class": "edge-label" });
        t.textContent = clip(e.label, 40);
        svg.appendChild(t);
      }
    });
    g.nodes.forEach(function (n) {
      var p = pos[n.id];
      svg.appendChild(svgEl("rect", { x: p.x, y: p.y, width: n.w, height: n.h, rx: n.id === "START" || n.id === "END" ? n.h / 2 : 5 }));
      n.label.split("\n").forEach(function (l, j) {
        var t = svgEl("text", { x: p.x + 9, y: p.y + 19 + 15 * j });
        t.textContent = l;
        svg.appendChild(t);
      });
    });
    return svg;
  }

  /* The runs of a list of events: per run its events, times, status and usage. */
  function model(events) {
    var m = { runs: dict(), order: [], childKind: dict() };
    events.forEach(function (e) {
      var r = m.runs[e.run_id];
      if (!r) {
        r = m.runs[e.run_id] = { id: e.run_id, parent: e.parent_run_id, name: e.run_name, depth: e.depth, items: [], start: ms(e.timestamp), end: ms(e.timestamp), status: "running", usage: null, cost: 0, spent: 0, spentCost: 0, input: "", mermaid: null };
        m.order.push(e.run_id);
      }
      r.start = Math.min(r.start, ms(e.timestamp));
      r.end = Math.max(r.end, ms(e.timestamp));
      if (e.type === "sub_agent_started") m.childKind[e.child_run_id] = { kind: e.kind, agent: e.agent };
      if (e.type === "run_started") r.input = e.goal;
      if (e.type === "usage") { r.spent += tokens(e.usage); r.spentCost += Number(e.cost_usd || 0); }
      if (e.type === "run_finished") { r.status = e.finish_reason && e.finish_reason.kind || String(e.finish_reason); r.usage = e.usage; r.cost = e.cost_usd; r.error = e.error; }
      if (typeof e.mermaid === "string") r.mermaid = e.mermaid;
      r.items.push(e);
    });
    m.roots = m.order.filter(function (id) { return !m.runs[id].parent || !m.runs[m.runs[id].parent]; });
    /* A node of the tree that reports no end of its own (a graph node's model call) ended when
       its parent did. */
    m.order.forEach(function (id) {
      var r = m.runs[id], p = r.parent && m.runs[r.parent];
      while (r.status === "running" && p) {
        if (p.status !== "running") { r.status = "ended"; break; }
        p = p.parent && m.runs[p.parent];
      }
    });
    m.t0 = Math.min.apply(null, m.order.map(function (id) { return m.runs[id].start; }));
    m.t1 = Math.max.apply(null, m.order.map(function (id) { return m.runs[id].end; }));
    m.span = Math.max(1, m.t1 - m.t0);
    return m;
  }

  function kindOf(m, r) {
    if (m.childKind[r.id]) return m.childKind[r.id].kind;
    var parent = r.parent && m.runs[r.parent];
    if (parent && kindOf(m, parent) === "graph") return "node";
    var n = String(r.name || "").replace(/-d\d+$/, "");
    if (n === "rlm" || n === "repl") return "rlm";
    if (n === "goal") return "goal";
    if (n === "graph" || n === "graph-new") return "graph";
    return "agent";
  }

  function summary(m, r, kind) {
    var sum = el("summary");
    var left = el("span");
    left.appendChild(el("span", "kind " + kind, kind));
    left.appendChild(el("span", "name", String(r.name || r.id).replace(/-d\d+$/, "")));
    var bad = ["completed", "no_more_tool_calls", "running", "ended"].indexOf(r.status) < 0;
    left.appendChild(el("span", "status" + (bad ? " bad" : ""), r.status));
    var line = el("div", "timeline"), bar = el("span");
    bar.style.left = ((r.start - m.t0) / m.span * 100) + "%";
    bar.style.width = ((r.end - r.start) / m.span * 100) + "%";
    line.appendChild(bar);
    /* A run still going shows what its own model calls spent so far. */
    var tok = r.usage ? tokens(r.usage) : r.spent, cost = r.usage ? r.cost : r.spentCost;
    var nums = el("span", "nums", ((r.end - r.start) / 1000).toFixed(2) + " s · " + tok + " tok · " + usd(cost));
    sum.appendChild(left); sum.appendChild(line); sum.appendChild(nums);
    return sum;
  }

  /* `onRender`, if given, is called after each redraw. */
  function create(container, onRender) {
    var events = [], opened = dict(), streaming = dict(), pending = null, m = model([]), drawMs = 0;

    function renderRun(id) {
      var r = m.runs[id];
      var box = el("details", "run node");
      box.open = id in opened ? opened[id] : r.depth < 2;
      box.addEventListener("toggle", function () { opened[id] = box.open; });
      box.setAttribute("data-run", id);
      box.appendChild(summary(m, r, kindOf(m, r)));
      if (r.input) box.appendChild(item("input", clip(r.input, 600)));
      if (r.mermaid) { var chart = drawMermaid(r.mermaid); if (chart) box.appendChild(chart); }
      var body = box, iteration = null, goals = dict(), steps = [], graphBox = null, tools = dict();
      r.items.forEach(function (e) {
        var target = iteration || body;
        switch (e.type) {
          case "rlm_iteration":
            iteration = el("div", "iteration node"); iteration.appendChild(el("div", "what", "iteration " + e.iteration)); body.appendChild(iteration); break;
          case "rlm_snippet": target.appendChild(el("pre", "code", e.code)); break;
          case "rlm_observation": target.appendChild(el("pre", "out", e.observation)); break;
          case "rlm_sub_call": target.appendChild(item("↳ " + e.kind, clip(e.prompt_head, 160) + (e.answer_head ? "  →  " + clip(e.answer_head, 160) : "") + "  (" + e.latency_ms + " ms)", e.ok ? "" : "error")); break;
          case "rlm_submit": target.appendChild(item(e.valid ? "✓ submit" : "✗ submit", JSON.stringify(e.output), e.valid ? "" : "error")); break;
          case "rlm_finished": iteration = null; body.appendChild(item("rlm", e.outcome && (e.outcome.kind || e.outcome))); break;
          case "usage": target.appendChild(item("model " + (e.model || ""), tokens(e.usage) + " tok" + (e.duration_ms !== undefined ? " · " + e.duration_ms + " ms" : "") + (e.cost_usd ? " · " + usd(e.cost_usd) : ""))); break;
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
          case "sub_agent_started": if (m.runs[e.child_run_id]) target.appendChild(renderRun(e.child_run_id)); break;
          case "error": target.appendChild(item("error", e.message, "error")); break;
          default: break;
        }
      });
      m.order.forEach(function (cid) {
        var c = m.runs[cid];
        if (c.parent === id && !m.childKind[cid]) box.appendChild(renderRun(cid));
      });
      if (streaming[id]) box.appendChild(item("assistant …", clip(streaming[id], 800), "streaming"));
      if (r.error) box.appendChild(item("fault", r.error, "error"));
      return box;
    }

    function render() {
      if (pending !== null) { clearTimeout(pending); pending = null; }
      var began = Date.now();
      m = model(events);
      container.textContent = "";
      m.roots.forEach(function (id) { container.appendChild(renderRun(id)); });
      if (onRender) onRender();
      drawMs = Date.now() - began;
    }

    return {
      /* Streamed text is shown as it comes, until the run's whole message (or the call's
         usage) arrives; the fragments themselves are not kept. */
      add: function (e) {
        if (!e || typeof e !== "object") return;
        if (e.type === "partial_text") { streaming[e.run_id] = (streaming[e.run_id] || "") + (e.delta || ""); return; }
        if (e.type === "assistant_text" || e.type === "usage" || e.type === "run_finished") delete streaming[e.run_id];
        if (!LEFT_OUT[e.type]) events.push(e);
      },
      addAll: function (list) { list.forEach(this.add); },
      render: render,
      /* Redraws within `delay` ms (100 by default), once however many events came meanwhile;
         a tree that takes long to draw is redrawn less often (at most a fifth of the time). */
      schedule: function (delay) {
        if (pending === null) pending = setTimeout(render, Math.max(delay === undefined ? 100 : delay, 4 * drawMs));
      },
      clear: function () { events = []; opened = dict(); streaming = dict(); render(); },
      runCount: function () { return m.order.length; },
      totals: function () {
        /* A finished root counts its tree's usage; a running one what its tree's calls spent so far. */
        var total = 0, cost = 0;
        function rootOf(id) { while (m.runs[id].parent && m.runs[m.runs[id].parent]) id = m.runs[id].parent; return id; }
        m.order.forEach(function (id) {
          var r = m.runs[id], root = m.runs[rootOf(id)];
          if (root.usage && r === root) { total += tokens(r.usage); cost += Number(r.cost || 0); }
          if (!root.usage) { total += r.spent; cost += r.spentCost; }
        });
        var secs = m.order.length ? (m.t1 - m.t0) / 1000 : 0;
        return m.order.length + " runs · " + secs.toFixed(2) + " s · " + total + " tok · " + usd(cost);
      }
    };
  }

  /* Hides the items and code not matching `q` under `root` and opens the runs that do. */
  function search(root, q) {
    q = String(q || "").toLowerCase();
    root.querySelectorAll(".item, pre").forEach(function (n) {
      n.classList.toggle("hidden", q !== "" && n.textContent.toLowerCase().indexOf(q) < 0);
    });
    if (q !== "") root.querySelectorAll("details.run").forEach(function (d) { d.open = d.textContent.toLowerCase().indexOf(q) >= 0; });
  }

  return { create: create, search: search, parseMermaid: parseMermaid, drawMermaid: drawMermaid, el: el, usd: usd };
})();
