//! How much a session asks before a call runs: the approval modes of `chat` (cycled with one
//! key) and `run` (`--mode`), and `[permissions] mode`. The permission policy reads the mode in
//! force at each call, so a switch mid-session applies to the next call:
//! - `ask` (the default): the rules and defaults decide, and "ask" asks;
//! - `accept-edits`: a file edit (a local tool that writes the paths it names) is approved
//!   without asking; a command or a network or MCP tool still asks;
//! - `plan`: nothing that changes anything runs; the model looks around with the read-only
//!   tools and proposes a plan for approval;
//! - `auto`: everything the rules would ask about is approved, as `--yes`.
//!
//! Deny rules deny in every mode.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use recursive_core::Tool;
use recursive_core::config_trust::KeyClass;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// An approval mode (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[schemars(extend("x-trust" = KeyClass::Scale {
    loosest_first: vec!["auto".into(), "accept-edits".into(), "ask".into(), "plan".into()],
    builtin: Some("ask".into()),
}))]
pub enum Mode {
    /// The rules decide; "ask" asks.
    #[default]
    Ask,
    /// File edits are approved without asking.
    AcceptEdits,
    /// Read-only: the model plans, nothing changes.
    Plan,
    /// Everything that would ask is approved.
    Auto,
}

impl Mode {
    const ALL: [Mode; 4] = [Mode::Ask, Mode::AcceptEdits, Mode::Plan, Mode::Auto];

    /// The mode after this one, in the order a key cycles them.
    pub fn next(self) -> Mode {
        Mode::ALL[(self as usize + 1) % Mode::ALL.len()]
    }

    /// Its name as written in flags and configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Ask => "ask",
            Mode::AcceptEdits => "accept-edits",
            Mode::Plan => "plan",
            Mode::Auto => "auto",
        }
    }

    /// The mode named `name`; the error lists the names.
    pub fn parse(name: &str) -> Result<Mode, String> {
        Mode::ALL.into_iter().find(|m| m.as_str() == name.trim()).ok_or_else(|| {
            let names: Vec<&str> = Mode::ALL.iter().map(|m| m.as_str()).collect();
            format!("`{name}` is not a mode; the modes are {}", names.join(", "))
        })
    }

    fn from_index(i: u8) -> Mode {
        Mode::ALL.get(usize::from(i)).copied().unwrap_or_default()
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The mode in force, shared by the permission policy and whoever switches it.
#[derive(Debug, Clone, Default)]
pub struct ModeSwitch(Arc<AtomicU8>);

impl ModeSwitch {
    /// A switch set to `mode`.
    pub fn new(mode: Mode) -> Self {
        Self(Arc::new(AtomicU8::new(mode as u8)))
    }

    /// The mode in force.
    pub fn get(&self) -> Mode {
        Mode::from_index(self.0.load(Ordering::SeqCst))
    }

    /// Switches to `mode`.
    pub fn set(&self, mode: Mode) {
        self.0.store(mode as u8, Ordering::SeqCst);
    }

    /// Switches to the next mode; the new one.
    pub fn cycle(&self) -> Mode {
        let next = self.get().next();
        self.set(next);
        next
    }
}

/// Whether a call of `tool` with `arguments` is a file edit: a local tool that changes what it
/// names by path (writing a file, applying a patch) — not a command, not a network or MCP tool.
pub fn is_edit(tool: &dyn Tool, arguments: &Map<String, Value>) -> bool {
    tool.origin() == recursive_core::ToolOrigin::Local
        && !tool.read_only()
        && !tool.reaches_network()
        && tool.paths(arguments).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_cycle_in_order_and_parse_by_name() {
        let switch = ModeSwitch::new(Mode::Ask);
        let seen: Vec<Mode> = (0..4).map(|_| switch.cycle()).collect();
        assert_eq!(seen, [Mode::AcceptEdits, Mode::Plan, Mode::Auto, Mode::Ask]);
        assert_eq!(Mode::parse("accept-edits"), Ok(Mode::AcceptEdits));
        assert!(Mode::parse("yolo").unwrap_err().contains("ask, accept-edits, plan, auto"));
    }
}
