#![allow(clippy::unwrap_used, clippy::expect_used)]
//! What of the home directory a confined `run_shell` command sees, attacked as a model would:
//! with toolchains' bin directories under the home on `PATH`, their programs run, but the files
//! beside them (`~/.cargo/credentials.toml`, other sessions' transcripts under `~/.local/share`)
//! cannot be read. This binary holds its own `HOME` and `PATH` (a fake home), so it has one test.
//! `sandbox = "required"`: a machine without bubblewrap fails it instead of passing unconfined.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use recursive_core::confine::SandboxMode;
use recursive_core::{ToolContext, typed};
use recursive_tools::config::ShellConfig;
use recursive_tools::sandbox::Workspace;
use recursive_tools::shell::RunShell;
use serde_json::json;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn program(path: &Path, says: &str) {
    write(path, &format!("#!/bin/sh\necho '{says}'\n"));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A home with cargo (`tool`, credentials), rustup, `~/.local/bin` (`x`, and `pytool`, a symlink
/// into a pipx virtualenv) and another session's transcript.
fn fake_home(home: &Path) {
    program(&home.join(".cargo/bin/tool"), "tool ran");
    write(&home.join(".cargo/credentials.toml"), "[registry]\ntoken = \"cargo-secret\"\n");
    write(&home.join(".cargo/registry/index/marker"), "registry index");
    write(&home.join(".rustup/settings.toml"), "rustup settings");
    program(&home.join(".local/bin/x"), "x ran");
    write(&home.join(".local/share/recursive/sessions/s.jsonl"), "another session's transcript");
    let venv = home.join(".local/share/pipx/venvs/pytool");
    write(&venv.join("pyvenv.cfg"), "home = /usr/bin\n");
    program(&venv.join("bin/pytool"), "pytool ran");
    symlink("../share/pipx/venvs/pytool/bin/pytool", home.join(".local/bin/pytool")).unwrap();
    write(&home.join("notes.txt"), "private notes");
}

#[tokio::test]
async fn only_what_programs_on_path_need_of_the_home_directory_is_visible() {
    let tmp = tempfile::tempdir().unwrap();
    let home = std::fs::canonicalize(tmp.path()).unwrap().join("home");
    fake_home(&home);
    let path =
        std::env::join_paths([home.join(".cargo/bin"), home.join(".local/bin"), "/usr/bin".into(), "/bin".into()])
            .unwrap();
    recursive_core::env::hold(BTreeMap::from([
        (OsString::from("HOME"), home.clone().into_os_string()),
        (OsString::from("PATH"), path),
        (OsString::from("CARGO_HOME"), home.join(".cargo").into_os_string()),
        (OsString::from("RUSTUP_HOME"), home.join(".rustup").into_os_string()),
    ]));

    let ws = tempfile::tempdir().unwrap();
    let config = ShellConfig { sandbox: SandboxMode::Required, ..Default::default() };
    let shell = typed(RunShell::new(Workspace::new(ws.path()).unwrap(), config));
    let command = "cat \"$HOME/.cargo/credentials.toml\"; cat \"$HOME/.local/share/recursive/sessions/s.jsonl\"; \
                   cat \"$HOME/notes.txt\"; tool; x; pytool; cat \"$HOME/.rustup/settings.toml\"; echo; \
                   cat \"$HOME/.cargo/registry/index/marker\"";
    let out = shell.call(json!({"command": command}), &ToolContext::detached()).await.unwrap();

    assert!(!out.contains("cargo-secret"), "~/.cargo/credentials.toml was read: {out}");
    assert!(!out.contains("another session"), "another session's transcript was read: {out}");
    assert!(!out.contains("private notes"), "{out}");
    for ran in ["tool ran", "x ran", "pytool ran", "rustup settings", "registry index"] {
        assert!(out.contains(ran), "{ran}: {out}");
    }
}
