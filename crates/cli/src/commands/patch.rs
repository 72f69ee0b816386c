//! `recursive apply-patch`: applies a V4A patch in the current directory, confined to it as the
//! `apply_patch` tool is to its workspace: `../x`, absolute paths and symlinks leading out are
//! refused.

use std::io::Read;

use clap::Args;

/// Arguments of `apply-patch`.
#[derive(Debug, Args)]
pub struct PatchArgs {
    /// The patch text; read from stdin when omitted.
    pub patch: Option<String>,
}

/// Applies the patch; prints `A/M/D path` lines on success, the error on stderr and exit 1
/// on failure (the error names the files changed before it, if any).
pub fn execute(args: PatchArgs) -> anyhow::Result<u8> {
    let text = match args.patch {
        Some(p) => p,
        None => {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s)?;
            s
        }
    };
    let dir = std::env::current_dir()?;
    let ws = recursive_tools::Workspace::new(&dir)?;
    let resolve = |p: &str| ws.resolve(p).map_err(|e| e.to_string());
    match recursive_tools::apply_patch::apply_patch(&text, &resolve) {
        Ok(report) => {
            println!("{report}");
            Ok(0)
        }
        Err(e) => {
            eprintln!("{e}");
            Ok(1)
        }
    }
}
