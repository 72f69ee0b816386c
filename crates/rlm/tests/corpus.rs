#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The snippet corpus: Python written the way models write it in RLM runs (chunk-and-batch,
//! regex, `Counter`, `json`, sorting, f-strings, `%` formatting, classes, dataclasses, async
//! gather, itertools, functools), each run as a whole RLM turn over the same 118 KB log
//! (`corpus/context.txt`). Every snippet ends with a `submit`, and its file's last line,
//! `# expect: <json>`, is the answer the snippet gives under CPython with the same sub-model
//! answers; the test asserts the sandbox gives the same one.

use std::path::Path;
use std::sync::Arc;

use recursive_core::{ChatRequest, ChatResponse, Message, MockProvider, MockReply, Role, RunScope, StopReason, Usage};
use recursive_rlm::{Inputs, Rlm, RlmConfig};
use serde_json::{Value, json};

/// The sub-model's answer to a prompt (the CPython reference harness used the same rules).
fn answer(prompt: &str) -> String {
    if prompt.contains("How many ERROR") {
        return prompt.matches("[ERROR]").count().to_string();
    }
    if prompt.contains("passphrase") {
        let found = prompt.split("passphrase is '").nth(1).and_then(|rest| rest.split('\'').next());
        return found.unwrap_or("NONE").to_string();
    }
    "ok".to_string()
}

fn sub_model() -> MockProvider {
    MockProvider::with_handler(|req: &ChatRequest| {
        let prompt =
            req.messages.iter().rev().find(|m| m.role == Role::User).map(|m| m.content.clone()).unwrap_or_default();
        Ok(ChatResponse {
            message: Message::assistant(answer(&prompt)),
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
            cost_usd: None,
            model: "sub".into(),
        })
    })
}

fn expected(code: &str) -> Value {
    let line = code.lines().rev().find(|l| l.starts_with("# expect: ")).expect("no `# expect:` line");
    serde_json::from_str(line.trim_start_matches("# expect: ")).expect("bad `# expect:` JSON")
}

async fn run_snippet(code: &str, context: &str) -> Result<Value, String> {
    recursive_rlm::set_default_worker(recursive_rlm::WorkerCommand {
        program: env!("CARGO_BIN_EXE_recursive-sandbox-worker").into(),
        args: vec![],
    });
    let primary = MockProvider::new([MockReply::text(format!("Let me look.\n```python\n{code}\n```"))]);
    let config = RlmConfig { max_iterations: 1, ..Default::default() };
    let rlm = Rlm::new(Arc::new(primary), Arc::new(sub_model()), config).unwrap();
    let r = rlm
        .run("Answer the question in the snippet.", Inputs::single("context", context), &RunScope::detached("corpus"))
        .await
        .map_err(|e| e.to_string())?;
    if r.extracted {
        let obs = r.trajectory.iter().flat_map(|i| &i.snippets).map(|s| s.observation.clone()).collect::<Vec<_>>();
        return Err(format!("the snippet did not submit; observations: {obs:#?}"));
    }
    Ok(r.output)
}

#[tokio::test(flavor = "multi_thread")]
async fn every_corpus_snippet_gives_the_cpython_answer() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let context = std::fs::read_to_string(dir.join("context.txt")).unwrap();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "py"))
        .collect();
    files.sort();
    assert!(files.len() >= 12, "the corpus lost files: {files:?}");
    let mut failures = Vec::new();
    for file in &files {
        let code = std::fs::read_to_string(file).unwrap();
        let want = json!({ "answer": expected(&code) });
        match run_snippet(&code, &context).await {
            Ok(got) if got == want => {}
            Ok(got) => failures.push(format!("{}: got {got}, want {want}", file.display())),
            Err(e) => failures.push(format!("{}: {e}", file.display())),
        }
    }
    assert!(failures.is_empty(), "{} of {} snippets failed:\n{}", failures.len(), files.len(), failures.join("\n"));
}
