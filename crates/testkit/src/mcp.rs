//! A scripted stdio MCP server in plain Python (no packages needed), for tests of the MCP
//! client's limits and of how its processes are stopped, and helpers to watch its processes.

use std::path::Path;
use std::time::Duration;

/// A stdio MCP server in plain Python: one tool, `emit`, answering with `size` bytes of text.
/// With `stubborn`, it ignores both the closing of its stdin and SIGTERM, and starts a
/// sleeping child; it writes its own pid and the child's to `pids`.
pub const SCRIPTED_SERVER: &str = r#"
import json, signal, subprocess, sys, time
stubborn = sys.argv[1] == "stubborn"
if stubborn:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen(["sleep", "300"])
    open(sys.argv[2], "w").write(f"{__import__('os').getpid()} {child.pid}")
for line in sys.stdin:
    msg = json.loads(line)
    method, mid = msg.get("method"), msg.get("id")
    if method == "initialize":
        res = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
               "serverInfo": {"name": "scripted", "version": "1"}}
    elif method == "tools/list":
        res = {"tools": [{"name": "emit", "description": "emits text",
                          "inputSchema": {"type": "object", "properties": {"size": {"type": "integer"}}}}]}
    elif method == "tools/call":
        res = {"content": [{"type": "text", "text": "z" * msg["params"]["arguments"]["size"]}]}
    else:
        continue
    # The id last, as some servers write it: the client must find it after the payload.
    sys.stdout.write(json.dumps({"result": res, "jsonrpc": "2.0", "id": mid}) + "\n")
    sys.stdout.flush()
while stubborn:
    time.sleep(1)
"#;

/// Writes the server script into `dir` and returns the arguments for `python3`: the script,
/// `mode` (`plain` or `stubborn`) and the file for its pids (`dir/pids`).
pub fn scripted_server_args(dir: &Path, mode: &str) -> Vec<String> {
    let script = dir.join("server.py");
    if let Err(e) = std::fs::write(&script, SCRIPTED_SERVER) {
        panic!("cannot write {}: {e}", script.display());
    }
    vec![script.display().to_string(), mode.to_string(), dir.join("pids").display().to_string()]
}

/// The pids a stubborn server wrote (its own, then its child's), waiting up to ten seconds.
pub fn server_pids(dir: &Path) -> Vec<i32> {
    for _ in 0..200 {
        if let Some(pids) = read_pids(dir) {
            return pids;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the server did not write its pids into {}", dir.display());
}

/// The pids a stubborn server wrote, if it has.
pub fn read_pids(dir: &Path) -> Option<Vec<i32>> {
    let text = std::fs::read_to_string(dir.join("pids")).ok()?;
    let pids: Vec<i32> = text.split_whitespace().filter_map(|p| p.parse().ok()).collect();
    (pids.len() == 2).then_some(pids)
}

/// Whether `pid` is running (a zombie counts as gone).
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit_once(')').is_some_and(|(_, r)| !r.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

/// Whether `pid` still runs after up to five seconds of waiting for it to end.
pub fn survives(pid: i32) -> bool {
    for _ in 0..100 {
        if !alive(pid) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}
