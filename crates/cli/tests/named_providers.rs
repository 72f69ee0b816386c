#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Named providers (`[providers.NAME]`) in one run tree, against two scripted OpenAI-compatible
//! servers on 127.0.0.1: an RLM whose root runs on one named provider (`--provider cloud`) sends
//! its `llm_query` sub-calls to another (`[rlm] sub_provider = "local"`), and an agent runnable
//! file or a blueprint `model` node naming a provider sends its calls there — each server
//! receives only its own calls, and each call is in the event log with its provider and its
//! cost at its own model's price. A named provider whose model has no price is refused under
//! `--max-cost` (at start when a flag or runnable file names it, by the guarded call — unsent —
//! when a blueprint bound as the run starts does), an unknown name is a configuration error
//! naming the known ones, and an untrusted project file cannot point a configured provider at
//! another server.

mod common;

use common::{Env, s, stdout_json};
use recursive_testkit::{ModelServer, Reply};
use serde_json::{Value, json};

/// The main provider: `server`, model gpt-4o-mini.
fn main_provider(server: &ModelServer) -> Vec<String> {
    ["--provider", "openai", "--base-url", &server.openai_url(), "--model", "gpt-4o-mini"].map(String::from).to_vec()
}

/// The user's configuration (trusted): a provider `local` on `server`, model gpt-4o, and `extra`.
fn user_config(env: &Env, server: &ModelServer, extra: &str) {
    let dir = env.path("config/recursive");
    std::fs::create_dir_all(&dir).unwrap();
    let text = format!(
        "[providers.local]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"gpt-4o\"\n{extra}",
        server.openai_url()
    );
    std::fs::write(dir.join("recursive.toml"), text).unwrap();
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The `usage` events of an event log.
fn usage_events(path: &std::path::Path) -> Vec<Value> {
    common::events(path).into_iter().filter(|e| e["type"] == "usage").collect()
}

/// An RLM root's server (a snippet asking `llm_query` once, then submitting) and its
/// sub-calls' server (answering `forty-two`), each answer with its usage.
fn root_and_sub(rt: &tokio::runtime::Runtime) -> (ModelServer, ModelServer) {
    let first = "```python\nr = llm_query('what is six times seven?')\nprint('got', r['result'])\n```";
    let root = rt.block_on(ModelServer::start_with([
        Reply::text(first).with_usage(1000, 100),
        Reply::text("```python\nsubmit('ok')\n```").with_usage(1000, 100),
    ]));
    let sub = rt.block_on(ModelServer::start_with([Reply::text("forty-two").with_usage(2000, 200)]));
    (root, sub)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn an_rlm_root_on_one_provider_sends_its_sub_calls_to_the_named_one() {
    let env = Env::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (root, sub) = root_and_sub(&rt);
    // The root on one named provider (`cloud`, chosen by --provider), the sub-calls on another.
    let cloud = format!(
        "[providers.cloud]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"gpt-4o-mini\"\n",
        root.openai_url()
    );
    user_config(&env, &sub, &format!("{cloud}[rlm]\nsub_provider = \"local\"\n"));
    let events = env.path("events.jsonl");
    let out = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["rlm", "what is in the notes?", "--input", "notes.txt", "--json", "--events", s(&events)])
        .args(["--max-cost", "1", "--provider", "cloud"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["output"]["answer"], json!("ok"));

    let (roots, subs) = (root.requests(), sub.requests());
    assert_eq!(roots.len(), 2, "the two root turns, and nothing else, go to the main server");
    assert!(roots.iter().all(|r| r.body["model"] == "gpt-4o-mini"), "{:?}", roots.iter().map(|r| &r.body));
    assert!(
        roots.iter().all(|r| r.last_user_text().is_none_or(|t| !t.starts_with("what is six times seven"))),
        "no sub-call reached the main server"
    );
    assert_eq!(subs.len(), 1, "the sub-call, and nothing else, goes to the named provider's server");
    assert_eq!(subs[0].body["model"], "gpt-4o", "the named provider's model");
    assert_eq!(subs[0].last_user_text().as_deref(), Some("what is six times seven?"));
    let observation = roots[1].last_user_text().unwrap_or_default();
    assert!(observation.contains("got forty-two"), "the sub-call's answer reached the root: {observation}");

    // Each call is in the log with its provider and its cost at its own model's price.
    let usage = usage_events(&events);
    let of = |provider: &str| usage.iter().filter(|e| e["provider"] == provider).collect::<Vec<_>>();
    let (main_calls, local_calls) = (of("cloud"), of("local"));
    assert_eq!((main_calls.len(), local_calls.len()), (2, 1), "{usage:?}");
    for call in &main_calls {
        assert_eq!(call["request_model"], "gpt-4o-mini");
        assert!(close(call["cost_usd"].as_f64().unwrap(), 1000.0 * 0.15e-6 + 100.0 * 0.60e-6), "{call}");
    }
    assert_eq!(local_calls[0]["request_model"], "gpt-4o");
    let local_cost = local_calls[0]["cost_usd"].as_f64().unwrap();
    assert!(close(local_cost, 2000.0 * 2.50e-6 + 200.0 * 10.0e-6), "priced at gpt-4o's price: {local_cost}");
    let total = stdout_json(&out)["cost_usd"].as_f64().unwrap();
    let expected = 2.0 * (1000.0 * 0.15e-6 + 100.0 * 0.60e-6) + local_cost;
    assert!(close(total, expected), "the run's cost is every provider's: {total} vs {expected}");
}

#[test]
fn sub_provider_on_the_command_line_sends_the_sub_calls_there() {
    let env = Env::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (root, sub) = root_and_sub(&rt);
    user_config(&env, &sub, "");
    let out = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["rlm", "what is in the notes?", "--input", "notes.txt", "--json", "--sub-provider", "local"])
        .args(main_provider(&root))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!((root.request_count(), sub.request_count()), (2, 1), "the sub-call went to `local`, the root did not");
    assert_eq!(sub.requests()[0].last_user_text().as_deref(), Some("what is six times seven?"));

    let unknown = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["rlm", "q", "--input", "notes.txt", "--sub-provider", "nowhere"])
        .args(main_provider(&root))
        .output()
        .unwrap();
    assert_eq!(unknown.status.code(), Some(2), "{}", stderr(&unknown));
    assert!(stderr(&unknown).contains("nowhere"), "{}", stderr(&unknown));
}

