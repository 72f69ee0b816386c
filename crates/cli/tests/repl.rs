//! `recursive repl` in a real pseudo-terminal (tmux): multi-line cells, a model call, a tool
//! call denied by a rule, an agent and a graph from the REPL, Ctrl-C in a long cell leaving the
//! session alive; and piped scripts with their exit statuses, events and a recorded session
//! replayed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

mod common;

use common::tmux::Tmux;
use common::{Env, events, s};

/// `recursive repl ARGS` with the test environment, as a shell command line.
/// What the screen shows once a cell's `read_file` call returned: the cell is running.
const CELL_RUNNING: &str = "✓ read_file";

fn repl_command(env: &Env, args: &str) -> String {
    common::tmux::command_line(env.dir.path(), &format!("repl {args}"))
}

const SHOUT: &str = r#"name = "shout"
[state]
input = "string"
output = "string"

[[nodes]]
name = "say"
model = "default"
prompt = "Repeat loudly: {input}"
output = "output"

[[edges]]
from = "START"
to = "say"
"#;

const DENY_WRITES: &str = r#"[[permissions.rules]]
tool = "write_file"
action = "deny"
"#;

#[test]
fn a_person_drives_cells_models_tools_agents_and_graphs_in_a_terminal() {
    let env = Env::new();
    std::fs::write(env.path("shout.toml"), SHOUT).unwrap();
    std::fs::write(env.path("strict.toml"), DENY_WRITES).unwrap();
    let script = env.script("s.json", json!(["model answer one", "agent answer two", "GRAPH SAYS HI"]));
    let args = format!("--provider mock --mock-script {} --config strict.toml -i notes=notes.txt", s(&script));
    let tmux = Tmux::start(env.dir.path(), &repl_command(&env, &args));
    tmux.wait_for("Ctrl-D exits", 1);

    tmux.line("total = 0");
    tmux.line("for i in range(4):");
    tmux.line("    total += i * 10");
    tmux.line("");
    // The block has run when a fresh prompt follows the two lines typed at one.
    tmux.wait_for(">>> ", 3);
    tmux.line("print('total', total)");
    tmux.wait_for("total 60", 1);

    tmux.line("model_query('hi')['result']");
    tmux.wait_for("'model answer one'", 1);
    tmux.wait_for("session 15 tokens", 1);

    tmux.line("tool_call('write_file', path='x.txt', content='no')");
    tmux.wait_for("{'error': 'permission denied: rule #1", 1);
    assert!(!env.path("x.txt").exists(), "a denied write happened");

    tmux.line("tool_call('read_file', path='notes.txt')");
    tmux.wait_for("1\\thello world", 1);

    tmux.line("agent_query('do a thing')");
    tmux.wait_for("{'result': 'agent answer two'}", 1);

    tmux.line("graph_run('shout.toml', input='hi')['result']['output']");
    tmux.wait_for("'GRAPH SAYS HI'", 1);

    tmux.line("inputs['notes'].strip()");
    let screen = tmux.wait_for("'hello world'", 1);
    assert!(screen.contains("⇒ sub-agent agent: do a thing"), "{screen}");
    assert!(screen.contains("⇒ graph shout: hi"), "{screen}");
}

#[test]
fn ctrl_c_interrupts_a_long_cell_and_the_session_goes_on() {
    let env = Env::new();
    let tmux = Tmux::start(env.dir.path(), &repl_command(&env, "--provider mock"));
    tmux.wait_for("Ctrl-D exits", 1);
    // The cell reads a file and then loops: once the read shows, Ctrl-C reaches a running cell.
    tmux.line("if True:");
    tmux.line("    tool_call('read_file', path='notes.txt')");
    tmux.line("    while True:");
    tmux.line("        pass");
    tmux.line("");
    tmux.wait_for(CELL_RUNNING, 1);
    tmux.keys(&["C-c"]);
    tmux.wait_for("KeyboardInterrupt", 1);
    tmux.line("print('alive', 6 * 7)");
    tmux.wait_for("alive 42", 1);
    // Ctrl-C at the prompt clears the line, and the session still answers.
    tmux.keys(&["-l", "half a line"]);
    tmux.keys(&["C-c"]);
    tmux.wait_for("KeyboardInterrupt", 2);
    tmux.line("print('still', 1 + 1)");
    tmux.wait_for("still 2", 1);
}

#[test]
fn ctrl_c_in_a_cpython_cell_keeps_its_variables() {
    let Some(python) = recursive_testkit::require_env("RLM_TEST_PYTHON") else { return };
    let env = Env::new();
    let args = format!("--provider mock --sandbox cpython --python {python}");
    let tmux = Tmux::start(env.dir.path(), &repl_command(&env, &args));
    tmux.wait_for("Ctrl-D exits", 1);
    tmux.line("kept = 'yes'");
    tmux.line("import time");
    tmux.line("if True:");
    tmux.line("    tool_call('read_file', path='notes.txt')");
    tmux.line("    while True: time.sleep(0.01)");
    tmux.line("");
    tmux.wait_for(CELL_RUNNING, 1);
    tmux.keys(&["C-c"]);
    tmux.wait_for("KeyboardInterrupt", 1);
    tmux.line("print('kept', kept)");
    let screen = tmux.wait_for("kept yes", 1);
    assert!(!screen.contains("restarted"), "the worker was restarted:\n{screen}");
}

