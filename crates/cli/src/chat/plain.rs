//! The chat without a terminal (stdin or stdout piped): one line is one message, answers
//! stream to stdout, notes go to stderr, tool approvals follow `--yes`/`--no-ask` (asking on
//! a terminal when one is there), and Ctrl-C ends the chat with 8.

use super::tui::settle;
use super::{Chat, HELP, Input, NO_CHANGES, parse};
use crate::commands::chat::TurnSettings;

/// Reads prompt lines on a thread of its own, one line per request, so a blocked read neither
/// holds up the runtime nor keeps the process alive after Ctrl-C, and stdin is left alone
/// between requests (for the tool approvals of a turn).
struct Prompter {
    ask: std::sync::mpsc::Sender<()>,
    lines: tokio::sync::mpsc::Receiver<Option<String>>,
}

impl Prompter {
    fn start() -> Self {
        let (ask, asked) = std::sync::mpsc::channel::<()>();
        let (tx, lines) = tokio::sync::mpsc::channel(1);
        std::thread::spawn(move || {
            for () in asked {
                let mut line = String::new();
                let read = match std::io::stdin().read_line(&mut line) {
                    Ok(0) | Err(_) => None,
                    Ok(_) => Some(line),
                };
                if tx.blocking_send(read).is_err() {
                    break;
                }
            }
        });
        Prompter { ask, lines }
    }

    /// The next line; `None` at end of input.
    async fn next(&mut self) -> Option<String> {
        self.ask.send(()).ok()?;
        self.lines.recv().await.flatten()
    }
}

/// Runs the chat line by line; returns the exit status.
pub async fn run(mut chat: Chat, settings: TurnSettings) -> anyhow::Result<u8> {
    use std::io::Write;
    eprintln!(
        "recursive chat — session {} ({} earlier message(s)); /help lists the commands",
        chat.session.meta.id,
        chat.history.len()
    );
    let mut code = 0u8;
    let mut prompter = Prompter::start();
    loop {
        eprint!("\n> ");
        let _ = std::io::stderr().flush();
        // Ctrl-C at the prompt ends the chat as it ends a turn (the blocked read is left behind).
        let line = match chat.first.take() {
            Some(first) => Some(first),
            None => tokio::select! {
                line = prompter.next() => line,
                _ = chat.scope.cancel_token().cancelled() => {
                    code = 8;
                    break;
                }
            },
        };
        let Some(line) = line else { break };
        let text = match parse(&line) {
            None => continue,
            Some(Input::Exit) => break,
            Some(Input::Help) => {
                eprintln!("{HELP}");
                continue;
            }
            Some(Input::Cost) => {
                eprintln!("{}", chat.cost_line());
                continue;
            }
            Some(Input::Session) => {
                eprintln!("{}", chat.session_line());
                continue;
            }
            Some(Input::Compact) => {
                eprintln!("{}", chat.compact().await);
                continue;
            }
            Some(Input::Undo) => {
                eprintln!("{}", chat.undo());
                continue;
            }
            Some(Input::Mode(name)) => {
                eprintln!("{}", chat.switch_mode(name.as_deref()));
                continue;
            }
            Some(Input::Approve) => match chat.approve_plan() {
                Ok(message) => message,
                Err(why) => {
                    eprintln!("{why}");
                    continue;
                }
            },
            Some(Input::Rename(title)) => {
                eprintln!("{}", chat.rename(&title));
                continue;
            }
            Some(Input::Rewind(None)) => {
                eprintln!("{}", chat.rewind_list());
                continue;
            }
            Some(Input::Rewind(Some(n))) => {
                match chat.rewind(&n) {
                    Ok(rewound) => eprintln!("{}\nthe prompt was: {}", rewound.summary, rewound.prompt),
                    Err(why) => eprintln!("{why}"),
                }
                continue;
            }
            Some(Input::Diff) => {
                let diff = chat.diff();
                eprintln!("{}", if diff.is_empty() { NO_CHANGES } else { diff.trim_end() });
                continue;
            }
            Some(Input::Tree) => {
                eprintln!("the run tree is shown by the terminal UI; here every run's events are printed as they come");
                continue;
            }
            Some(Input::Model(None)) => {
                eprintln!("{}", chat.models_text());
                continue;
            }
            Some(Input::Model(Some(name))) => {
                eprintln!("model: {name}");
                chat.model = name;
                continue;
            }
            Some(Input::Unknown(name)) => {
                eprintln!("unknown command /{name}\n{HELP}");
                continue;
            }
            Some(Input::Message(text)) => text,
        };
        let (mut turn, notes) = chat.prepare(&text).await?;
        for note in notes {
            eprintln!("{note}");
        }
        let before = chat.totals();
        let scope = settle(&mut turn, chat.scope.clone(), &settings);
        let end = turn.run(scope).await;
        if let Some(error) = &end.error {
            eprintln!("\nerror: {error}");
            code = 1;
        } else if end.result.finish_reason == recursive_core::FinishReason::PlanPending {
            eprintln!("\n{}", crate::chat::PLAN_READY);
        }
        println!();
        if let Some(warning) = chat.finish(&end, before, None) {
            eprintln!("warning: {warning}");
        }
        if chat.scope.cancel_token().is_cancelled() {
            code = 8;
            break;
        }
    }
    eprintln!("session {} saved; continue it with `recursive chat --resume {0}`", chat.session.meta.id);
    chat.close().await;
    Ok(code)
}
