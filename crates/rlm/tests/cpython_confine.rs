#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The confined CPython worker with an interpreter under the home directory, attacked as a
//! model would: `--python ~/bin/python3` (a link into a virtualenv in the home directory) and
//! that virtualenv's own interpreter both start, and a snippet cannot read a file of the home
//! directory. This binary holds its own `HOME` (a fake one).
//!
//! The interpreter comes from `RLM_TEST_PYTHON` (a virtualenv, which `./scripts/test` makes);
//! without it the test fails unless `RECURSIVE_ALLOW_SKIP=1`. `sandbox = "required"`: a
//! machine without bubblewrap fails it instead of passing unconfined.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use recursive_core::confine::SandboxMode;
use recursive_rlm::cpython::CPythonConfig;
use recursive_rlm::repl::{Backend, Repl};
use recursive_rlm::{NoHost, SandboxLimits, SnippetOutcome};
use tokio_util::sync::CancellationToken;

async fn start(python: &Path) -> Box<dyn Repl> {
    let backend = Backend::CPython(CPythonConfig { python: python.into(), sandbox: SandboxMode::Required });
    let limits = SandboxLimits { timeout: Duration::from_secs(30), ..Default::default() };
    recursive_rlm::repl::start(&backend, limits, Vec::new(), Vec::new(), "").await.unwrap()
}

async fn run(repl: &dyn Repl, code: &str) -> SnippetOutcome {
    repl.execute(code, Arc::new(NoHost), &CancellationToken::new()).await
}

/// Starts `python`, checks that it runs and that a snippet cannot read `secret`; its `sys.prefix`.
async fn read_attempt(python: &Path, secret: &Path) -> String {
    let repl = start(python).await;
    let out = run(repl.as_ref(), "import sys\nprint(sys.prefix)").await;
    assert!(out.error.is_none(), "the interpreter does not run: {out:?}");
    let attack = run(repl.as_ref(), &format!("print(open({:?}).read())", secret.display().to_string())).await;
    assert!(!attack.stdout.contains("home secret"), "{} read the home directory: {attack:?}", python.display());
    let error = attack.error.map(|e| e.message).unwrap_or_default();
    assert!(error.contains("FileNotFoundError"), "{error}");
    out.stdout.trim().to_string()
}

#[tokio::test]
async fn an_interpreter_under_home_starts_without_exposing_the_home_directory() {
    let Some(venv_python) = recursive_testkit::require_env("RLM_TEST_PYTHON") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let home = std::fs::canonicalize(tmp.path()).unwrap().join("home");
    std::fs::create_dir_all(home.join("bin")).unwrap();
    let secret = home.join("secret.txt");
    std::fs::write(&secret, "home secret").unwrap();
    let made = std::process::Command::new(&venv_python)
        .args(["-m", "venv", "--without-pip"])
        .arg(home.join("venv"))
        .status()
        .unwrap();
    assert!(made.success(), "cannot make a virtualenv with {venv_python}");
    std::os::unix::fs::symlink(home.join("venv/bin/python3"), home.join("bin/python3")).unwrap();
    recursive_core::env::hold(BTreeMap::from([(OsString::from("HOME"), home.clone().into_os_string())]));

    read_attempt(&home.join("bin/python3"), &secret).await;
    let prefix = read_attempt(&home.join("venv/bin/python3"), &secret).await;
    assert_eq!(prefix, home.join("venv").display().to_string(), "the virtualenv is the one running");
}
