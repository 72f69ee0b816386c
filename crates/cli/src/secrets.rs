//! Keeps this process's secrets out of `/proc/<pid>/environ`, where any command it runs could
//! read them (`cat /proc/$PPID/environ`).
//!
//! At start every variable that [`process_keeps`] does not name (API keys, `DATABASE_URL`,
//! tokens) is copied into the program's memory ([`recursive_core::env::hold`]) and its bytes in
//! the process's environment block — the memory `/proc/<pid>/environ` shows — are overwritten
//! with zeros through `/proc/self/mem`. Where that is refused (a kernel that forbids writing
//! `/proc/self/mem`), the program re-executes itself (same PID, same arguments) with only the
//! kept variables, the others travelling to the new image in an anonymous memory file that the
//! new image reads and empties; the in-place way spares that second start (about 9 ms of
//! loading a large binary). Either way the process is then marked not dumpable, so processes of
//! the same user cannot read its memory or `/proc` files (root still can: it is not a boundary
//! against root). If both ways fail, the run goes on with its environment as it was, and says so.

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

/// Takes the secret variables out of the visible environment — in place, or by re-executing
/// the program — or (in a re-executed image) takes them back. Returns only in the image that
/// goes on running.
pub fn hide() {
    if let Some(fd) = std::env::var_os(HELD_FD_VAR) {
        match take_back(&fd) {
            Ok(held) => recursive_core::env::hold(held),
            Err(e) => eprintln!("recursive: cannot read back the environment: {e}"),
        }
    } else {
        let (visible, held) = partition(std::env::vars_os());
        let names: Vec<&OsStr> = held.keys().map(OsString::as_os_str).collect();
        if !held.is_empty() && scrub_in_place(&names).is_err() {
            let e = reexec(&visible, &held);
            eprintln!("warning: could not re-execute without secret variables ({e}); they stay readable in /proc");
        }
        recursive_core::env::hold(held);
    }
    let _ = nix::sys::prctl::set_dumpable(false);
}

type Vars = BTreeMap<OsString, OsString>;

fn partition(vars: impl Iterator<Item = (OsString, OsString)>) -> (Vars, Vars) {
    vars.partition(|(k, _)| process_keeps(k))
}

/// Overwrites with zeros the entries of the process's environment block (as `/proc/self/environ`
/// shows it) whose names are in `names`, then reads the block again to check none is left.
/// The entries' memory is the one the C library's environment points into, so after this the
/// variables are gone from the visible environment too (read them with [`recursive_core::env`]).
fn scrub_in_place(names: &[&OsStr]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let start = environment_start()?;
    let block = std::fs::read("/proc/self/environ")?;
    let mem = std::fs::OpenOptions::new().write(true).open("/proc/self/mem")?;
    for (offset, len) in entries_named(&block, names) {
        mem.write_all_at(&vec![0; len], start + offset as u64)?;
    }
    let after = std::fs::read("/proc/self/environ")?;
    match entries_named(&after, names).is_empty() {
        true => Ok(()),
        false => Err(std::io::Error::other("the environment block did not change")),
    }
}

/// The address of the process's environment block (field 50 of `/proc/self/stat`).
fn environment_start() -> std::io::Result<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // Fields after the command name (field 2, in parentheses, may hold spaces) start at field 3.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    rest.split_whitespace()
        .nth(50 - 3)
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| std::io::Error::other("no env_start in /proc/self/stat"))
}

/// The `(offset, length)` of each `NAME=value` entry of a NUL-separated block whose name is
/// one of `names`.
fn entries_named(block: &[u8], names: &[&OsStr]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut offset = 0;
    for entry in block.split(|b| *b == 0) {
        let name = entry.iter().position(|b| *b == b'=').map(|eq| &entry[..eq]);
        if name.is_some_and(|n| names.iter().any(|k| k.as_bytes() == n)) {
            out.push((offset, entry.len()));
        }
        offset += entry.len() + 1;
    }
    out
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
    fn entries_are_found_by_exact_name() {
        let block = b"PATH=/bin\0OPENAI_API_KEY=sk=1\0OPENAI_API_KEY_FILE=x\0\0B=\0";
        let names = [OsStr::new("OPENAI_API_KEY"), OsStr::new("B")];
        assert_eq!(entries_named(block, &names), vec![(10, 19), (53, 2)]);
    }

    #[test]
    fn the_environment_block_is_found_in_proc_stat() {
        let start = environment_start().unwrap();
        assert!(start > 0);
    }

    #[test]
    fn held_variables_round_trip_with_equals_signs_in_values() {
        let vars: Vars =
            [("A", "x=y"), ("B", "")].iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect();
        assert_eq!(decode(&encode(&vars)), vars);
    }
}