#[test]
fn a_piped_script_runs_non_interactively_with_its_exit_status() {
    let env = Env::new();
    let script = env.script("s.json", json!(["the model says hi"]));
    let code = "r = model_query('say hi')\nprint('got', r['result'])\nprint(tool_call('read_file', path='notes.txt'))\n1 + 1\n";
    let events_path = env.path("events.jsonl");
    let args = ["--provider", "mock", "--mock-script", s(&script), "--events", s(&events_path)];
    let out = run_piped(&env, &args, code);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("got the model says hi"), "{stdout}");
    assert!(stdout.contains("hello world"), "{stdout}");
    assert!(!stdout.lines().any(|l| l.trim() == "2"), "a script shows no expression values: {stdout}");
    let events = events(&events_path);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "run_finished", "{last}");
    assert_eq!(last["finish_reason"]["kind"], "completed");
    assert!(events.iter().any(|e| e["type"] == "tool_call"), "no tool call event");

    let failing =
        run_piped(&env, &["--provider", "mock"], "print('before')\nraise ValueError('boom')\nprint('after')\n");
    assert_eq!(failing.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&failing.stdout);
    assert!(stdout.contains("before") && !stdout.contains("after"), "{stdout}");
    assert!(String::from_utf8_lossy(&failing.stderr).contains("ValueError: boom"));
}

#[test]
fn a_syntax_error_in_a_piped_script_names_the_line_of_the_mistake() {
    let env = Env::new();
    // The bracket opened on line 3 is never closed; the parser gives up on line 5.
    let code = "x = 1\n\nprint(x\n\nz = 3\nw = 4\n";
    let out = run_piped(&env, &["--provider", "mock"], code);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(", line 3\n    print(x\n"), "{stderr}");
    assert!(stderr.contains("SyntaxError: '(' was never closed"), "{stderr}");
    assert!(!stderr.contains("line 5"), "{stderr}");
    // A mistake where the parser stopped is named there.
    let out = run_piped(&env, &["--provider", "mock"], "x = 1\ny = [1,\n 2 +* 3]\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(", line 3\n") && stderr.contains("SyntaxError"), "{stderr}");
}

#[test]
fn a_piped_script_past_the_token_budget_exits_with_the_budgets_status() {
    let env = Env::new();
    let script = env.script("s.json", json!(["one", "two", "three"]));
    let code = "for i in range(3):\n    print(model_query('q'))\n";
    let out = run_piped(&env, &["--provider", "mock", "--mock-script", s(&script), "--max-tokens", "20"], code);
    assert_eq!(out.status.code(), Some(11), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_recorded_session_replays_offline() {
    let env = Env::new();
    let script = env.script("s.json", json!(["recorded answer"]));
    let cassette = env.path("repl.cassette.jsonl");
    let code = "print(model_query('what?')['result'])\n";
    let recorded =
        run_piped(&env, &["--provider", "mock", "--mock-script", s(&script), "--record", s(&cassette)], code);
    assert_eq!(recorded.status.code(), Some(0), "{}", String::from_utf8_lossy(&recorded.stderr));
    let replayed = run_piped(&env, &["--provider", "replay", "--replay", s(&cassette)], code);
    assert_eq!(replayed.status.code(), Some(0), "{}", String::from_utf8_lossy(&replayed.stderr));
    assert_eq!(String::from_utf8_lossy(&replayed.stdout).trim(), "recorded answer");
}

fn run_piped(env: &Env, args: &[&str], code: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = env
        .cmd()
        .arg("repl")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(code.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn a_script_runs_an_rlm_file_by_its_path() {
    let env = Env::new();
    std::fs::write(env.path("reader.toml"), "kind = \"rlm\"\ndescription = \"Reads.\"\nmax_iterations = 2\n").unwrap();
    let script = env.script("s.json", json!(["```python\nsubmit(inputs['doc'].upper())\n```"]));
    let code = "r = rlm_query('shout it', inputs={'doc': 'quiet words'}, name='reader.toml')\nprint(r['result'])\n";
    let out = run_piped(&env, &["--provider", "mock", "--mock-script", s(&script)], code);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "QUIET WORDS");
    let wrong = run_piped(&env, &["--provider", "mock"], "agent_query('x', name='reader.toml')\n");
    assert_eq!(wrong.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("declares rlm, not agent"),
        "{}",
        String::from_utf8_lossy(&wrong.stderr)
    );
}
