//! Keeps this process's secrets out of `/proc/<pid>/environ`, where any command it runs could
//! read them (`cat /proc/$PPID/environ`).
//!
//! At start the program re-executes itself (same PID, same arguments) with only the variables
//! that [`process_keeps`] in its environment; every other variable (API
//! keys, `DATABASE_URL`, tokens) travels to the new image in an anonymous memory file, which the
//! new image reads, empties and keeps in memory ([`recursive_core::env::hold`]). The process is
//! then marked not dumpable, so processes of the same user cannot read its memory or `/proc`
//! files (root still can: it is not a boundary against root). If the re-execution fails, the
//! run goes on with its environment as it was, and says so.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;

use nix::sys::memfd::{MFdFlags, memfd_create};
use recursive_core::env::process_keeps;

/// Names the descriptor of the memory file in the re-executed image.
const HELD_FD_VAR: &str = "RECURSIVE_HELD_ENV_FD";

/// Re-executes the program without its secret variables, or (in the re-executed image) takes
/// them back. Returns only in the image that goes on running.
pub fn hide() {
    if let Some(fd) = std::env::var_os(HELD_FD_VAR) {
        match take_back(&fd) {
            Ok(held) => recursive_core::env::hold(held),
            Err(e) => eprintln!("recursive: cannot read back the environment: {e}"),
        }
    } else {
        let (visible, held) = partition(std::env::vars_os());
        if !held.is_empty() {
            let e = reexec(&visible, &held);
            eprintln!("warning: could not re-execute without secret variables ({e}); they stay readable in /proc");
        }
    }
    let _ = nix::sys::prctl::set_dumpable(false);
}

type Vars = BTreeMap<OsString, OsString>;

fn partition(vars: impl Iterator<Item = (OsString, OsString)>) -> (Vars, Vars) {
    vars.partition(|(k, _)| process_keeps(k))
}

/// Execs the program anew; returns only on failure, with why.
fn reexec(visible: &Vars, held: &Vars) -> String {
    let file = match memfd_create("recursive-held-env", MFdFlags::empty()) {
        Ok(fd) => std::fs::File::from(fd),
        Err(e) => return format!("memfd_create: {e}"),
    };
    let mut file = file;
    if let Err(e) = file.write_all(&encode(held)).and_then(|()| file.rewind()) {
        return format!("writing the memory file: {e}");
    }
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => return format!("locating this executable: {e}"),
    };
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| exe.clone().into_os_string());
    let e = std::process::Command::new(&exe)
        .arg0(arg0)
        .args(args)
        .env_clear()
        .envs(visible)
        .env(HELD_FD_VAR, file.as_raw_fd().to_string())
        .exec();
    format!("exec {}: {e}", exe.display())
}

/// `NAME=value` entries, each ended by a NUL (neither can contain one).
fn encode(vars: &Vars) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in vars {
        out.extend_from_slice(k.as_bytes());
        out.push(b'=');
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

fn decode(bytes: &[u8]) -> Vars {
    bytes
        .split(|b| *b == 0)
        .filter_map(|entry| {
            let eq = entry.iter().position(|b| *b == b'=')?;
            Some((OsString::from_vec(entry[..eq].to_vec()), OsString::from_vec(entry[eq + 1..].to_vec())))
        })
        .collect()
}

/// Reads the held variables from the inherited memory file and empties it, so a command that
/// inherits the descriptor finds nothing there.
fn take_back(fd: &OsStr) -> std::io::Result<Vars> {
    let fd: u32 = fd.to_str().and_then(|s| s.parse().ok()).ok_or_else(|| std::io::Error::other("bad descriptor"))?;
    let mut file = std::fs::OpenOptions::new().read(true).write(true).open(format!("/proc/self/fd/{fd}"))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    file.set_len(0)?;
    Ok(decode(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_held_and_the_allowlist_stays_visible() {
        let vars = [("PATH", "/bin"), ("LC_ALL", "C"), ("OPENAI_API_KEY", "sk"), ("DATABASE_URL", "pg://u:p@h")];
        let (visible, held) = partition(vars.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))));
        assert_eq!(visible.keys().map(|k| k.to_str().unwrap()).collect::<Vec<_>>(), ["LC_ALL", "PATH"]);
        assert_eq!(held.keys().map(|k| k.to_str().unwrap()).collect::<Vec<_>>(), ["DATABASE_URL", "OPENAI_API_KEY"]);
    }

    #[test]
    fn held_variables_round_trip_with_equals_signs_in_values() {
        let vars: Vars =
            [("A", "x=y"), ("B", "")].iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect();
        assert_eq!(decode(&encode(&vars)), vars);
    }
}
