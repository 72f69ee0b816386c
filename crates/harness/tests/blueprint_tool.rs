#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The `blueprint` tool stays inside the run that uses it: a blueprint's `[limits]` can only
//! narrow the run's, a blueprint saved under a name is replaced only when the model asks, and the
//! file is written only where `write_file` may write — never through a link planted on the way.

use std::path::Path;

use recursive_core::{RunScope, Tool, ToolCall, ToolContext, ToolError, ToolRegistry};
use recursive_graph::RecursionPolicy;
use recursive_harness::{BlueprintTool, Harness, HarnessOptions, ProviderOptions};
use serde_json::{Value, json};

/// A blueprint named `notes` that reads `notes.txt` with `read_file` (no model call), with
/// these `[limits]` lines.
fn notes(limits: &str) -> String {
    format!(
        "name = \"notes\"\n[limits]\n{limits}\n[state]\ntext = \"string\"\n[[nodes]]\nname = \"read\"\n\
         tool = \"read_file\"\nargs = {{ path = \"notes.txt\" }}\noutput = \"text\"\n\
         [[edges]]\nfrom = \"START\"\nto = \"read\"\n"
    )
}

/// A harness over `dir` whose `recursive.toml` holds `config`; every question is answered yes.
async fn harness(dir: &Path, config: &str) -> Harness {
    std::fs::write(dir.join("recursive.toml"), config).unwrap();
    std::fs::write(dir.join("notes.txt"), "the notes\n").unwrap();
    Harness::build(HarnessOptions {
        config: Some(dir.join("recursive.toml")),
        provider: ProviderOptions { provider: Some("mock".into()), ..Default::default() },
        workspace: Some(dir.to_path_buf()),
        approver: recursive_tools::approver_for_flags(true, false),
        ..Default::default()
    })
    .await
    .unwrap()
}

async fn call(tool: &BlueprintTool, args: Value) -> Result<String, ToolError> {
    tool.call(args, &ToolContext::detached()).await
}

fn saved(dir: &Path) -> std::path::PathBuf {
    dir.join(".recursive/blueprints/notes.toml")
}

#[tokio::test]
async fn limits_above_the_runs_are_refused_before_anything_is_saved_or_run() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path(), "").await;
    let tool = h.blueprint_tool(&h.tools());
    let greedy = notes("max_supersteps = 4000000000\nmax_visits = 4000000000");
    let err = call(&tool, json!({ "blueprint": greedy })).await.unwrap_err().to_string();
    assert!(err.contains("`max_supersteps = 4000000000` is above this run's limit of 100"), "{err}");
    assert!(err.contains("`max_visits = 4000000000` is above this run's limit of 25"), "{err}");
    assert!(err.contains(".recursive/blueprints/notes.toml:3:18"), "located at the value: {err}");
    assert!(!saved(dir.path()).exists(), "nothing saved");
    assert!(!dir.path().join(".recursive/graphs.db").exists(), "nothing ran");

    // A run with narrower limits caps them further; a blueprint within them runs with its own.
    let narrow = RecursionPolicy { max_supersteps: 5, max_visits: 2, max_depth: 8 };
    let tool = h.blueprint_tool(&h.tools()).with_limits(narrow);
    let err = call(&tool, json!({ "blueprint": notes("max_supersteps = 6") })).await.unwrap_err().to_string();
    assert!(err.contains("`max_supersteps = 6` is above this run's limit of 5"), "{err}");
    assert!(tool.spec().description.contains("`max_supersteps` at most 5"), "the model is told the limits");
    let out = call(&tool, json!({ "blueprint": notes("max_supersteps = 3") })).await.unwrap();
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["limits"], json!({ "max_supersteps": 3, "max_visits": 2, "max_depth": 8 }), "{out}");
    assert!(report["state"]["text"].as_str().unwrap().contains("the notes"), "it ran: {out}");
}

