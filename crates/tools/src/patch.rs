//! The `apply_patch` tool: applies a V4A patch (see [`crate::apply_patch`]) with every path
//! resolved through the workspace sandbox, so a patch cannot add, change, move or delete a
//! file outside the workspace.

use async_trait::async_trait;
use recursive_core::{ToolContext, ToolError, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::apply_patch::apply_patch;
use crate::fs::blocking;
use crate::sandbox::Workspace;

/// Arguments of `apply_patch`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyPatchArgs {
    /// The whole patch, from `*** Begin Patch` to `*** End Patch`.
    pub patch: String,
}

/// Applies a V4A patch inside the workspace.
#[derive(Debug, Clone)]
pub struct ApplyPatch {
    ws: Workspace,
}

impl ApplyPatch {
    /// The tool for this workspace.
    pub fn new(ws: Workspace) -> Self {
        Self { ws }
    }
}

#[async_trait]
impl TypedTool for ApplyPatch {
    type Args = ApplyPatchArgs;

    fn name(&self) -> &str {
        "apply_patch"
    }

    /// Every path the patch adds, deletes, updates or moves to; `None` when it does not parse
    /// (an allow rule then does not match, and the tool refuses it anyway).
    fn paths(&self, arguments: &Map<String, Value>) -> Option<Vec<String>> {
        let text = arguments.get("patch").and_then(Value::as_str)?;
        let patch = crate::apply_patch::parse_patch(text).ok()?;
        Some(patch.paths().into_iter().map(str::to_string).collect())
    }

    fn description(&self) -> String {
        "Edit files with a patch. The patch starts with `*** Begin Patch` and ends with `*** End Patch`; \
         between them, one section per file:\n\
         `*** Add File: <path>` followed by the new file's lines, each prefixed with `+`;\n\
         `*** Delete File: <path>`;\n\
         `*** Update File: <path>` (optionally followed by `*** Move to: <new path>`), then changes: a line \
         `@@ <a line near the change, e.g. a function signature>` (or a bare `@@`), then the lines around \
         the change prefixed with a space, removed lines prefixed with `-` and added lines with `+`. Give \
         about three lines of unchanged context before and after each change so it can be located.\n\
         Paths are relative to the workspace root. The result lists each file changed as `A`, `M` or `D`."
            .into()
    }

    async fn run(&self, args: ApplyPatchArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let ws = self.ws.clone();
        blocking(move || {
            // Every path the patch names may change: each is kept for an undo first.
            let resolve = |p: &str| {
                let path = ws.resolve(p).map_err(|e| e.to_string())?;
                ws.journal().before_change(&path);
                Ok(path)
            };
            apply_patch(&args.patch, &resolve)
                .map(|report| format!("patch applied:\n{report}"))
                .map_err(|e| ToolError::failed(format!("patch not applied: {e}")))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recursive_core::typed;
    use serde_json::json;

    fn setup() -> (tempfile::TempDir, tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("victim.txt"), "original\n").unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.root().join("escape")).unwrap();
        (dir, outside, ws)
    }

    async fn run(ws: &Workspace, patch: &str) -> Result<String, ToolError> {
        typed(ApplyPatch::new(ws.clone())).call(json!({"patch": patch}), &ToolContext::detached()).await
    }

    #[tokio::test]
    async fn applies_a_patch_inside_the_workspace() {
        let (_d, _o, ws) = setup();
        std::fs::write(ws.root().join("a.txt"), "one\ntwo\nthree\n").unwrap();
        let patch = "*** Begin Patch\n*** Add File: new/b.txt\n+hello\n*** Update File: a.txt\n@@\n one\n-two\n+TWO\n three\n*** End Patch\n";
        let out = run(&ws, patch).await.unwrap();
        assert_eq!(out, "patch applied:\nA new/b.txt\nM a.txt");
        assert_eq!(std::fs::read_to_string(ws.root().join("a.txt")).unwrap(), "one\nTWO\nthree\n");
        assert_eq!(std::fs::read_to_string(ws.root().join("new/b.txt")).unwrap(), "hello\n");
    }

    #[tokio::test]
    async fn refuses_paths_outside_the_workspace() {
        let (_d, outside, ws) = setup();
        let victim = outside.path().join("victim.txt");
        let hostile = [
            "../victim.txt".to_string(),
            victim.display().to_string(),
            "escape/victim.txt".to_string(),
            "escape/new.txt".to_string(),
        ];
        for p in &hostile {
            for patch in [
                format!("*** Begin Patch\n*** Add File: {p}\n+pwned\n*** End Patch\n"),
                format!("*** Begin Patch\n*** Delete File: {p}\n*** End Patch\n"),
                format!("*** Begin Patch\n*** Update File: {p}\n@@\n-original\n+pwned\n*** End Patch\n"),
            ] {
                let err = run(&ws, &patch).await.unwrap_err();
                assert!(err.to_string().contains("outside the workspace"), "{p}: {err}");
            }
        }
        std::fs::write(ws.root().join("inside.txt"), "x\n").unwrap();
        let patch =
            "*** Begin Patch\n*** Update File: inside.txt\n*** Move to: ../moved.txt\n@@\n-x\n+y\n*** End Patch\n";
        let err = run(&ws, patch).await.unwrap_err();
        assert!(err.to_string().contains("outside the workspace"), "{err}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "original\n");
        assert!(!outside.path().join("new.txt").exists());
        assert!(!outside.path().parent().unwrap().join("moved.txt").exists());
    }

    #[tokio::test]
    async fn malformed_patch_is_explained() {
        let (_d, _o, ws) = setup();
        let err = run(&ws, "not a patch").await.unwrap_err();
        assert!(err.to_string().starts_with("patch not applied: invalid patch"), "{err}");
    }
}