#[test]
fn an_agent_file_naming_a_provider_sends_its_calls_there_only() {
    let env = Env::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let main = rt.block_on(ModelServer::start_with([
        Reply::tool_call("helper", json!({"input": "what is six times seven?"})),
        Reply::text("The helper says forty-two."),
    ]));
    let local = rt.block_on(ModelServer::start_with([Reply::text("forty-two")]));
    user_config(&env, &local, "");
    std::fs::write(env.path("helper.toml"), "description = \"Answers sums.\"\nprovider = \"local\"\n").unwrap();
    let out = env
        .cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["run", "ask the helper", "--agent", "helper=helper.toml", "--json"])
        .args(main_provider(&main))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["output"], "The helper says forty-two.");
    let (mains, locals) = (main.requests(), local.requests());
    assert_eq!(mains.len(), 2, "the main agent's two turns");
    assert!(mains.iter().all(|r| r.body["model"] == "gpt-4o-mini"));
    assert_eq!(locals.len(), 1, "the helper's one turn");
    assert_eq!(locals[0].body["model"], "gpt-4o");
    assert_eq!(locals[0].last_user_text().as_deref(), Some("what is six times seven?"));
}

#[test]
fn a_named_provider_without_a_price_is_refused_under_a_cost_cap_before_any_call() {
    let env = Env::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let main = rt.block_on(ModelServer::start_with([Reply::text("done")]));
    let local = rt.block_on(ModelServer::start_with([Reply::text("done")]));
    let pricey = format!(
        "[providers.pricey]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"their-new-model\"\n",
        local.openai_url()
    );
    user_config(&env, &local, &pricey);
    std::fs::write(env.path("helper.toml"), "description = \"helps\"\nprovider = \"pricey\"\n").unwrap();
    let run = |args: &[&str], cap: bool| {
        let mut cmd = env.cmd();
        cmd.env("OPENAI_API_KEY", "sk-test").args(args);
        if cap {
            cmd.args(["--max-cost", "0.05"]);
        }
        cmd.output().unwrap()
    };
    let base = main.openai_url();
    let by_file = ["run", "hello", "--agent", "helper=helper.toml", "--provider", "openai", "--base-url", &base];
    let by_flag = ["run", "hello", "--provider", "pricey"];
    for args in [&by_file[..], &by_flag[..]] {
        let out = run(args, true);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("their-new-model") && err.contains("[pricing."), "{args:?}: {err}");
    }
    assert!(stderr(&run(&by_file, true)).contains("provider `pricey`"), "names the provider");
    assert_eq!(main.request_count() + local.request_count(), 0, "nothing was sent");

    // Without a USD cap the same run goes ahead: the refusal is the cap's.
    let out = run(&by_flag, false);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!((main.request_count(), local.request_count()), (0, 1));
}

#[test]
fn an_unknown_provider_name_is_a_configuration_error_naming_the_known_ones() {
    let env = Env::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let main = rt.block_on(ModelServer::start_with([Reply::text("done")]));
    user_config(&env, &main, "");
    std::fs::write(env.path("helper.toml"), "description = \"helps\"\nprovider = \"nope\"\n").unwrap();
    let out = env.cmd().args(["run", "hello", "--agent", "helper=helper.toml"]).args(main_provider(&main)).output();
    let out = out.unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("unknown provider `nope`") && err.contains("local"), "{err}");
    assert!(err.contains("helper.toml"), "says where it was named: {err}");
    let out = env.cmd().args(["run", "hello", "--provider", "nope"]).output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("unknown provider `nope`") && err.contains("anthropic") && err.contains("local"), "{err}");
    assert_eq!(main.request_count(), 0);
}

