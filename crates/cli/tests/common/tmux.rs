//! A terminal for tests of the interactive commands: a tmux server of its own, keys sent to
//! it, and the screen read back.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// A tmux server of its own running one command in a pane of a fixed size.
pub struct Tmux {
    socket: String,
}

impl Tmux {
    pub fn start(dir: &Path, command: &str) -> Self {
        let socket = format!("recursive-test-{}-{}", std::process::id(), uuid_like());
        let status = Command::new("tmux")
            .args(["-L", &socket, "-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", "200", "-y", "60"])
            .arg(format!("cd {} && {command}; sleep 600", dir.display()))
            .status()
            .expect("tmux must be installed (scripts/test installs it)");
        assert!(status.success(), "tmux did not start");
        Self { socket }
    }

    pub fn keys(&self, keys: &[&str]) {
        let ok = Command::new("tmux").args(["-L", &self.socket, "send-keys", "-t", "t"]).args(keys).status().unwrap();
        assert!(ok.success());
    }

    /// Types a line and presses Enter.
    pub fn line(&self, text: &str) {
        self.keys(&["-l", text]);
        self.keys(&["Enter"]);
    }

    /// Pastes `text` as a terminal does when the program asked for bracketed paste.
    pub fn paste(&self, text: &str) {
        let set = Command::new("tmux").args(["-L", &self.socket, "set-buffer", "-b", "p", text]).status().unwrap();
        assert!(set.success());
        let ok = Command::new("tmux")
            .args(["-L", &self.socket, "paste-buffer", "-p", "-d", "-b", "p", "-t", "t"])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    pub fn screen(&self) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p", "-J", "-t", "t", "-S", "-500"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the screen shows `text` `times` times in all.
    pub fn wait_for(&self, text: &str, times: usize) -> String {
        let end = Instant::now() + Duration::from_secs(60);
        loop {
            let screen = self.screen();
            if screen.matches(text).count() >= times {
                return screen;
            }
            assert!(Instant::now() < end, "timed out waiting for {text:?} x{times}; the screen:\n{screen}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["-L", &self.socket, "kill-server"]).status();
    }
}

fn uuid_like() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or_default()
}

/// The binary run with `args` in `home` (as its home, with no credentials and no user config),
/// as a shell command line for a pane.
pub fn command_line(home: &Path, args: &str) -> String {
    format!(
        "env -u ANTHROPIC_API_KEY -u OPENAI_API_KEY HOME={home} XDG_CONFIG_HOME={home}/config XDG_DATA_HOME={home}/data \
         OLLAMA_HOST=127.0.0.1:9 {bin} {args}",
        home = home.display(),
        bin = env!("CARGO_BIN_EXE_recursive"),
    )
}

/// Checks a screen against a fixture loosely (content, not layout): every non-blank line of the
/// fixture appears, trimmed, within some line of the screen, in the fixture's order.
pub fn assert_matches_fixture(screen: &str, fixture: &Path) {
    let expected = std::fs::read_to_string(fixture).unwrap();
    let lines: Vec<&str> = screen.lines().map(str::trim).collect();
    let mut at = 0;
    for want in expected.lines().map(str::trim).filter(|l| !l.is_empty()) {
        match lines[at..].iter().position(|l| l.contains(want)) {
            Some(i) => at += i + 1,
            None => panic!("the screen lacks {want:?} (after line {at}) of {}:\n{screen}", fixture.display()),
        }
    }
}
