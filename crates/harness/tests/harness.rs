#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The library harness builds what the CLI builds from one configuration: the provider, the
//! policy and limits of `recursive.toml`, and every runnable file offered to every engine — as
//! a tool of the agent, a function of the RLM, a delegate of the pursuer, a node of a graph.

use std::path::Path;

use recursive_core::RunnableKind;
use recursive_graph::blueprint::{self, Source};
use recursive_harness::{Harness, HarnessOptions, ProviderOptions};

fn write(dir: &Path, name: &str, text: &str) -> String {
    std::fs::write(dir.join(name), text).unwrap();
    dir.join(name).display().to_string()
}

async fn harness(dir: &Path, runnables: Vec<String>) -> Result<Harness, recursive_harness::ConfigError> {
    let config = write(dir, "recursive.toml", "[limits]\nmax_depth = 5\n[rlm]\ndialect = \"dspy\"\n");
    Harness::build(HarnessOptions {
        config: Some(config.into()),
        provider: ProviderOptions { provider: Some("mock".into()), ..Default::default() },
        workspace: Some(dir.to_path_buf()),
        runnables,
        ..Default::default()
    })
    .await
}

#[tokio::test]
async fn every_runnable_file_reaches_every_engine() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let reviewer = write(d, "reviewer.toml", "description = \"Reviews.\"\ntools = [\"read_file\"]\n");
    let reader = write(d, "reader.toml", "kind = \"rlm\"\ndescription = \"Reads.\"\ntools = [\"reviewer\"]\n");
    let h = harness(d, vec![format!("reviewer={reviewer}"), format!("reader={reader}")]).await.unwrap();

    assert_eq!(h.limits().max_depth, 5, "[limits] applies");
    let kinds: Vec<(String, RunnableKind)> = h.runnables().iter().map(|r| (r.name().to_string(), r.kind())).collect();
    assert_eq!(kinds, [("reader".to_string(), RunnableKind::Rlm), ("reviewer".to_string(), RunnableKind::Agent)]);
    // The agent's tools: the built-ins and both runnables.
    let tools = h.agent("main").tools().names();
    assert!(tools.contains(&"reviewer".to_string()) && tools.contains(&"reader".to_string()), "{tools:?}");
    assert!(tools.contains(&"write_file".to_string()));
    // The RLM: [rlm] settings, the default host tools, and the runnables as functions.
    let rlm = h.rlm(None).unwrap();
    assert_eq!(rlm.config().dialect, recursive_rlm::Dialect::parse("dspy").unwrap());
    let host = rlm.host_tools().names();
    assert!(host.contains(&"read_file".to_string()) && host.contains(&"reviewer".to_string()), "{host:?}");
    assert!(!host.contains(&"web_fetch".to_string()));
    // A file's RLM sees the runnables named before it.
    let reader = h.runnables().get("reader").unwrap();
    assert!(reader.description().contains("Reads."));
    // Blueprints bind the defaults and the runnables by kind.
    let allow = h.allowlist(Vec::new()).unwrap();
    let text = "name = \"g\"\n[state]\nq = \"string\"\na = \"string\"\nb = \"string\"\n\
                [[nodes]]\nname = \"r\"\nrlm = \"reader\"\nquestion = \"{q}\"\noutput = \"a\"\n\
                [[nodes]]\nname = \"v\"\nagent = \"reviewer\"\ninput = \"{a}\"\noutput = \"b\"\n\
                [[nodes]]\nname = \"d\"\nrlm = \"default\"\nquestion = \"{b}\"\noutput = \"a\"\n\
                [[edges]]\nfrom = \"START\"\nto = \"r\"\n[[edges]]\nfrom = \"r\"\nto = \"v\"\n[[edges]]\nfrom = \"v\"\nto = \"d\"\n";
    let source = Source { origin: "g.toml".into(), text: text.into() };
    blueprint::load(&source, &allow).unwrap_or_else(|d| panic!("{d}"));
    // A name of the wrong kind is refused at bind, with what is allowed.
    let wrong = Source { origin: "w.toml".into(), text: text.replace("rlm = \"reader\"", "rlm = \"reviewer\"") };
    let err = blueprint::load(&wrong, &allow).unwrap_err().to_string();
    assert!(err.contains("rlm `reviewer` is not allowed") && err.contains("reader"), "{err}");
}

#[tokio::test]
async fn a_file_naming_an_unknown_tool_or_a_later_runnable_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let early = write(d, "early.toml", "description = \"Early.\"\ntools = [\"late\"]\n");
    let late = write(d, "late.toml", "description = \"Late.\"\n");
    let err = harness(d, vec![format!("early={early}"), format!("late={late}")]).await.unwrap_err();
    assert!(err.0.contains("unknown tool `late`"), "{err}");
    let err = harness(d, vec![format!("late={late}"), format!("late={late}")]).await.unwrap_err();
    assert!(err.0.contains("two runnables have that name"), "{err}");
}
