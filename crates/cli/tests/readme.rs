//! The README's "Set-up: two commands", tested as a new user meets them: the ```sh blocks of
//! that section are read from README.md of a fresh `git clone` of this repository (its
//! committed HEAD, in a temporary directory). The first two are the set-up commands; the
//! main-job command (the first) is run there verbatim with `sh` and must exit 0 and print the
//! documented answer on stdout. The further example after them is run verbatim too.
//!
//! - The test command (`./scripts/test`) is not run — it runs this test, so it would recurse.
//!   The test checks that it exists in the clone, is executable, and is what `.ci/run` runs.
//! - Nothing reads `../shared` when the main job builds or runs (only the conformance tests
//!   read it), so the clone gets no `shared` sibling: the command must work without one.
//! - The command runs with `CARGO_TARGET_DIR` set to a directory of its own inside this
//!   workspace's target directory (`target/readme`), kept between runs: a later run compiles only
//!   what changed. Not the workspace's own `target/debug`: the clone's crates get the same
//!   file names as the workspace's (cargo hashes their workspace-relative paths), so building
//!   them there would replace artifacts other tests of this run link against.
//! - `git` is required: without it the test fails, it does not skip.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

/// The answer the README promises on stdout.
const ANSWER: &str = "The east server room access code is 4471-KESTREL, issued by Duty Officer M. Okafor.";

/// The heading of the section under test.
const SECTION: &str = "## Set-up: two commands";

fn git(args: &[&str], dir: &Path) -> Output {
    let out = Command::new("git").args(args).current_dir(dir).output().unwrap_or_else(|e| {
        panic!("this test needs `git` on PATH to clone the repository (running `git {}`): {e}", args.join(" "))
    });
    assert!(
        out.status.success(),
        "git {} failed in {}: {}",
        args.join(" "),
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout_text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The repository this test belongs to (its working tree root).
fn repository() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    PathBuf::from(stdout_text(&git(&["rev-parse", "--show-toplevel"], manifest)))
}

/// The target directory of this build (`CARGO_TARGET_TMPDIR` is its `tmp` subdirectory).
fn workspace_target_dir() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or_else(|| panic!("{} has no parent", tmp.display())).to_path_buf()
}

/// A fresh clone of the repository's HEAD in a temporary directory (kept alive by the guard).
fn fresh_clone() -> (tempfile::TempDir, PathBuf) {
    let source = repository();
    let status = stdout_text(&git(&["status", "--porcelain", "--untracked-files=no"], &source));
    if !status.is_empty() {
        eprintln!("note: the working tree has uncommitted changes; the clone tests the committed HEAD:\n{status}");
    }
    std::fs::create_dir_all(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = tempfile::Builder::new().prefix("readme-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let clone = dir.path().join("recursive");
    git(&["clone", "--quiet", &source.display().to_string(), &clone.display().to_string()], dir.path());
    let head = |dir: &Path| stdout_text(&git(&["rev-parse", "HEAD"], dir));
    assert_eq!(head(&clone), head(&source), "the clone is not at the repository's HEAD");
    assert!(!dir.path().join("shared").exists());
    (dir, clone)
}

/// The ```sh blocks of the README section under `heading`, in order.
fn sh_blocks(readme: &str, heading: &str) -> Vec<String> {
    let start =
        readme.find(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("README.md has no `{heading}` section"));
    let body = &readme[start + heading.len() + 2..];
    let section = body.find("\n## ").map_or(body, |end| &body[..end]);
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in section.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(Vec::new()),
            (Some(lines), "```") => {
                blocks.push(lines.join("\n"));
                current = None;
            }
            (Some(lines), text) => lines.push(text),
            (None, _) => {}
        }
    }
    assert!(current.is_none(), "an unclosed ```sh block in `{heading}`");
    blocks
}

/// The set-up section's commands: the two set-up commands `(main job, tests)`, which open the
/// section, and the further examples after them.
fn setup_commands(readme: &str) -> (String, String, Vec<String>) {
    let mut blocks = sh_blocks(readme, SECTION).into_iter();
    let (Some(main), Some(tests)) = (blocks.next(), blocks.next()) else {
        panic!("`{SECTION}` should open with two ```sh blocks (the main job, then the tests)")
    };
    assert!(
        main.starts_with("./scripts/cargo run --bin recursive -- "),
        "the first command is not the main job: {main}"
    );
    (main, tests, blocks.collect())
}

/// Runs a README command verbatim with `sh` in `dir`, building into the workspace's target
/// directory and with no provider configured from the environment.
fn run_verbatim(command: &str, dir: &Path) -> Output {
    let started = Instant::now();
    let out = Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", workspace_target_dir().join("readme"))
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OLLAMA_HOST")
        .env_remove("CARGO_MANIFEST_DIR")
        // As a new user: the default toolchain, not the one this test was built with.
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .expect("cannot run sh");
    eprintln!("`{command}` took {:.0?}", started.elapsed());
    out
}

/// The last lines of a command's stderr, for failure messages.
fn stderr_tail(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

#[test]
fn setup_sections_sh_blocks_are_found_in_order() {
    let readme = "# X\n\n## Set-up: two commands\n\ntext\n\n```sh\ncargo run -- a \\\n  --b\n```\n\n```\nnot sh\n```\n\n\
                  ```sh\n./scripts/test\n```\n\n## Next\n\n```sh\nnot this\n```\n";
    assert_eq!(sh_blocks(readme, SECTION), vec!["cargo run -- a \\\n  --b".to_string(), "./scripts/test".to_string()]);
}

#[test]
fn readme_main_job_runs_verbatim_in_a_fresh_clone_and_prints_the_answer() {
    let (_guard, clone) = fresh_clone();
    let readme = std::fs::read_to_string(clone.join("README.md")).unwrap();
    let (main_job, _, further) = setup_commands(&readme);
    assert!(readme.contains(&format!("```\n{ANSWER}\n```")), "README.md no longer shows the answer {ANSWER:?}");

    let out = run_verbatim(&main_job, &clone);
    assert!(out.status.success(), "`{main_job}` exited with {}:\n{}", out.status, stderr_tail(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), ANSWER, "stderr:\n{}", stderr_tail(&out));

    // The further example of the section (the multi-step tool run) reuses the build.
    assert_eq!(further.len(), 1, "{further:#?}");
    let out = run_verbatim(&further[0], &clone);
    assert!(out.status.success(), "`{}` exited with {}:\n{}", further[0], out.status, stderr_tail(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("| D-900 | diesel filter cartridges |"), "{stdout}");
}

#[test]
fn readme_test_command_is_the_executable_script_ci_runs() {
    let (_guard, clone) = fresh_clone();
    let readme = std::fs::read_to_string(clone.join("README.md")).unwrap();
    let (_, tests, _) = setup_commands(&readme);
    assert_eq!(tests, "./scripts/test", "the test block should be the script alone");

    let executable = |path: &Path| {
        let meta = std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        meta.is_file() && meta.permissions().mode() & 0o111 == 0o111
    };
    assert!(executable(&clone.join("scripts/test")), "scripts/test is not an executable file");
    let ci = clone.join(".ci/run");
    assert!(executable(&ci), ".ci/run is not an executable file");

    let ci_text = std::fs::read_to_string(&ci).unwrap();
    let commands: Vec<&str> = ci_text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    let last = commands.last().copied().unwrap_or_default();
    assert_eq!(last.strip_prefix("exec ").unwrap_or(last), tests, ".ci/run does not end by running {tests}");
    assert!(
        commands.contains(&"cd \"$(dirname \"$0\")/..\""),
        ".ci/run does not run from the repository root: {commands:?}"
    );
}