#[tokio::test]
async fn a_saved_name_is_replaced_only_when_the_model_asks() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path(), "").await;
    let tool = h.blueprint_tool(&h.tools()).check_only();
    let first = notes("max_visits = 1");
    let second = notes("max_visits = 2");
    let out = call(&tool, json!({ "blueprint": first })).await.unwrap();
    assert!(out.contains("saved as .recursive/blueprints/notes.toml"), "{out}");
    let out = call(&tool, json!({ "blueprint": first })).await.unwrap();
    assert!(out.contains("already saved"), "the same blueprint again is no replacement: {out}");

    let err = call(&tool, json!({ "blueprint": second })).await.unwrap_err().to_string();
    assert!(err.contains("already saved") && err.contains("\"replace\": true"), "the error says how: {err}");
    assert_eq!(std::fs::read_to_string(saved(dir.path())).unwrap(), first, "the first is kept");

    let out = call(&tool, json!({ "blueprint": second, "replace": true })).await.unwrap();
    assert!(out.contains("replaced"), "{out}");
    assert_eq!(std::fs::read_to_string(saved(dir.path())).unwrap(), second);
    let err = call(&tool, json!({ "blueprint": first, "replace": "yes" })).await.unwrap_err();
    assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err}");
    assert!(tool.spec().description.contains("replace: true"), "the description says how");
}

#[tokio::test]
async fn a_link_planted_at_the_blueprints_path_is_refused_and_its_target_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let h = harness(d, "").await;
    std::fs::write(d.join("protected.txt"), "do not touch\n").unwrap();
    std::fs::create_dir_all(d.join(".recursive/blueprints")).unwrap();
    std::os::unix::fs::symlink("../../protected.txt", saved(d)).unwrap();
    let tool = h.blueprint_tool(&h.tools()).check_only();
    for replace in [false, true] {
        let err = call(&tool, json!({ "blueprint": notes(""), "replace": replace })).await.unwrap_err();
        assert!(matches!(err, ToolError::Denied(_)), "replace {replace}: {err}");
        assert!(err.to_string().contains("symbolic link"), "{err}");
    }
    assert_eq!(std::fs::read_to_string(d.join("protected.txt")).unwrap(), "do not touch\n");
    assert!(std::fs::symlink_metadata(saved(d)).unwrap().file_type().is_symlink(), "the link is left as it was");

    // A link in place of the directory is not followed either.
    std::fs::remove_dir_all(d.join(".recursive/blueprints")).unwrap();
    std::fs::create_dir(d.join("elsewhere")).unwrap();
    std::os::unix::fs::symlink("../elsewhere", d.join(".recursive/blueprints")).unwrap();
    let err = call(&tool, json!({ "blueprint": notes("") })).await.unwrap_err();
    assert!(err.to_string().contains(".recursive/blueprints"), "{err}");
    assert_eq!(std::fs::read_dir(d.join("elsewhere")).unwrap().count(), 0, "nothing written through it");
}

#[tokio::test]
async fn the_save_path_meets_the_path_rules_of_write_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let deny_writes = "[permissions]\n[[permissions.rules]]\ntool = \"write_file\"\n\
                       path = \".recursive/blueprints/**\"\naction = \"deny\"\n";
    let h = harness(d, deny_writes).await;
    let tool = h.blueprint_tool(&h.tools()).check_only();
    let err = call(&tool, json!({ "blueprint": notes("") })).await.unwrap_err();
    assert!(matches!(err, ToolError::Denied(_)), "{err}");
    assert!(err.to_string().contains(".recursive/blueprints/notes.toml"), "{err}");
    assert!(!saved(d).exists(), "nothing saved");

    // A rule that asks asks (here answered yes) instead of refusing.
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path(), &deny_writes.replace("\"deny\"", "\"ask\"")).await;
    let tool = h.blueprint_tool(&h.tools()).check_only();
    call(&tool, json!({ "blueprint": notes("") })).await.unwrap();
    assert!(saved(dir.path()).is_file());
}

#[tokio::test]
async fn the_permission_gate_sees_the_file_a_blueprint_call_saves() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let deny_secret = "[permissions]\n[[permissions.rules]]\ntool = \"*\"\npath = \"secret.env\"\naction = \"deny\"\n";
    let h = harness(d, deny_secret).await;
    std::fs::write(d.join("secret.env"), "KEY=1\n").unwrap();
    std::fs::create_dir_all(d.join(".recursive/blueprints")).unwrap();
    std::os::unix::fs::symlink("../../secret.env", saved(d)).unwrap();
    let mut tools = ToolRegistry::new();
    tools.register(std::sync::Arc::new(h.blueprint_tool(&h.tools()).check_only()));
    let invoker = h.setup.invoker(tools);
    let call = ToolCall { id: "1".into(), name: "blueprint".into(), arguments: json!({ "blueprint": notes("") }) };
    let out = invoker.invoke(call, &RunScope::detached("test"), 1, None).await;
    assert!(out.denied && out.output.contains("secret.env"), "the gate denies the call: {out:?}");
    assert_eq!(std::fs::read_to_string(d.join("secret.env")).unwrap(), "KEY=1\n");
}
