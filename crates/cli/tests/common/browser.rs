//! Headless Chromium for the browser tests (`scripts/test` installs Debian's): the binary, and a
//! DevTools session over `--remote-debugging-pipe` that opens a page and reads its DOM while the
//! page keeps running (a live view updates without reloads), and takes screenshots. Every wait
//! is bounded.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The Chromium binary; panics when there is none (a browser test never passes without one).
pub fn chromium() -> String {
    for candidate in ["chromium", "chromium-browser", "google-chrome"] {
        if Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {candidate}"))
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return candidate.to_string();
        }
    }
    panic!("Chromium is not installed (scripts/test installs it)");
}

/// The flags every headless run takes.
pub const HEADLESS: [&str; 8] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
];

/// How long one DevTools command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// A headless Chromium driven over the DevTools protocol, with one page open.
pub struct Browser {
    child: Child,
    commands: ChildStdin,
    messages: Receiver<Value>,
    next_id: u64,
    session: String,
}

impl Browser {
    /// Starts Chromium with its profile in `profile` and opens `url`.
    pub fn open(url: &str, profile: &std::path::Path) -> Browser {
        // The pipe is fds 3 (commands in) and 4 (replies out): the shell moves our pipes there.
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("exec \"$0\" \"$@\" 3<&0 4>&1 </dev/null >/dev/null 2>/dev/null")
            .arg(chromium())
            .args(HEADLESS)
            .arg("--remote-debugging-pipe")
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium starts");
        let commands = child.stdin.take().expect("a command pipe");
        let replies = child.stdout.take().expect("a reply pipe");
        let (tx, messages) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(replies);
            let mut message = Vec::new();
            while reader.read_until(0, &mut message).is_ok_and(|n| n > 0) {
                message.pop();
                if let Ok(value) = serde_json::from_slice::<Value>(&message)
                    && tx.send(value).is_err()
                {
                    return;
                }
                message.clear();
            }
        });
        let mut browser = Browser { child, commands, messages, next_id: 0, session: String::new() };
        let target = browser.call("Target.createTarget", json!({"url": url}));
        let target = target["targetId"].as_str().expect("a target id").to_string();
        let attached = browser.call("Target.attachToTarget", json!({"targetId": target, "flatten": true}));
        browser.session = attached["sessionId"].as_str().expect("a session id").to_string();
        browser
    }

    /// Sends one command (to the page once attached) and waits for its result.
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut command = json!({"id": id, "method": method, "params": params});
        if !self.session.is_empty() {
            command["sessionId"] = json!(self.session);
        }
        let mut bytes = command.to_string().into_bytes();
        bytes.push(0);
        self.commands.write_all(&bytes).expect("chromium reads commands");
        let end = Instant::now() + COMMAND_TIMEOUT;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.messages.recv_timeout(left) {
                Ok(reply) if reply["id"] == id => {
                    assert!(reply.get("error").is_none(), "{method} failed: {reply}");
                    return reply["result"].clone();
                }
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => panic!("chromium did not answer {method} within {COMMAND_TIMEOUT:?}"),
                Err(RecvTimeoutError::Disconnected) => panic!("chromium exited while answering {method}"),
            }
        }
    }

    /// The value of a JavaScript expression in the page (JSON-serialisable).
    pub fn eval(&mut self, expression: &str) -> Value {
        let result = self.call("Runtime.evaluate", json!({"expression": expression, "returnByValue": true}));
        assert!(result.get("exceptionDetails").is_none(), "{expression} threw: {result}");
        result["result"]["value"].clone()
    }

    /// Evaluates `expression` every 100 ms until it is true (one that throws, e.g. while the
    /// page loads, is not yet); panics naming `what` after `timeout`, with the page's text.
    pub fn wait_for(&mut self, what: &str, timeout: Duration, expression: &str) {
        let end = Instant::now() + timeout;
        let guarded =
            format!("(function () {{ try {{ return ({expression}) === true; }} catch (e) {{ return false; }} }})()");
        while self.eval(&guarded) != json!(true) {
            if Instant::now() > end {
                let text = self.eval("document.body ? document.body.innerText : ''");
                panic!(
                    "timed out after {timeout:?} waiting for {what}; the page shows:\n{}",
                    text.as_str().unwrap_or("")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A PNG screenshot of the page.
    pub fn screenshot(&mut self) -> Vec<u8> {
        let shot = self.call("Page.captureScreenshot", json!({"format": "png"}));
        base64_decode(shot["data"].as_str().expect("screenshot data"))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Standard base64 (with padding) decoded.
pub fn base64_decode(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut bits, mut count) = (0u32, 0);
    for c in text.bytes().filter(|c| !c.is_ascii_whitespace() && *c != b'=') {
        let value = ALPHABET.iter().position(|a| *a == c).unwrap_or_else(|| panic!("not base64: {c}"));
        bits = (bits << 6) | value as u32;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
            bits &= (1 << count) - 1;
        }
    }
    out
}

/// The width and height of a PNG, checked to be one (signature and IHDR chunk).
pub fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert!(bytes.len() > 24, "{} bytes are no PNG", bytes.len());
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "the PNG signature");
    assert_eq!(&bytes[12..16], b"IHDR", "the PNG header chunk");
    let word = |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    (word(16), word(20))
}
