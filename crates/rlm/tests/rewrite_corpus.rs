#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The snippet rewrite over the held-in corpus (`corpus/*.py`, Python written the way models
//! write it): each snippet's rewrite, with the primitives as host functions, is the one kept in
//! `corpus/rewritten/`. Those were made by the hand-written lexer the rewrite had before it
//! read ruff's tokens, so this pins that both give the same code. `RLM_BLESS=1` writes them
//! anew after a deliberate change.

use std::path::Path;

use recursive_rlm::PRIMITIVES;
use recursive_rlm::rewrite::rewrite_awaited_calls;

fn is_host(name: &str) -> bool {
    PRIMITIVES.contains(&name)
}

#[test]
fn every_corpus_snippet_rewrites_as_kept() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let kept = dir.join("rewritten");
    let bless = std::env::var_os("RLM_BLESS").is_some();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "py"))
        .collect();
    files.sort();
    assert!(files.len() >= 12, "the corpus lost files: {files:?}");
    let mut failures = Vec::new();
    let mut changed = 0;
    for file in &files {
        let code = std::fs::read_to_string(file).unwrap();
        let got = rewrite_awaited_calls(&code, &is_host);
        changed += usize::from(got != code);
        let want_path = kept.join(file.file_name().unwrap());
        if bless {
            std::fs::create_dir_all(&kept).unwrap();
            std::fs::write(&want_path, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&want_path).unwrap_or_default();
        if got != want {
            failures.push(format!("{}:\n--- kept\n{want}\n--- now\n{got}", file.display()));
        }
    }
    assert!(failures.is_empty(), "{} of {} rewrites differ:\n{}", failures.len(), files.len(), failures.join("\n"));
    // The corpus exercises the rewrite: awaited calls, gathers, stood-in modules, methods as values.
    assert!(changed >= 4, "only {changed} snippets were rewritten");
}

#[test]
fn a_snippet_cut_anywhere_is_rewritten() {
    // A snippet cut after any line (as a model's half-written block is) does not parse, and is
    // still rewritten as far as ruff's error recovery reads it, without a panic.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "py") {
            continue;
        }
        let code = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = code.lines().collect();
        for cut in 0..=lines.len() {
            rewrite_awaited_calls(&lines[..cut].join("\n"), &is_host);
        }
    }
}
