//! `recursive chat` in a real terminal (tmux) against a scripted OpenAI-compatible server on
//! 127.0.0.1: a pasted multi-line message is one request; Ctrl-C during a streamed answer
//! keeps the chat and the next request is well formed; an edit is approved from its diff,
//! undone with `/undo`, and a second one declined with a reason the model reads; a question
//! that appears while the person types is not answered by the typing, and "always" takes a
//! deliberate key and a confirmation; a spinner shows while a slow tool runs; a message typed
//! during a turn is queued and sent after it, or steered into it with Ctrl-S; `/help` typed
//! during a turn runs as a command. Screens are
//! compared with fixtures loosely (content, not layout).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::Env;
use common::tmux::{Tmux, assert_matches_fixture, command_line};
use recursive_testkit::{ModelServer, Reply, Script};
use serde_json::{Value, json};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat").join(name)
}

/// The chat in a terminal against `server`, its exit status printed when it ends.
fn start_chat(env: &Env, server: &ModelServer, args: &str) -> Tmux {
    let line = command_line(
        env.dir.path(),
        &format!("chat --provider openai --base-url {} --model gpt-4o-mini {args}", server.openai_url()),
    );
    let tmux = Tmux::start(env.dir.path(), &format!("OPENAI_API_KEY=sk-test {line}; echo exit-status=$?"));
    tmux.wait_for("Enter sends", 1);
    tmux
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().unwrap()
}

/// What the shown question says once its keys answer (typing has paused long enough).
const KEYS_ANSWER_NOW: &str = "(these keys answer now)";

/// What the status line says while a question waits for the person.
const WAITING_FOR_ANSWER: &str = "waiting for your answer";

/// Types `text` as someone typing does: each key well inside the pause after which a question's
/// keys answer. Sent in one go, so no gap depends on how fast the machine starts `tmux`.
fn type_text(tmux: &Tmux, text: &str) {
    tmux.keys(&["-l", text]);
}

/// A streamed answer of `words` words, one every `pause`.
fn slow_stream(words: usize, pause: Duration) -> Reply {
    let chunk = |delta: Value, finish: Value| {
        let body = json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "gpt-4o-mini",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {body}\n\n").into_bytes()
    };
    let mut pieces = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
    pieces.extend((0..words).map(|_| chunk(json!({"content": "word "}), Value::Null)));
    pieces.push(chunk(json!({}), json!("stop")));
    pieces.push(b"data: [DONE]\n\n".to_vec());
    Reply::raw(Script::sse_pieces(pieces).with_pause(pause))
}

#[test]
fn a_pasted_multi_line_message_is_one_request() {
    let env = Env::new();
    let rt = runtime();
    let server = rt.block_on(ModelServer::start_with([Reply::text("## Three lines\n\n- all in one message")]));
    let tmux = start_chat(&env, &server, "");
    tmux.paste("alpha\nbeta\ngamma");
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("all in one message", 1);
    assert_matches_fixture(&screen, &fixture("answer.txt"));
    assert_eq!(server.request_count(), 1, "{screen}");
    assert_eq!(server.request(0).last_user_text().unwrap(), "alpha\nbeta\ngamma");
    // Ctrl-C at an empty prompt twice leaves, with status 0.
    tmux.keys(&["C-c"]);
    tmux.wait_for("press Ctrl-C again to leave", 1);
    tmux.keys(&["C-c"]);
    tmux.wait_for("exit-status=0", 1);
}

