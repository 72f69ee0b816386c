//! Conformance of `apply_patch` with the shared V4A scenarios: each scenario's `patch.txt` is applied to a copy of
//! its `input/` tree (or an empty directory), and the final tree must equal `expected/` byte for byte, files and
//! directories alike. The result of applying the patch is ignored; only the tree counts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use recursive_tools::apply_patch::apply_patch_in_dir;

/// One entry of a directory tree, keyed by its path relative to the root.
#[derive(Debug, PartialEq, Eq)]
enum Entry {
    Dir,
    File(Vec<u8>),
}

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/apply_patch")
}

fn copy_tree(from: &Path, to: &Path) {
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            fs::create_dir_all(&target).unwrap();
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn collect_tree(root: &Path, dir: &Path, out: &mut BTreeMap<String, Entry>) {
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let rel = path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
        if entry.file_type().unwrap().is_dir() {
            out.insert(rel, Entry::Dir);
            collect_tree(root, &path, out);
        } else {
            out.insert(rel, Entry::File(fs::read(&path).unwrap()));
        }
    }
}

fn tree(root: &Path) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    if root.is_dir() {
        collect_tree(root, root, &mut out);
    }
    out
}

fn describe(entry: &Entry) -> String {
    match entry {
        Entry::Dir => "a directory".to_string(),
        Entry::File(bytes) => format!("a file {:?}", String::from_utf8_lossy(bytes)),
    }
}

/// Every difference between the actual and the expected tree, one line each.
fn differences(actual: &BTreeMap<String, Entry>, expected: &BTreeMap<String, Entry>) -> Vec<String> {
    let mut diffs = Vec::new();
    for (path, want) in expected {
        match actual.get(path) {
            None => diffs.push(format!("missing {path} (expected {})", describe(want))),
            Some(got) if got != want => {
                diffs.push(format!("{path}: expected {}, found {}", describe(want), describe(got)));
            }
            Some(_) => {}
        }
    }
    for (path, got) in actual {
        if !expected.contains_key(path) {
            diffs.push(format!("unexpected {path} ({})", describe(got)));
        }
    }
    diffs
}

#[test]
fn shared_apply_patch_scenarios_produce_the_expected_trees() {
    let root = scenarios_dir();
    let mut scenarios: Vec<PathBuf> = fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", root.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    scenarios.sort();
    assert!(!scenarios.is_empty(), "no scenarios in {}", root.display());

    let mut failures = Vec::new();
    for scenario in &scenarios {
        let name = scenario.file_name().unwrap().to_string_lossy().into_owned();
        let work = tempfile::tempdir().unwrap();
        let input = scenario.join("input");
        if input.is_dir() {
            copy_tree(&input, work.path());
        }
        let patch = fs::read_to_string(scenario.join("patch.txt")).unwrap();
        let _ignored = apply_patch_in_dir(&patch, work.path());

        let diffs = differences(&tree(work.path()), &tree(&scenario.join("expected")));
        if !diffs.is_empty() {
            failures.push(format!("{name}:\n  {}", diffs.join("\n  ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} scenarios differ:\n{}",
        failures.len(),
        scenarios.len(),
        failures.join("\n")
    );
}
