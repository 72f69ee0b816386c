//! Prerequisites from the environment: a test that needs a server or a binary named by an
//! environment variable fails when it is missing, so a test never passes without running.
//! `./scripts/test` installs the prerequisites and sets the variables; a developer without
//! them can set `RECURSIVE_ALLOW_SKIP=1` to skip such tests (each skip is printed).

use std::io::Write;

/// The variable that turns a missing prerequisite into a printed skip instead of a failure.
pub const ALLOW_SKIP_VAR: &str = "RECURSIVE_ALLOW_SKIP";

/// The value of the environment variable `name`, which names a test prerequisite.
///
/// When it is unset or empty, panics with a message saying to run `./scripts/test` (which
/// installs the prerequisites and sets the variable) — unless `RECURSIVE_ALLOW_SKIP=1` is
/// set, in which case it prints `SKIPPED <test>: ...` (past the harness's output capture) and
/// returns `None`.
///
/// ```no_run
/// # fn demo() {
/// let Some(bin) = recursive_testkit::require_env("FAKELLM_BIN") else { return };
/// # let _ = bin;
/// # }
/// ```
#[track_caller]
pub fn require_env(name: &str) -> Option<String> {
    let allow_skip = std::env::var(ALLOW_SKIP_VAR).is_ok_and(|v| v.trim() == "1");
    resolve(name, std::env::var(name).ok(), allow_skip)
}

/// [`require_env`] on explicit inputs.
#[track_caller]
fn resolve(name: &str, value: Option<String>, allow_skip: bool) -> Option<String> {
    if let Some(value) = value.filter(|v| !v.trim().is_empty()) {
        return Some(value);
    }
    let test = std::thread::current().name().unwrap_or("this test").to_string();
    if allow_skip {
        // Written to the process's stderr rather than with `eprintln!`, which the test harness
        // captures and hides for passing tests: a skip is always visible.
        let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {name} is not set ({ALLOW_SKIP_VAR}=1 allows skipping)");
        return None;
    }
    panic!(
        "{test} needs {name}, which is not set: run ./scripts/test, which installs the test prerequisites and sets \
         it (or set {ALLOW_SKIP_VAR}=1 to skip tests whose prerequisites are missing)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_variable_is_returned() {
        assert_eq!(resolve("X", Some("/bin/x".into()), false), Some("/bin/x".into()));
        assert_eq!(resolve("X", Some("/bin/x".into()), true), Some("/bin/x".into()));
    }

    #[test]
    fn a_missing_variable_fails_the_test_and_says_to_run_the_test_script() {
        let err = std::panic::catch_unwind(|| resolve("FAKELLM_BIN", None, false)).unwrap_err();
        let message = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(message.contains("needs FAKELLM_BIN, which is not set"), "{message}");
        assert!(message.contains("./scripts/test"), "{message}");
        assert!(message.contains(ALLOW_SKIP_VAR), "{message}");
    }

    #[test]
    fn an_empty_variable_counts_as_missing() {
        assert!(std::panic::catch_unwind(|| resolve("X", Some("  ".into()), false)).is_err());
    }

    #[test]
    fn a_missing_variable_is_skipped_when_skipping_is_allowed() {
        assert_eq!(resolve("FAKELLM_BIN", None, true), None);
    }
}
