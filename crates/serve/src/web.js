/* The live view of `recursive serve` (after the shared renderer, RecursiveTrace): the run list
   (GET /v1/runs, polled), the chosen run's events (GET /v1/runs/{id}/events read with fetch, so
   the token can go in a header; resumed with Last-Event-ID after a broken connection), a form to
   start a run, and the token prompt. Every run text is set as text, never as markup. */
(function () {
  "use strict";
  var el = RecursiveTrace.el;
  var TOKEN_KEY = "recursive-serve-token";
  var POLL_MS = 1500;
  /* Largest event the page buffers before giving up on a stream. */
  var MAX_EVENT_CHARS = 32 * 1024 * 1024;
  var state = { runs: [], hasMore: false, selected: null, chosen: false, stream: null, lastId: -1, events: 0, query: "" };

  window.addEventListener("error", function (e) {
    var box = document.getElementById("error");
    box.style.display = "block";
    box.textContent = "The page failed: " + e.message;
    document.body.setAttribute("data-error", e.message);
  });

  var tree = document.getElementById("tree");
  var view = RecursiveTrace.create(tree, function () {
    if (state.query) RecursiveTrace.search(tree, state.query);
    document.getElementById("totals").textContent = view.totals();
    document.body.setAttribute("data-events", String(state.events));
  });

  function token() { try { return sessionStorage.getItem(TOKEN_KEY) || ""; } catch (e) { return ""; } }
  function headers(extra) {
    var h = extra || {};
    if (token()) h.Authorization = "Bearer " + token();
    return h;
  }
  function askToken() { document.getElementById("auth").classList.remove("hidden"); document.getElementById("token").focus(); }
  function connection(text) { document.getElementById("conn").textContent = text; }

  /* A JSON API call; a 401 asks for the token. */
  function api(path, options) {
    options = options || {};
    options.headers = headers(options.headers);
    return fetch(path, options).then(function (r) {
      if (r.status === 401) { askToken(); throw new Error("the server needs its token"); }
      return r.json().then(function (body) {
        if (!r.ok) throw new Error(body && body.error ? body.error.message : "HTTP " + r.status);
        return body;
      });
    });
  }

  function when(secs) { return secs ? new Date(secs * 1000).toLocaleString() : ""; }

  function drawList() {
    var list = document.getElementById("runs");
    list.textContent = "";
    if (!state.runs.length) list.appendChild(el("li", "empty", "No runs yet."));
    state.runs.forEach(function (run) {
      var li = el("li", run.id === state.selected ? "selected" : "");
      li.setAttribute("data-run-id", run.id);
      li.appendChild(el("span", "kind " + run.kind, run.kind));
      li.appendChild(el("span", "status " + run.status + (run.result && !run.result.ok ? " bad" : ""), run.result ? run.result.outcome : run.status));
      li.appendChild(el("span", "title", run.title || run.id));
      li.appendChild(el("span", "when", when(run.created_at) + " · " + run.events + " events"));
      li.addEventListener("click", function () { state.chosen = true; select(run.id); });
      list.appendChild(li);
    });
    document.getElementById("older").classList.toggle("hidden", !state.hasMore);
  }

  function drawHead(run) {
    var head = document.getElementById("run-head");
    head.textContent = "";
    if (!run) return;
    var h = el("h2");
    h.appendChild(el("span", "kind " + run.kind, run.kind));
    h.appendChild(el("span", "", run.title || run.id));
    var r = run.result;
    h.appendChild(el("span", "status " + run.status + (r && !r.ok ? " bad" : ""), r ? r.outcome : run.status));
    head.appendChild(h);
    head.appendChild(el("div", "meta", run.id + " · " + when(run.created_at)));
    if (!r) return;
    var nums = (r.input_tokens + r.output_tokens) + " tok · " + RecursiveTrace.usd(r.cost_usd);
    head.appendChild(el("div", "item" + (r.ok ? "" : " error"), r.outcome + " · " + nums));
    if (r.error) head.appendChild(el("div", "item error", r.error));
    if (r.text) head.appendChild(el("pre", "out result", r.text));
    var chart = mermaidOf(r);
    if (chart) { var svg = RecursiveTrace.drawMermaid(chart); if (svg) head.appendChild(svg); }
  }

  /* A graph's Mermaid flowchart, when the run's result carries one. */
  function mermaidOf(r) {
    if (r.output && typeof r.output.mermaid === "string") return r.output.mermaid;
    if (typeof r.text === "string" && /^\s*(flowchart|graph)\s+(TD|TB|LR|RL|BT)\b/.test(r.text)) return r.text;
    return null;
  }

  function refreshList() {
    return api("/v1/runs?limit=50").then(function (list) {
      state.runs = list.data;
      state.hasMore = list.has_more;
      var chosen = state.runs.filter(function (r) { return r.id === state.selected; })[0];
      if (!state.chosen && state.runs.length && state.runs[0].id !== state.selected) select(state.runs[0].id);
      else if (chosen) drawHead(chosen);
      drawList();
      connection("");
    }).catch(function (e) { connection(String(e.message || e)); });
  }

  function olderRuns() {
    var last = state.runs[state.runs.length - 1];
    if (!last) return;
    api("/v1/runs?limit=50&before=" + encodeURIComponent(last.id)).then(function (list) {
      state.runs = state.runs.concat(list.data);
      state.hasMore = list.has_more;
      drawList();
    });
  }

  /* Shows run `id`: its events from the start, then live. */
  function select(id) {
    if (state.stream) state.stream.abort();
    state.stream = null;
    state.selected = id;
    state.lastId = -1;
    state.events = 0;
    view.clear();
    if (location.hash !== "#run=" + id) history.replaceState(null, "", "#run=" + id);
    drawHead(state.runs.filter(function (r) { return r.id === id; })[0]);
    drawList();
    follow(id, 0);
  }

  /* Reads the run's events until `end`; a broken connection resumes after the last event. */
  function follow(id, attempt) {
    var control = new AbortController();
    state.stream = control;
    var h = headers({ Accept: "text/event-stream" });
    if (state.lastId >= 0) h["Last-Event-ID"] = String(state.lastId);
    fetch("/v1/runs/" + encodeURIComponent(id) + "/events", { headers: h, signal: control.signal })
      .then(function (r) {
        if (r.status === 401) { askToken(); throw new Error("the server needs its token"); }
        if (r.status === 404) throw new Error("no such run: " + id);
        if (!r.ok || !r.body) throw new Error("events: HTTP " + r.status);
        connection("live");
        return readStream(r.body.getReader(), id);
      })
      .then(function (ended) {
        if (state.stream !== control) return;
        state.stream = null;
        if (!ended) retry(id, 0);
      })
      .catch(function (e) {
        if (control.signal.aborted || state.stream !== control) return;
        state.stream = null;
        connection(String(e.message || e));
        if (!/token|no such run/.test(String(e.message))) retry(id, attempt + 1);
      });
  }

  function retry(id, attempt) {
    setTimeout(function () { if (state.selected === id && !state.stream) follow(id, attempt); }, Math.min(5000, 500 * (attempt + 1)));
  }

  /* Parses Server-Sent Events from `reader`; resolves true once `end` came. */
  function readStream(reader, id) {
    var decoder = new TextDecoder(), buffer = "";
    function pump() {
      return reader.read().then(function (chunk) {
        if (chunk.done) return false;
        buffer += decoder.decode(chunk.value, { stream: true }).replace(/\r\n?/g, "\n");
        var at;
        while ((at = buffer.indexOf("\n\n")) >= 0) {
          var block = buffer.slice(0, at);
          buffer = buffer.slice(at + 2);
          if (dispatch(block, id)) { reader.cancel(); return true; }
        }
        if (buffer.length > MAX_EVENT_CHARS) throw new Error("an event larger than the page reads");
        return pump();
      });
    }
    return pump();
  }

  /* One SSE block: an event of the run (drawn), or `end` (the run's final view). */
  function dispatch(block, id) {
    var type = "message", data = [], eventId = null;
    block.split("\n").forEach(function (line) {
      var colon = line.indexOf(":");
      if (colon === 0) return;
      var field = colon < 0 ? line : line.slice(0, colon);
      var value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "event") type = value;
      else if (field === "data") data.push(value);
      else if (field === "id") eventId = value;
    });
    if (!data.length || state.selected !== id) return false;
    var payload = JSON.parse(data.join("\n"));
    if (type === "end") {
      var run = payload.run;
      state.runs = state.runs.map(function (r) { return r.id === run.id ? run : r; });
      drawHead(run);
      drawList();
      view.render();
      connection("finished");
      return true;
    }
    if (eventId !== null) state.lastId = Number(eventId);
    state.events += 1;
    view.add(payload);
    view.schedule();
    return false;
  }

  document.getElementById("auth").addEventListener("submit", function (ev) {
    ev.preventDefault();
    try { sessionStorage.setItem(TOKEN_KEY, document.getElementById("token").value.trim()); } catch (e) { /* private mode: asked again */ }
    document.getElementById("token").value = "";
    document.getElementById("auth").classList.add("hidden");
    refreshList().then(function () { if (state.selected && !state.stream) follow(state.selected, 0); });
  });

  document.getElementById("start").addEventListener("submit", function (ev) {
    ev.preventDefault();
    var input = document.getElementById("start-input");
    var body = { kind: document.getElementById("start-kind").value, input: input.value };
    api("/v1/runs", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) })
      .then(function (run) {
        input.value = "";
        state.runs.unshift(run);
        state.chosen = true;
        select(run.id);
      })
      .catch(function (e) { connection(String(e.message || e)); });
  });

  document.getElementById("search").addEventListener("input", function (ev) {
    state.query = ev.target.value;
    RecursiveTrace.search(tree, state.query);
  });
  document.getElementById("older").addEventListener("click", olderRuns);

  var hash = /^#run=(.+)$/.exec(location.hash);
  if (hash) { state.chosen = true; select(decodeURIComponent(hash[1])); }
  refreshList();
  /* No polling while the token is asked for (each poll would only be refused). */
  setInterval(function () { if (document.getElementById("auth").classList.contains("hidden")) refreshList(); }, POLL_MS);
})();
