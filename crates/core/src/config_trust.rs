//! What a configuration key does to the user's safety, declared where the key is declared.
//!
//! A project's `recursive.toml` comes with whatever repository was cloned, so until the user
//! trusts it, it may only *tighten* what applies. Each key of every configuration type carries a
//! [`KeyClass`] in its JSON Schema (`#[schemars(extend("x-trust" = KeyClass::…))]` on the field,
//! or on a type every use of which is classed the same way). The harness merges an untrusted
//! layer by walking that schema: it keeps what tightens and leaves out, with a warning, what
//! loosens or is not classified. A test walks every key of the configuration and fails on one
//! without a class, so a new key cannot be forgotten.

use serde::{Deserialize, Serialize};

/// The JSON Schema keyword that carries a key's [`KeyClass`].
pub const SCHEMA_KEYWORD: &str = "x-trust";

/// How a key from an untrusted configuration layer is treated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "class", rename_all = "snake_case")]
#[non_exhaustive]
pub enum KeyClass {
    /// Changes nothing the user relies on for safety or spend (a display setting, a model's name).
    Neutral,
    /// Widens what runs, what is reachable or where data goes (a command, a URL, a header, a
    /// price, content export); left out of an untrusted layer. `why` is said in the warning.
    Loosening {
        /// Why the key needs trust, for the warning.
        why: String,
    },
    /// A number where lower is tighter (a cap, a limit, a timeout). Kept from an untrusted
    /// layer when it is at most the value in force: the trusted layer's, else `builtin`, else
    /// the schema's `default`; with none of them the key is unlimited when unset.
    Cap {
        /// The value in force when nothing sets the key, if the schema does not say.
        builtin: Option<f64>,
        /// Whether 0 means "no limit" (the loosest value rather than the tightest).
        zero_is_unlimited: bool,
    },
    /// A value from a fixed scale, loosest first (`["off", "auto", "required"]`, a boolean as
    /// `["true", "false"]`). Kept when at least as tight as the value in force (the trusted
    /// layer's, else `builtin`, else the schema's `default`).
    Scale {
        /// The values, loosest first, as written (booleans as `"true"`/`"false"`).
        loosest_first: Vec<String>,
        /// The value in force when nothing sets the key, if the schema does not say.
        builtin: Option<String>,
    },
    /// A list of rules whose entries each have an `action`: only entries whose action is one
    /// of `tightening` are kept, appended to the trusted layer's.
    Rules {
        /// The actions that tighten (`deny`, `ask`).
        tightening: Vec<String>,
    },
    /// A path: kept only when it stays inside the project (relative, no `..`, no link out).
    InsideProject,
}

impl KeyClass {
    /// [`KeyClass::Loosening`] with its reason.
    pub fn loosening(why: &str) -> Self {
        KeyClass::Loosening { why: why.to_string() }
    }

    /// [`KeyClass::Cap`] whose value in force is the schema's `default` (or unlimited).
    pub fn cap() -> Self {
        KeyClass::Cap { builtin: None, zero_is_unlimited: false }
    }

    /// [`KeyClass::Cap`] with the built-in value used when the key is unset.
    pub fn cap_of(builtin: f64) -> Self {
        KeyClass::Cap { builtin: Some(builtin), zero_is_unlimited: false }
    }

    /// A scale of values, loosest first, whose value in force comes from the schema's `default`.
    pub fn scale(loosest_first: &[&str]) -> Self {
        KeyClass::Scale { loosest_first: loosest_first.iter().map(|s| s.to_string()).collect(), builtin: None }
    }

    /// A boolean where `true` loosens (`network`, content export, an extra tool); off when unset.
    pub fn switch_on_loosens() -> Self {
        KeyClass::Scale { loosest_first: vec!["true".into(), "false".into()], builtin: Some("false".into()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_class_reads_back_from_its_schema_form() {
        for class in [
            KeyClass::Neutral,
            KeyClass::loosening("it starts commands"),
            KeyClass::cap_of(8.0),
            KeyClass::scale(&["off", "auto", "required"]),
            KeyClass::Rules { tightening: vec!["deny".into()] },
            KeyClass::InsideProject,
        ] {
            let value = serde_json::to_value(&class).unwrap();
            assert_eq!(serde_json::from_value::<KeyClass>(value).unwrap(), class);
        }
    }
}