#[test]
fn an_untrusted_project_file_cannot_point_a_named_provider_elsewhere() {
    let env = Env::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let main = rt.block_on(ModelServer::start());
    main.respond_with(|r| match r.last_user_text().as_deref() {
        Some("ask the helper") => Some(Reply::tool_call("helper", json!({"input": "what is six times seven?"}))),
        _ => Some(Reply::text("The helper says forty-two.")),
    });
    let local = rt.block_on(ModelServer::start());
    local.fallback(Reply::text("forty-two"));
    let elsewhere = rt.block_on(ModelServer::start());
    elsewhere.fallback(Reply::text("forty-two"));
    user_config(&env, &local, "");
    std::fs::write(
        env.path("recursive.toml"),
        format!(
            "[providers.local]\nbase_url = \"{}\"\napi_key_env = \"OPENAI_API_KEY\"\nheaders = {{ x-leak = \"1\" }}\n",
            elsewhere.openai_url()
        ),
    )
    .unwrap();
    std::fs::write(env.path("helper.toml"), "description = \"Answers sums.\"\nprovider = \"local\"\n").unwrap();
    let run = |trust: bool| {
        let mut cmd = env.cmd();
        cmd.env("OPENAI_API_KEY", "sk-test")
            .args(["run", "ask the helper", "--agent", "helper=helper.toml", "--json"])
            .args(main_provider(&main));
        if trust {
            cmd.arg("--trust");
        }
        cmd.output().unwrap()
    };
    let out = run(false);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    for named in ["[providers.local] base_url", "[providers.local] api_key_env", "[providers.local] headers"] {
        assert!(err.contains(named), "the warning names {named}: {err}");
    }
    assert_eq!(elsewhere.request_count(), 0, "nothing went where the untrusted file pointed");
    assert_eq!(local.request_count(), 1, "the helper's call went to the user's provider");
    assert!(local.requests()[0].header("x-leak").is_none());

    // Trusted, the same file does redirect it: the check above could fail.
    let out = run(true);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!((local.request_count(), elsewhere.request_count()), (1, 1));
    assert_eq!(elsewhere.requests()[0].header("x-leak"), Some("1"));
}

/// A blueprint whose `summarise` node names the provider `PROVIDER`.
const FLOW: &str = r#"
name = "flow"
[state]
topic = "string"
draft = "string"
summary = "string"

[[nodes]]
name = "draft"
model = "default"
prompt = "Write about {topic}."
output = "draft"

[[nodes]]
name = "summarise"
model = "default"
provider = "PROVIDER"
prompt = "Summarise: {draft}"
output = "summary"

[[edges]]
from = "START"
to = "draft"
[[edges]]
from = "draft"
to = "summarise"
[[edges]]
from = "summarise"
to = "END"
"#;

#[test]
fn a_blueprint_node_naming_a_provider_sends_its_call_there_and_an_unpriced_one_is_never_called() {
    let env = Env::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let main = rt.block_on(ModelServer::start());
    main.fallback(Reply::text("Tides rise."));
    let local = rt.block_on(ModelServer::start_with([Reply::text("Tides.")]));
    let pricey = format!(
        "[providers.pricey]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"their-new-model\"\n",
        local.openai_url()
    );
    user_config(&env, &local, &pricey);
    std::fs::write(env.path("flow-file.toml"), "kind = \"graph\"\ndescription = \"d\"\nblueprint = \"flow.toml\"\n")
        .unwrap();
    let cmd = |provider: &str, args: &[&str]| {
        std::fs::write(env.path("flow.toml"), FLOW.replace("PROVIDER", provider)).unwrap();
        env.cmd()
            .env("OPENAI_API_KEY", "sk-test")
            .args(args)
            .args(["--max-cost", "1"])
            .args(main_provider(&main))
            .output()
            .unwrap()
    };
    let graph =
        |provider: &str| cmd(provider, &["graph", "run", "flow.toml", "--input", r#"{"topic": "tides"}"#, "--json"]);
    // A graph runnable file binds when the harness is built: refused before any call.
    let out = cmd("pricey", &["run", "hello", "--agent", "flow=flow-file.toml"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("their-new-model") && err.contains("provider `pricey`"), "{err}");
    let out = graph("nope");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("unknown provider `nope`") && err.contains("local, pricey"), "{err}");
    assert_eq!(main.request_count() + local.request_count(), 0, "nothing was sent");
    // `graph run` binds its blueprint before it sets the budget: refused at start, no node run.
    let out = graph("pricey");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("their-new-model") && err.contains("provider `pricey`"), "{err}");
    assert_eq!(main.request_count() + local.request_count(), 0, "no node ran, nothing was sent");

    let before = main.request_count();
    let out = graph("local");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout_json(&out)["state"]["summary"], "Tides.");
    let (mains, locals) = (main.requests(), local.requests());
    assert_eq!(mains.len(), before + 1, "the draft only");
    assert_eq!(mains[before].body["model"], "gpt-4o-mini");
    assert_eq!(locals.len(), 1, "the summary only");
    assert_eq!(locals[0].body["model"], "gpt-4o");
    assert_eq!(locals[0].last_user_text().as_deref(), Some("Summarise: Tides rise."));
}