#[test]
fn ctrl_c_during_a_streamed_answer_keeps_the_chat_and_the_next_request_is_well_formed() {
    let env = Env::new();
    let rt = runtime();
    let server = rt.block_on(ModelServer::start_with([
        slow_stream(200, Duration::from_millis(100)),
        Reply::text("second answer"),
    ]));
    let tmux = start_chat(&env, &server, "");
    tmux.keys(&["-l", "tell me a long story"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("word word word", 1);
    tmux.keys(&["C-c"]);
    tmux.wait_for("interrupted; the chat goes on", 1);
    tmux.keys(&["-l", "shorter please"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("second answer", 1);
    let second = server.request(1);
    second.check_pairing().unwrap();
    let messages = second.body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"], "{messages:?}");
    let cut = messages[2]["content"].as_str().unwrap();
    assert!(cut.starts_with("word word") && cut.ends_with("[interrupted by the user]"), "{cut}");
    assert_eq!(messages[3]["content"], "shorter please");
}

#[test]
fn an_edit_is_approved_from_its_diff_undone_and_another_declined_with_a_reason() {
    let env = Env::new();
    std::fs::write(env.path("a.txt"), "one\ntwo\nthree\n").unwrap();
    let rt = runtime();
    let edit = |content: &str| Reply::tool_call("write_file", json!({"path": "a.txt", "content": content}));
    let server = rt.block_on(ModelServer::start_with([
        edit("one\nTWO\nthree\n"),
        Reply::text("changed it"),
        edit("ONE\ntwo\nthree\n"),
        Reply::text("fine, left it"),
    ]));
    let tmux = start_chat(&env, &server, "");
    tmux.keys(&["-l", "please fix a.txt"]);
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("[r] no, with a reason", 1);
    assert_matches_fixture(&screen, &fixture("approval.txt"));
    tmux.wait_for(KEYS_ANSWER_NOW, 1);
    tmux.keys(&["y"]);
    tmux.wait_for("changed it", 1);
    assert_eq!(std::fs::read_to_string(env.path("a.txt")).unwrap(), "one\nTWO\nthree\n");

    tmux.keys(&["-l", "/undo"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("restored a.txt", 1);
    assert_eq!(std::fs::read_to_string(env.path("a.txt")).unwrap(), "one\ntwo\nthree\n");

    tmux.keys(&["-l", "now the first line"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("[r] no, with a reason", 1);
    // A draft typed under the question is put aside while the reason is typed, then comes back.
    tmux.keys(&["-l", "my draft"]);
    tmux.wait_for(KEYS_ANSWER_NOW, 1);
    tmux.keys(&["r"]);
    tmux.wait_for("why not?", 1);
    tmux.keys(&["-l", "leave the first line alone"]);
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("fine, left it", 1);
    assert!(screen.contains("│my draft"), "{screen}");
    assert_eq!(std::fs::read_to_string(env.path("a.txt")).unwrap(), "one\ntwo\nthree\n");
    let result = server.request(3).body["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(result["role"], "tool");
    assert!(result["content"].as_str().unwrap().contains("leave the first line alone"), "{result}");
    // The undo was told to the model.
    let undo_told = server.request(2).body.to_string();
    assert!(undo_told.contains("The user undid the file changes"), "{undo_told}");
}

#[test]
fn a_question_appearing_mid_sentence_is_not_answered_by_typing_and_always_is_deliberate() {
    let env = Env::new();
    let rt = runtime();
    let shell = |command: &str| Reply::tool_call("run_shell", json!({"command": command}));
    let server = rt.block_on(ModelServer::start_with([
        shell("echo one > one.txt").after(Duration::from_millis(500)),
        shell("echo two > two.txt"),
        Reply::text("both ran"),
        Reply::text("no rain today"),
    ]));
    let tmux = start_chat(&env, &server, "");
    tmux.line("check the weather");
    // The person starts the next sentence while the model works; the question arrives mid-way.
    type_text(&tmux, "so tell me, ");
    tmux.wait_for("allow `run_shell`", 1);
    // While the question waits, the status says so, not that the tool runs.
    let asked = tmux.wait_for(&format!(" {WAITING_FOR_ANSWER} (Esc interrupts)"), 1);
    assert!(!asked.contains("running run_shell"), "{asked}");
    let sentence = "so tell me, what is this? yes and no, really, any rain";
    type_text(&tmux, sentence.trim_start_matches("so tell me, "));
    // Every letter went to the message box; nothing was answered, nothing ran.
    let screen = tmux.wait_for(&format!("│{sentence}"), 1);
    assert!(!screen.contains("  → "), "{screen}");
    assert!(!env.path("one.txt").exists(), "{screen}");
    assert_eq!(server.request_count(), 1);

    // After a pause, `a` only asks to confirm "always"; Enter confirms.
    tmux.wait_for(KEYS_ANSWER_NOW, 1);
    tmux.keys(&["a"]);
    let screen = tmux.wait_for("Enter confirms", 1);
    assert!(!screen.contains("  → ") && !env.path("one.txt").exists(), "{screen}");
    tmux.keys(&["Enter"]);
    tmux.wait_for("→ always", 1);
    // The second command ran under "always", without a question.
    let screen = tmux.wait_for("both ran", 1);
    assert_eq!(screen.matches("allow `run_shell`").count(), 1, "{screen}");
    assert_eq!(std::fs::read_to_string(env.path("one.txt")).unwrap(), "one\n");
    assert_eq!(std::fs::read_to_string(env.path("two.txt")).unwrap(), "two\n");

    // The sentence waited, unsent, in the message box; Enter sends it now.
    assert_eq!(server.request_count(), 3);
    assert!(screen.contains(&format!("│{sentence}")), "{screen}");
    tmux.keys(&["Enter"]);
    tmux.wait_for("no rain today", 1);
    assert_eq!(server.request(3).last_user_text().unwrap(), sentence);
}

#[test]
fn a_spinner_shows_while_a_slow_tool_runs() {
    let env = Env::new();
    let rt = runtime();
    let server = rt.block_on(ModelServer::start_with([
        Reply::tool_call("run_shell", json!({"command": "sleep 3"})),
        Reply::text("slept well"),
    ]));
    let tmux = start_chat(&env, &server, "--yes");
    tmux.keys(&["-l", "take a nap"]);
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("running run_shell", 1);
    assert!(screen.contains("(Esc interrupts)"), "{screen}");
    let spinner = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
    assert!(spinner.iter().any(|s| screen.contains(&format!("{s} running run_shell"))), "{screen}");
    // The elapsed time moves while the tool runs.
    tmux.wait_for("running run_shell 1.", 1);
    tmux.wait_for("slept well", 1);
}

#[test]
fn esc_interrupts_a_running_tool_and_the_run_tree_shows_the_turn() {
    let env = Env::new();
    let rt = runtime();
    let server = rt.block_on(ModelServer::start_with([
        Reply::tool_call("run_shell", json!({"command": "sleep 300"})),
        Reply::text("after the interruption"),
    ]));
    let tmux = start_chat(&env, &server, "--yes");
    tmux.keys(&["C-t"]);
    tmux.keys(&["-l", "wait for ever"]);
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("running run_shell", 1);
    assert!(screen.contains("run tree (") && screen.contains("▸ chat-d0"), "{screen}");
    tmux.keys(&["Escape"]);
    // The command is stopped (waiting for it would take 300 s; the wait below gives up at 60).
    tmux.wait_for("interrupted; the chat goes on", 1);
    tmux.keys(&["-l", "go on"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("after the interruption", 1);
    let second = server.request(1);
    second.check_pairing().unwrap();
}

/// A shell call that runs until the test creates the file `go` in the workspace.
fn until_go() -> Reply {
    Reply::tool_call("run_shell", json!({"command": "while [ ! -f go ]; do sleep 0.1; done; echo went"}))
}

/// The user messages of a recorded request.
fn user_messages(request: &recursive_testkit::RecordedRequest) -> Vec<String> {
    let messages = request.body["messages"].as_array().unwrap();
    messages.iter().filter(|m| m["role"] == "user").map(|m| m["content"].as_str().unwrap().to_string()).collect()
}

#[test]
fn a_message_typed_during_a_turn_is_queued_editable_and_sent_as_the_next_turn() {
    let env = Env::new();
    let rt = runtime();
    let server =
        rt.block_on(ModelServer::start_with([until_go(), Reply::text("first done"), Reply::text("second answer")]));
    let tmux = start_chat(&env, &server, "--yes");
    tmux.line("first task");
    tmux.wait_for("running run_shell", 1);
    tmux.line("and then this");
    tmux.line("oops, not this");
    let screen = tmux.wait_for("⏳ oops, not this", 1);
    assert!(screen.contains("⏳ and then this") && screen.contains("queued — sent when the turn ends"), "{screen}");
    // ↑ on the empty box takes the last one back to edit; clearing the box removes it.
    tmux.keys(&["Up"]);
    tmux.wait_for("│oops, not this", 1);
    tmux.keys(&["C-u"]);
    common::wait_for("the box emptied", Duration::from_secs(60), || !tmux.screen().contains("oops"));
    let screen = tmux.wait_for("⏳ and then this", 1);
    assert_eq!(server.request_count(), 1, "{screen}");

    std::fs::write(env.path("go"), "").unwrap();
    let screen = tmux.wait_for("second answer", 1);
    assert!(!screen.contains("⏳"), "{screen}");
    assert_eq!(server.request_count(), 3, "{screen}");
    assert!(!server.request(1).body.to_string().contains("and then this"));
    let third = server.request(2);
    third.check_pairing().unwrap();
    assert_eq!(user_messages(&third), ["first task", "and then this"]);
}

#[test]
fn ctrl_s_steers_a_queued_message_into_the_running_turn() {
    let env = Env::new();
    let rt = runtime();
    let server = rt.block_on(ModelServer::start_with([until_go(), Reply::text("steered answer")]));
    let tmux = start_chat(&env, &server, "--yes");
    tmux.line("first task");
    tmux.wait_for("running run_shell", 1);
    tmux.line("use tabs please");
    tmux.wait_for("⏳ use tabs please", 1);
    tmux.keys(&["C-s"]);
    let screen = tmux.wait_for("↳ steering: use tabs please", 1);
    assert!(!screen.contains("⏳"), "{screen}");

    std::fs::write(env.path("go"), "").unwrap();
    let screen = tmux.wait_for("steered answer", 1);
    assert!(screen.contains("steered into the running turn"), "{screen}");
    assert_eq!(server.request_count(), 2, "{screen}");
    let second = server.request(1);
    second.check_pairing().unwrap();
    let roles: Vec<String> =
        second.body["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap().to_string()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
    assert_eq!(second.last_user_text().unwrap(), "use tabs please");
}

#[test]
fn a_command_typed_during_a_turn_runs_as_a_command_and_never_reaches_the_model() {
    let env = Env::new();
    let rt = runtime();
    let server = rt.block_on(ModelServer::start_with([until_go(), Reply::text("done waiting")]));
    let tmux = start_chat(&env, &server, "--yes");
    tmux.line("first task");
    tmux.wait_for("running run_shell", 1);
    tmux.line("/help");
    let screen = tmux.wait_for("summarise the conversation so far", 1);
    assert!(screen.contains("running run_shell") && !screen.contains("⏳"), "{screen}");

    std::fs::write(env.path("go"), "").unwrap();
    tmux.wait_for("done waiting", 1);
    // A command after the turn is a barrier: anything sent at the turn's end went before it.
    tmux.line("/cost");
    let screen = tmux.wait_for("1 turn(s)", 1);
    assert_eq!(server.request_count(), 2, "{screen}");
    for request in server.requests() {
        assert!(!request.body.to_string().contains("/help"), "{}", request.body);
    }
}

#[test]
fn a_message_typed_during_a_streamed_answer_is_sent_once_after_it() {
    let env = Env::new();
    let rt = runtime();
    let server =
        rt.block_on(ModelServer::start_with([slow_stream(100, Duration::from_millis(50)), Reply::text("next answer")]));
    let tmux = start_chat(&env, &server, "");
    tmux.line("tell me a story");
    tmux.wait_for("word word word", 1);
    tmux.line("then a shorter one");
    tmux.wait_for("⏳ then a shorter one", 1);
    tmux.wait_for("next answer", 1);
    assert_eq!(server.request_count(), 2);
    assert_eq!(user_messages(&server.request(0)), ["tell me a story"]);
    assert_eq!(user_messages(&server.request(1)), ["tell me a story", "then a shorter one"]);
}

#[test]
fn a_turn_that_fails_shows_its_error_once() {
    let env = Env::new();
    let rt = runtime();
    let server = rt.block_on(ModelServer::start_with([
        Reply::error(400, r#"{"error": {"message": "the model is on strike", "type": "invalid_request_error"}}"#),
        Reply::text("back to work"),
    ]));
    let tmux = start_chat(&env, &server, "");
    tmux.line("hello");
    let screen = tmux.wait_for("the model is on strike", 1);
    // The chat goes on; the error was shown once, not once from its event and again at the turn's end.
    tmux.line("again");
    let screen_after = tmux.wait_for("back to work", 1);
    assert_eq!(screen_after.matches("the model is on strike").count(), 1, "{screen}\n---\n{screen_after}");
}

#[test]
fn help_describes_the_terminal_ui_and_the_line_mode() {
    let env = Env::new();
    let top = env.cmd().arg("--help").output().unwrap();
    let top = String::from_utf8_lossy(&top.stdout);
    assert!(!top.contains("line by line"), "{top}");
    let chat = env.cmd().args(["chat", "--help"]).output().unwrap();
    let chat = String::from_utf8_lossy(&chat.stdout);
    assert!(chat.contains("full-screen terminal UI"), "{chat}");
    assert!(chat.contains("one message per line"), "{chat}");
    // The per-turn settings are offered, and say that they apply to each turn.
    for flag in ["--reasoning-effort", "--timeout", "--max-tokens", "--max-cost"] {
        assert!(chat.contains(flag), "{flag}: {chat}");
    }
    assert!(chat.contains("Token budget of each turn"), "{chat}");
}

#[test]
fn reasoning_effort_goes_with_every_request_and_the_token_budget_applies_to_each_turn() {
    let env = Env::new();
    let rt = runtime();
    let server = rt.block_on(ModelServer::start_with([
        Reply::tool_call("read_file", json!({"path": "notes.txt"})).with_usage(40, 30),
        Reply::text("a fresh budget").with_usage(10, 5),
    ]));
    let tmux = start_chat(&env, &server, "--yes --reasoning-effort low --max-tokens 50");
    tmux.line("read the notes");
    // 70 tokens spent of the turn's 50: the turn stops before its next model call.
    let screen = tmux.wait_for("the turn stopped: token_budget_exceeded", 1);
    assert_eq!(server.request_count(), 1, "{screen}");
    // The next turn has a budget of its own.
    tmux.line("and now?");
    tmux.wait_for("a fresh budget", 1);
    assert_eq!(server.request_count(), 2);
    for i in 0..2 {
        assert_eq!(server.request(i).body["reasoning_effort"], "low", "request {i}");
    }
}

#[test]
fn tabs_in_a_tools_output_are_shown_as_spaces() {
    let env = Env::new();
    let rt = runtime();
    let server = rt.block_on(ModelServer::start_with([
        Reply::tool_call("run_shell", json!({"command": "printf 'name\\tsize\\nalpha\\t12\\n'"})),
        Reply::text("listed"),
    ]));
    let tmux = start_chat(&env, &server, "--yes");
    tmux.line("list them");
    tmux.wait_for("listed", 1);
    tmux.keys(&["C-o"]);
    let unfolded = tmux.wait_for("│ alpha   12", 1);
    assert!(unfolded.contains("│ name    size"), "{unfolded}");
}

#[test]
fn shift_tab_cycles_the_modes_shown_in_the_status_line_and_a_chat_starts_with_its_prompt() {
    let env = Env::new();
    let rt = runtime();
    let server = rt.block_on(ModelServer::start_with([Reply::text("hello back")]));
    let tmux = start_chat(&env, &server, "--mode accept-edits \"hello there\"");
    tmux.wait_for("hello back", 1);
    assert_eq!(server.request(0).last_user_text().unwrap(), "hello there", "the prompt was the first message");
    tmux.wait_for("accept-edits (Shift-Tab)", 1);
    tmux.keys(&["BTab"]);
    tmux.wait_for("plan (Shift-Tab)", 1);
    tmux.keys(&["BTab"]);
    let screen = tmux.wait_for("auto (Shift-Tab)", 1);
    assert!(screen.contains("mode: auto"), "{screen}");
    tmux.keys(&["C-c"]);
    tmux.keys(&["C-c"]);
    tmux.wait_for("exit-status=0", 1);
}

#[test]
fn a_sub_agents_tool_call_shows_live_in_the_tree_pane_with_its_tokens_and_cost() {
    let env = Env::new();
    std::fs::write(env.path("helper.toml"), "kind = \"agent\"\ndescription = \"Helps.\"\ntools = [\"run_shell\"]\n")
        .unwrap();
    let rt = runtime();
    let server = rt.block_on(ModelServer::start_with([
        Reply::tool_call("helper", json!({"input": "wait for go"})).with_usage(1000, 200),
        until_go().with_usage(2000, 300),
        Reply::text("helped").with_usage(100, 10),
        Reply::text("all done"),
    ]));
    let tmux = start_chat(&env, &server, "--yes --agent helper=helper.toml");
    tmux.keys(&["C-t"]);
    tmux.line("get help");
    // While it works: the sub-agent, what it runs, its step, tokens, cost and time, its calls.
    let screen = tmux.wait_for("agent helper · running run_shell", 1);
    assert!(screen.contains("▸ chat-d0"), "{screen}");
    assert!(screen.contains("step 1 · 2.3k tok · $0.0005"), "{screen}");
    assert!(screen.contains("model gpt-4o-mini · 2.3k tok") && screen.contains("· run_shell({\"command\""), "{screen}");
    std::fs::write(env.path("go"), "").unwrap();
    tmux.wait_for("all done", 1);
    common::wait_for("the sub-agent done", Duration::from_secs(60), || tmux.screen().contains("✓ agent helper"));
    // A second Ctrl-T opens every call, also the root's.
    tmux.keys(&["C-t"]);
    let screen = tmux.wait_for("every call", 1);
    assert!(screen.contains("helper({\"input\":\"wait for go\"})"), "{screen}");
    assert!(screen.contains("model gpt-4o-mini · 110 tok"), "{screen}");
    // In the conversation, the sub-agent's calls are under the call that started it.
    assert!(screen.contains("↳ 3 call(s) inside, the last: helper-d1: model gpt-4o-mini · 110 tok"), "{screen}");
    tmux.keys(&["C-o"]);
    let screen = tmux.wait_for("↳ helper-d1: run_shell(", 1);
    assert!(screen.contains("↳ helper-d1: model gpt-4o-mini · 2300 tok · $0.0005"), "{screen}");
}

#[test]
fn diff_shows_the_sessions_edits_and_rewind_to_the_first_prompt_takes_back_the_second_turns_edits() {
    let env = Env::new();
    std::fs::write(env.path("a.txt"), "one\n").unwrap();
    let rt = runtime();
    let write = |path: &str, content: &str| Reply::tool_call("write_file", json!({"path": path, "content": content}));
    let server = rt.block_on(ModelServer::start_with([
        Reply::text("nothing changed yet"),
        write("a.txt", "two\n"),
        Reply::text("second done"),
        write("b.txt", "created\n"),
        Reply::text("third done"),
        Reply::text("a fresh start"),
    ]));
    let tmux = start_chat(&env, &server, "--yes");
    tmux.line("first prompt");
    tmux.wait_for("nothing changed yet", 1);
    tmux.line("second prompt");
    tmux.wait_for("second done", 1);
    tmux.line("third prompt");
    tmux.wait_for("third done", 1);
    tmux.line("/diff");
    let screen = tmux.wait_for("*** created b.txt", 1);
    assert!(screen.contains("*** changed a.txt") && screen.contains("-one") && screen.contains("+two"), "{screen}");
    assert!(screen.contains("+created"), "{screen}");
    // Esc Esc at the empty box lists the prompts, and leaves `/rewind ` in the box.
    tmux.keys(&["Escape"]);
    tmux.wait_for("Esc again: list the prompts to rewind to", 1);
    tmux.keys(&["Escape"]);
    let screen = tmux.wait_for("3. third prompt", 1);
    assert!(screen.contains("1. first prompt") && screen.contains("│/rewind"), "{screen}");
    tmux.keys(&["-l", "2"]);
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("rewound to before prompt 2", 1);
    assert!(screen.contains("restored a.txt") && screen.contains("removed b.txt"), "{screen}");
    assert_eq!(std::fs::read_to_string(env.path("a.txt")).unwrap(), "one\n");
    assert!(!env.path("b.txt").exists());
    // The prompt waits in the box to be edited; the conversation on screen went back.
    assert!(screen.contains("│second prompt") && !screen.contains("third done"), "{screen}");
    tmux.keys(&["C-u"]);
    tmux.line("another second prompt");
    tmux.wait_for("a fresh start", 1);
    let last = server.request(server.request_count() - 1);
    last.check_pairing().unwrap();
    assert_eq!(user_messages(&last), ["first prompt", "another second prompt"]);
    tmux.line("/diff");
    tmux.wait_for("no file edits in this chat yet", 1);
}

#[test]
fn at_and_slash_open_completion_popups_and_ctrl_r_finds_an_earlier_prompt() {
    let env = Env::new();
    std::fs::create_dir_all(env.path("src")).unwrap();
    std::fs::write(env.path("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(env.path("notes.md"), "notes\n").unwrap();
    let rt = runtime();
    let server = rt.block_on(ModelServer::start_with([Reply::text("seen it"), Reply::text("seen again")]));
    let tmux = start_chat(&env, &server, "");
    // `@` offers the workspace's files; Tab takes the picked one.
    tmux.keys(&["-l", "look at @ma"]);
    // The box and its popup are drawn in one frame.
    let screen = tmux.wait_for("│look at @ma", 1);
    assert!(screen.contains("files · ↑↓ pick · Tab accepts"), "{screen}");
    assert!(screen.contains("src/main.rs") && !screen.contains("notes.md"), "{screen}");
    tmux.keys(&["Tab"]);
    tmux.wait_for("│look at @src/main.rs", 1);
    tmux.line("please");
    tmux.wait_for("seen it", 1);
    let first = server.request(0).last_user_text().unwrap();
    assert!(first.starts_with("look at @src/main.rs please") && first.contains("fn main() {}"), "{first}");
    // `/` offers the commands; Esc closes the popup, Enter on a command runs it.
    tmux.keys(&["-l", "/rew"]);
    let screen = tmux.wait_for("│/rew", 1);
    assert!(screen.contains("commands · ↑↓ pick"), "{screen}");
    assert!(screen.contains("/rewind [N]"), "{screen}");
    tmux.keys(&["Escape"]);
    common::wait_for("the popup closed", Duration::from_secs(60), || !tmux.screen().contains("commands · ↑↓"));
    tmux.keys(&["C-u"]);
    tmux.keys(&["-l", "/he"]);
    tmux.wait_for("│/he", 1);
    tmux.keys(&["Enter"]);
    tmux.wait_for("/exit            leave", 1);
    // Ctrl-R: the earlier prompts holding what the box holds; Enter puts one in the box.
    tmux.keys(&["-l", "look"]);
    tmux.wait_for("│look", 1);
    tmux.keys(&["C-r"]);
    tmux.wait_for("earlier prompts (Ctrl-R)", 1);
    tmux.keys(&["Enter"]);
    tmux.wait_for("│look at @src/main.rs please", 1);
    tmux.keys(&["Enter"]);
    tmux.wait_for("seen again", 1);
    assert_eq!(server.request(1).last_user_text().unwrap(), first);
    // A command typed in full is the pick, though a longer one starts with it (`/model`).
    tmux.keys(&["-l", "/mode"]);
    tmux.wait_for("│/mode", 1);
    tmux.keys(&["Enter"]);
    tmux.wait_for("mode: accept-edits", 1);
}

#[test]
fn ctrl_r_also_finds_the_prompts_of_the_workspaces_earlier_sessions() {
    let env = Env::new();
    let rt = runtime();
    let server = rt.block_on(ModelServer::start_with([Reply::text("answered before")]));
    let earlier = start_chat(&env, &server, "");
    earlier.line("an old question about parsers");
    earlier.wait_for("answered before", 1);
    earlier.line("/exit");
    earlier.wait_for("exit-status=0", 1);
    drop(earlier);
    let tmux = start_chat(&env, &server, "");
    tmux.keys(&["-l", "parsers"]);
    tmux.wait_for("│parsers", 1);
    tmux.keys(&["C-r"]);
    let screen = tmux.wait_for("earlier prompts (Ctrl-R)", 1);
    assert!(screen.contains("  an old question about parsers"), "{screen}");
    tmux.keys(&["Tab"]);
    tmux.wait_for("│an old question about parsers", 1);
}

#[test]
fn rewind_in_a_resumed_chat_reaches_the_prompts_sent_before_it_was_resumed() {
    let env = Env::new();
    std::fs::write(env.path("a.txt"), "original\n").unwrap();
    let rt = runtime();
    let server = rt.block_on(ModelServer::start_with([
        Reply::text("old answer"),
        Reply::tool_call("write_file", json!({"path": "a.txt", "content": "changed\n"})),
        Reply::text("new answer"),
        Reply::text("fresh answer"),
    ]));
    let earlier = start_chat(&env, &server, "");
    earlier.line("old prompt");
    earlier.wait_for("old answer", 1);
    earlier.line("/exit");
    earlier.wait_for("exit-status=0", 1);
    drop(earlier);
    let tmux = start_chat(&env, &server, "--continue --yes");
    tmux.line("new prompt");
    tmux.wait_for("new answer", 1);
    assert_eq!(std::fs::read_to_string(env.path("a.txt")).unwrap(), "changed\n");
    tmux.line("/rewind");
    let screen = tmux.wait_for("2. new prompt", 1);
    assert!(screen.contains("1. old prompt") && screen.contains("sent before it was resumed"), "{screen}");
    tmux.wait_for("│/rewind", 1);
    tmux.line("1");
    let screen = tmux.wait_for("rewound to before prompt 1", 1);
    assert!(screen.contains("restored a.txt") && screen.contains("made before this chat was resumed"), "{screen}");
    assert_eq!(std::fs::read_to_string(env.path("a.txt")).unwrap(), "original\n");
    tmux.keys(&["C-u"]);
    tmux.line("fresh");
    tmux.wait_for("fresh answer", 1);
    let last = server.request(server.request_count() - 1);
    last.check_pairing().unwrap();
    assert_eq!(user_messages(&last), ["fresh"]);
}

#[test]
fn plan_mode_refuses_a_write_saying_why_and_ends_with_the_plan() {
    let env = Env::new();
    let rt = runtime();
    let server = rt.block_on(ModelServer::start_with([
        Reply::tool_call("write_file", json!({"path": "a.txt", "content": "x"})),
        Reply::text("1. write a.txt"),
    ]));
    let tmux = start_chat(&env, &server, "--mode plan \"make a.txt\"");
    tmux.wait_for("nothing changes until the plan is approved", 1);
    tmux.wait_for("plan ready: /approve", 1);
    assert!(!env.path("a.txt").exists(), "nothing was written");
    tmux.keys(&["C-c"]);
    tmux.keys(&["C-c"]);
    tmux.wait_for("exit-status=0", 1);
}

#[test]
fn chat_resume_without_an_id_lists_the_workspaces_sessions_by_title_to_pick_from() {
    let env = Env::new();
    let rt = runtime();
    let server = rt.block_on(ModelServer::start_with([Reply::text("noted"), Reply::text("second answer")]));
    let first = start_chat(&env, &server, "\"remember the tides\"");
    first.wait_for("noted", 1);
    first.keys(&["C-c"]);
    first.keys(&["C-c"]);
    first.wait_for("exit-status=0", 1);
    drop(first);
    let line = command_line(
        env.dir.path(),
        &format!("chat --resume --provider openai --base-url {} --model gpt-4o-mini", server.openai_url()),
    );
    let picker = Tmux::start(env.dir.path(), &format!("OPENAI_API_KEY=sk-test {line}; echo exit-status=$?"));
    let screen = picker.wait_for("session to continue [1-1]", 1);
    assert!(screen.contains("1. remember the tides") && screen.contains("1 turn(s)"), "{screen}");
    picker.line("1");
    picker.wait_for("Enter sends", 1);
    picker.line("and now?");
    picker.wait_for("second answer", 1);
    let said: Vec<Value> = server.request(1).body["messages"].as_array().unwrap().clone();
    assert!(said.iter().any(|m| m["content"] == "remember the tides"), "the picked session goes on: {said:?}");
}

#[test]
fn chat_continue_picks_up_the_workspaces_latest_session() {
    let env = Env::new();
    let rt = runtime();
    let server = rt.block_on(ModelServer::start_with([Reply::text("noted the tides"), Reply::text("still the tides")]));
    let first = start_chat(&env, &server, "\"remember the tides\"");
    first.wait_for("noted the tides", 1);
    first.keys(&["C-c"]);
    first.keys(&["C-c"]);
    first.wait_for("exit-status=0", 1);
    drop(first);
    let again = start_chat(&env, &server, "--continue");
    again.wait_for("(2 earlier message(s))", 1);
    again.line("what did I say?");
    again.wait_for("still the tides", 1);
    let said: Vec<Value> = server.request(1).body["messages"].as_array().unwrap().clone();
    assert!(said.iter().any(|m| m["content"] == "remember the tides"), "the latest session goes on: {said:?}");
}
