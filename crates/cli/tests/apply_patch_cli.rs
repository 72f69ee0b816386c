//! Every V4A scenario in the shared conformance suite, applied through `recursive apply-patch`
//! (the patch as an argument and on stdin), must leave exactly the expected tree.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn suite() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/apply_patch")
}

/// Files (path → bytes) and directories (path → None) below `root`.
fn snapshot(root: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    if !root.exists() {
        return out;
    }
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                out.insert(rel, None);
                stack.push(path);
            } else {
                out.insert(rel, Some(std::fs::read(&path).unwrap()));
            }
        }
    }
    out
}

fn copy_tree(from: &Path, to: &Path) {
    for (rel, content) in snapshot(from) {
        let dest = to.join(&rel);
        match content {
            None => std::fs::create_dir_all(&dest).unwrap(),
            Some(bytes) => {
                std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
                std::fs::write(dest, bytes).unwrap();
            }
        }
    }
}

fn run_scenario(dir: &Path, via_stdin: bool) -> Result<(), String> {
    let work = tempfile::tempdir().unwrap();
    copy_tree(&dir.join("input"), work.path());
    let patch = std::fs::read_to_string(dir.join("patch.txt")).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_recursive"));
    cmd.arg("apply-patch").current_dir(work.path()).stdout(Stdio::piped()).stderr(Stdio::piped());
    if via_stdin {
        cmd.stdin(Stdio::piped());
    } else {
        cmd.arg(&patch);
    }
    let mut child = cmd.spawn().unwrap();
    if via_stdin {
        child.stdin.take().unwrap().write_all(patch.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let code = out.status.code();
    assert!(code == Some(0) || code == Some(1), "exit status is 0 or 1, got {code:?}");
    if code == Some(1) {
        assert!(!out.stderr.is_empty(), "a failure explains itself on stderr");
    }
    let expected = snapshot(&dir.join("expected"));
    let actual = snapshot(work.path());
    if expected == actual {
        Ok(())
    } else {
        let keys: std::collections::BTreeSet<_> = expected.keys().chain(actual.keys()).collect();
        let diffs: Vec<String> = keys
            .into_iter()
            .filter(|k| expected.get(*k) != actual.get(*k))
            .map(|k| format!("{k}: expected {:?}, got {:?}", expected.get(k), actual.get(k)))
            .collect();
        Err(format!("{}: {}", dir.display(), diffs.join("; ")))
    }
}

fn scenarios() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> =
        std::fs::read_dir(suite()).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    dirs.sort();
    assert!(!dirs.is_empty(), "the conformance suite is present");
    dirs
}

#[test]
fn every_conformance_scenario_passes_with_the_patch_as_argument() {
    let failures: Vec<String> = scenarios().iter().filter_map(|d| run_scenario(d, false).err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_conformance_scenario_passes_with_the_patch_on_stdin() {
    let failures: Vec<String> = scenarios().iter().filter_map(|d| run_scenario(d, true).err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn success_lists_changed_files_and_failure_exits_one() {
    let work = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_recursive");
    let ok = Command::new(bin)
        .args(["apply-patch", "*** Begin Patch\n*** Add File: a/b.txt\n+hi\n*** End Patch\n"])
        .current_dir(work.path())
        .output()
        .unwrap();
    assert_eq!(ok.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&ok.stdout).trim(), "A a/b.txt");
    let bad = Command::new(bin)
        .args(["apply-patch", "*** Begin Patch\n*** Delete File: missing.txt\n*** End Patch\n"])
        .current_dir(work.path())
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("missing.txt"));
    assert!(bad.stdout.is_empty());
}

fn apply_in(dir: &Path, patch: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_recursive")).arg("apply-patch").arg(patch).current_dir(dir).output().unwrap()
}

#[test]
fn paths_leading_out_of_the_directory_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let work = root.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(root.path().join("victim.txt"), "original\n").unwrap();
    std::os::unix::fs::symlink(root.path(), work.join("escape")).unwrap();
    let victim = root.path().join("victim.txt");
    for target in ["../x.txt".to_string(), victim.display().to_string(), "escape/y.txt".to_string()] {
        let out = apply_in(&work, &format!("*** Begin Patch\n*** Add File: {target}\n+pwned\n*** End Patch\n"));
        assert_eq!(out.status.code(), Some(1), "{target}: {}", String::from_utf8_lossy(&out.stderr));
        let out = apply_in(&work, &format!("*** Begin Patch\n*** Delete File: {target}\n*** End Patch\n"));
        assert_eq!(out.status.code(), Some(1), "{target}");
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "original\n");
    assert!(!root.path().join("x.txt").exists() && !root.path().join("y.txt").exists());
}

#[test]
fn a_partial_application_names_what_was_changed() {
    let work = tempfile::tempdir().unwrap();
    let patch = "*** Begin Patch\n*** Add File: a.txt\n+new\n*** Update File: missing.txt\n@@\n-x\n+y\n*** End Patch\n";
    let out = apply_in(work.path(), patch);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("missing.txt") && stderr.contains("applied before the failure") && stderr.contains("a.txt"),
        "{stderr}"
    );
    assert!(work.path().join("a.txt").exists());
}
