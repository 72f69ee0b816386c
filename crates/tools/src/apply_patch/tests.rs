//! Unit tests for parsing and applying V4A patches.

use std::fs;
use std::path::{Path, PathBuf};

use tempfile::TempDir;

use super::*;

/// A temp dir holding `files` (path, contents).
fn dir_with(files: &[(&str, &[u8])]) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, contents) in files {
        let full = dir.path().join(path);
        fs::create_dir_all(full.parent().unwrap()).unwrap();
        fs::write(full, contents).unwrap();
    }
    dir
}

fn read(dir: &TempDir, path: &str) -> String {
    fs::read_to_string(dir.path().join(path)).unwrap()
}

fn exists(dir: &TempDir, path: &str) -> bool {
    dir.path().join(path).exists()
}

/// Wraps hunk lines in the begin/end markers.
fn patch(body: &str) -> String {
    format!("*** Begin Patch\n{body}*** End Patch\n")
}

fn apply(dir: &TempDir, body: &str) -> Result<PatchReport, PatchError> {
    apply_patch_in_dir(&patch(body), dir.path())
}

fn parse_error(text: &str) -> (usize, String) {
    match parse_patch(text) {
        Err(PatchError::Parse { line, message }) => (line, message),
        other => panic!("expected a parse error, got {other:?}"),
    }
}

fn file_error(result: Result<PatchReport, PatchError>) -> (String, String, Option<usize>) {
    match result {
        Err(PatchError::File { path, problem, line }) => (path, problem, line),
        other => panic!("expected a file error, got {other:?}"),
    }
}

// ---- parsing ----

#[test]
fn parse_builds_hunks_chunks_and_line_numbers() {
    let text = patch(
        "*** Add File: a.txt\n+one\n+two\n*** Delete File: b.txt\n*** Update File: c.txt\n*** Move to: d/c.txt\n\
         @@ class A\n@@ def m\n-old\n+new\n ctx\n*** End of File\n",
    );
    let parsed = parse_patch(&text).unwrap();
    assert_eq!(
        parsed.hunks,
        vec![
            Hunk::Add { path: "a.txt".into(), contents: "one\ntwo\n".into(), line: 2 },
            Hunk::Delete { path: "b.txt".into(), line: 5 },
            Hunk::Update {
                path: "c.txt".into(),
                move_to: Some("d/c.txt".into()),
                chunks: vec![Chunk {
                    anchors: vec!["class A".into(), "def m".into()],
                    lines: vec![
                        ChangeLine::Remove("old".into()),
                        ChangeLine::Add("new".into()),
                        ChangeLine::Context("ctx".into()),
                    ],
                    end_of_file: true,
                    line: 8,
                }],
                line: 6,
            },
        ]
    );
    assert_eq!(parsed.paths(), vec!["a.txt", "b.txt", "c.txt", "d/c.txt"]);
}

#[test]
fn markers_are_matched_after_trimming_whitespace() {
    let dir = dir_with(&[("a.txt", b"one\ntwo\nthree\n"), ("gone.txt", b"x\n")]);
    let text = "  *** Begin Patch  \n\
                \t*** Update File:   a.txt  \n\
                  @@   \n\
                -two\n\
                +TWO\n\
                \x20*** End of File \n\
                \x20 *** Delete File: gone.txt \n\
                *** Add File: new.txt\t\n\
                +hi\n\
                \x20 *** End Patch \t\n";
    // "*** End of File" here is padded, but the chunk before it must then match at the end of the file.
    let result = apply_patch_in_dir(text, dir.path());
    let (path, problem, _) = file_error(result);
    assert_eq!(path, "a.txt");
    assert!(problem.contains("not at its end"), "{problem}");

    let text = "  *** Begin Patch  \n\
                \t*** Update File:   a.txt  \n\
                  @@   \n\
                -three\n\
                +THREE\n\
                \x20*** End of File \n\
                \x20 *** Delete File: gone.txt \n\
                *** Add File: new.txt\t\n\
                +hi\n\
                \x20 *** End Patch \t\n";
    let report = apply_patch_in_dir(text, dir.path()).unwrap();
    assert_eq!(report.to_string(), "M a.txt\nD gone.txt\nA new.txt");
    assert_eq!(read(&dir, "a.txt"), "one\ntwo\nTHREE\n");
    assert!(!exists(&dir, "gone.txt"));
    assert_eq!(read(&dir, "new.txt"), "hi\n");
}

#[test]
fn patch_text_with_crlf_line_endings_is_accepted() {
    let dir = dir_with(&[("a.txt", b"one\ntwo\n")]);
    let text = "*** Begin Patch\r\n*** Update File: a.txt\r\n@@\r\n-two\r\n+2\r\n*** End Patch\r\n";
    apply_patch_in_dir(text, dir.path()).unwrap();
    assert_eq!(read(&dir, "a.txt"), "one\n2\n");
}

#[test]
fn first_chunk_may_omit_its_at_at_line() {
    let dir = dir_with(&[("a.txt", b"alpha\nbeta\ngamma\n")]);
    apply(&dir, "*** Update File: a.txt\n alpha\n-beta\n+BETA\n").unwrap();
    assert_eq!(read(&dir, "a.txt"), "alpha\nBETA\ngamma\n");
}

#[test]
fn change_after_end_of_file_must_start_with_at_at() {
    let (line, message) = parse_error(&patch("*** Update File: a.txt\n-x\n+y\n*** End of File\n-z\n"));
    assert_eq!(line, 6);
    assert!(message.contains("must start with '@@'"), "{message}");
}

#[test]
fn empty_patch_is_rejected() {
    let (line, message) = parse_error("*** Begin Patch\n*** End Patch\n");
    assert_eq!(line, 2);
    assert!(message.contains("empty"), "{message}");

    let (line, message) = parse_error("");
    assert_eq!(line, 1);
    assert!(message.contains("empty"), "{message}");
}

#[test]
fn patch_without_begin_marker_is_rejected() {
    let (line, message) = parse_error("*** Update File: a.txt\n-x\n+y\n*** End Patch\n");
    assert_eq!(line, 1);
    assert!(message.contains("*** Begin Patch"), "{message}");
}

#[test]
fn patch_without_end_marker_is_rejected() {
    let (line, message) = parse_error("*** Begin Patch\n*** Add File: a.txt\n+x\n");
    assert_eq!(line, 4);
    assert!(message.contains("*** End Patch"), "{message}");
}

#[test]
fn text_after_end_marker_is_rejected() {
    let (line, message) = parse_error("*** Begin Patch\n*** Delete File: a\n*** End Patch\n\ntrailing junk\n");
    assert_eq!(line, 5);
    assert!(message.contains("trailing junk"), "{message}");
}

#[test]
fn unknown_hunk_header_is_rejected_with_its_line() {
    let dir = dir_with(&[("foo", b"stable\n")]);
    let result = apply(&dir, "*** Frobnicate File: foo\n");
    let Err(PatchError::Parse { line, message }) = result else { panic!("expected a parse error: {result:?}") };
    assert_eq!(line, 2);
    assert!(message.contains("'*** Frobnicate File: foo' is not a valid hunk header"), "{message}");
    assert_eq!(read(&dir, "foo"), "stable\n");
}

#[test]
fn add_file_line_without_plus_is_rejected_with_a_hint() {
    let (line, message) = parse_error(&patch("*** Add File: new.txt\n+ok\nmissing plus\n"));
    assert_eq!(line, 4);
    assert!(message.contains("must start with '+'") && message.contains("new.txt"), "{message}");
}

#[test]
fn update_line_without_prefix_is_rejected() {
    let (line, message) = parse_error(&patch("*** Update File: a.txt\n@@\n-x\nno prefix\n"));
    assert_eq!(line, 5);
    assert!(message.contains("a.txt") && message.contains("no prefix"), "{message}");
}

#[test]
fn update_without_changes_is_rejected_naming_the_file() {
    let dir = dir_with(&[("foo.txt", b"stable\n")]);
    let result = apply(&dir, "*** Update File: foo.txt\n");
    let Err(PatchError::Parse { line, message }) = result else { panic!("expected a parse error: {result:?}") };
    assert_eq!(line, 2);
    assert!(message.contains("foo.txt") && message.contains("no changes"), "{message}");
    assert_eq!(read(&dir, "foo.txt"), "stable\n");
}

#[test]
fn at_at_without_change_lines_is_rejected() {
    let (line, message) = parse_error(&patch("*** Update File: a.txt\n@@\n-x\n+y\n@@ tail\n"));
    assert_eq!(line, 6);
    assert!(message.contains("not followed by any change lines"), "{message}");
}

#[test]
fn move_to_must_follow_the_update_header() {
    let (line, message) = parse_error(&patch("*** Update File: a.txt\n@@\n-x\n+y\n*** Move to: b.txt\n"));
    assert_eq!(line, 6);
    assert!(message.contains("*** Move to:"), "{message}");
}

#[test]
fn header_without_path_is_rejected() {
    let (line, message) = parse_error(&patch("*** Delete File:   \n"));
    assert_eq!(line, 2);
    assert!(message.contains("needs a path"), "{message}");
}

// ---- locating changes ----

#[test]
fn single_anchor_selects_the_occurrence_after_it() {
    let dir = dir_with(&[("a.rs", b"fn a() {\n    x();\n}\nfn b() {\n    x();\n}\n")]);
    apply(&dir, "*** Update File: a.rs\n@@ fn b() {\n-    x();\n+    y();\n").unwrap();
    assert_eq!(read(&dir, "a.rs"), "fn a() {\n    x();\n}\nfn b() {\n    y();\n}\n");
}

#[test]
fn chained_anchors_narrow_the_position() {
    let file = "class A:\n    def m(self):\n        return 1\nclass B:\n    def n(self):\n        return 1\n    \
                def m(self):\n        return 1\n";
    let dir = dir_with(&[("a.py", file.as_bytes())]);
    apply(&dir, "*** Update File: a.py\n@@ class B:\n@@     def m(self):\n-        return 1\n+        return 2\n")
        .unwrap();
    let expected = "class A:\n    def m(self):\n        return 1\nclass B:\n    def n(self):\n        return 1\n    \
                    def m(self):\n        return 2\n";
    assert_eq!(read(&dir, "a.py"), expected);
}

#[test]
fn anchor_matches_a_line_containing_its_text() {
    let dir = dir_with(&[("a.rs", b"fn a() {\n    x();\n}\nfn b(arg: u8) {\n    x();\n}\n")]);
    apply(&dir, "*** Update File: a.rs\n@@ fn b(\n-    x();\n+    y();\n").unwrap();
    assert_eq!(read(&dir, "a.rs"), "fn a() {\n    x();\n}\nfn b(arg: u8) {\n    y();\n}\n");
}

#[test]
fn missing_anchor_fails_naming_it() {
    let dir = dir_with(&[("a.txt", b"one\n")]);
    let (path, problem, line) = file_error(apply(&dir, "*** Update File: a.txt\n@@ nowhere\n-one\n+1\n"));
    assert_eq!(path, "a.txt");
    assert_eq!(line, Some(3));
    assert!(problem.contains("@@ nowhere"), "{problem}");
}

#[test]
fn anchor_line_repeated_as_first_old_line_is_accepted() {
    let dir = dir_with(&[("a.rs", b"fn a() {}\nfn b() {}\n")]);
    apply(&dir, "*** Update File: a.rs\n@@ fn b() {}\n-fn b() {}\n+fn c() {}\n").unwrap();
    assert_eq!(read(&dir, "a.rs"), "fn a() {}\nfn c() {}\n");
}

#[test]
fn unified_diff_range_header_counts_as_a_bare_at_at() {
    let dir = dir_with(&[("a.txt", b"one\ntwo\n")]);
    apply(&dir, "*** Update File: a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+2\n").unwrap();
    assert_eq!(read(&dir, "a.txt"), "one\n2\n");
}

#[test]
fn old_lines_with_trailing_whitespace_differences_match() {
    let dir = dir_with(&[("a.txt", b"keep   \nold\t\nnext\n")]);
    apply(&dir, "*** Update File: a.txt\n keep\n-old\n+new\n").unwrap();
    // The context line keeps its own text, trailing spaces included.
    assert_eq!(read(&dir, "a.txt"), "keep   \nnew\nnext\n");
}

#[test]
fn old_lines_with_leading_whitespace_differences_match() {
    let dir = dir_with(&[("a.py", b"def f():\n    return 1\n")]);
    apply(&dir, "*** Update File: a.py\n def f():\n-  return 1\n+    return 2\n").unwrap();
    assert_eq!(read(&dir, "a.py"), "def f():\n    return 2\n");
}

#[test]
fn exact_match_is_preferred_over_whitespace_tolerant_match() {
    let dir = dir_with(&[("a.txt", b"  x\ny\nx\n")]);
    apply(&dir, "*** Update File: a.txt\n-x\n+z\n").unwrap();
    assert_eq!(read(&dir, "a.txt"), "  x\ny\nz\n");
}

#[test]
fn typographic_punctuation_matches_ascii() {
    let dir = dir_with(&[("a.txt", "say \u{201C}hi\u{201D} \u{2014} it\u{2019}s\n".as_bytes())]);
    apply(&dir, "*** Update File: a.txt\n-say \"hi\" - it's\n+bye\n").unwrap();
    assert_eq!(read(&dir, "a.txt"), "bye\n");
}

#[test]
fn lone_blank_line_counts_as_empty_context_line() {
    let dir = dir_with(&[("a.txt", b"a\n\nb\na\nb\n")]);
    // With the blank line as an empty context line only the first "a" matches; were it dropped, the change would
    // hit the adjacent "a", "b" pair further down.
    apply(&dir, "*** Update File: a.txt\n@@\n a\n\n-b\n+B\n").unwrap();
    assert_eq!(read(&dir, "a.txt"), "a\n\nB\na\nb\n");
}

#[test]
fn blank_lines_around_hunks_are_not_context() {
    let dir = dir_with(&[("a.txt", b"x\ny\n")]);
    apply(&dir, "*** Update File: a.txt\n\n@@\n-y\n+Y\n\n\n*** Add File: b.txt\n+b\n\n").unwrap();
    assert_eq!(read(&dir, "a.txt"), "x\nY\n");
    assert_eq!(read(&dir, "b.txt"), "b\n");
}

#[test]
fn pure_addition_chunk_appends_at_end_of_file() {
    let dir = dir_with(&[("a.txt", b"line1\nline2\n")]);
    apply(&dir, "*** Update File: a.txt\n@@\n+added 1\n+added 2\n").unwrap();
    assert_eq!(read(&dir, "a.txt"), "line1\nline2\nadded 1\nadded 2\n");
}

#[test]
fn anchored_pure_addition_still_appends_at_end_of_file() {
    let dir = dir_with(&[("a.txt", b"alpha\nbeta\ngamma\n")]);
    apply(&dir, "*** Update File: a.txt\n@@ alpha\n+appended\n").unwrap();
    assert_eq!(read(&dir, "a.txt"), "alpha\nbeta\ngamma\nappended\n");
}

#[test]
fn pure_addition_at_end_does_not_block_later_chunks() {
    let dir = dir_with(&[("a.txt", b"a\nb\n")]);
    apply(&dir, "*** Update File: a.txt\n@@\n+tail\n@@\n-a\n+A\n").unwrap();
    assert_eq!(read(&dir, "a.txt"), "A\nb\ntail\n");
}

#[test]
fn end_of_file_marker_anchors_the_chunk_at_the_end() {
    let dir = dir_with(&[("a.txt", b"x\ny\nx\n")]);
    apply(&dir, "*** Update File: a.txt\n@@\n-x\n+z\n*** End of File\n").unwrap();
    assert_eq!(read(&dir, "a.txt"), "x\ny\nz\n");
}

#[test]
fn end_of_file_chunk_fails_when_its_lines_are_not_at_the_end() {
    let dir = dir_with(&[("a.txt", b"x\ny\n")]);
    let (path, problem, _) = file_error(apply(&dir, "*** Update File: a.txt\n@@\n-x\n+z\n*** End of File\n"));
    assert_eq!(path, "a.txt");
    assert!(problem.contains("not at its end"), "{problem}");
    assert_eq!(read(&dir, "a.txt"), "x\ny\n");
}

#[test]
fn several_chunks_apply_in_file_order() {
    let dir = dir_with(&[("a.txt", b"1\n2\n3\n4\n")]);
    apply(&dir, "*** Update File: a.txt\n@@\n-2\n+two\n@@\n-4\n+four\n").unwrap();
    assert_eq!(read(&dir, "a.txt"), "1\ntwo\n3\nfour\n");
}

#[test]
fn chunks_out_of_file_order_are_reported() {
    let dir = dir_with(&[("a.txt", b"1\n2\n3\n4\n")]);
    let (_, problem, line) = file_error(apply(&dir, "*** Update File: a.txt\n@@\n-4\n+four\n@@\n-2\n+two\n"));
    assert_eq!(line, Some(6));
    assert!(problem.contains("only found before"), "{problem}");
    assert_eq!(read(&dir, "a.txt"), "1\n2\n3\n4\n");
}

#[test]
fn deletion_only_chunk_removes_lines() {
    let dir = dir_with(&[("a.txt", b"1\n2\n3\n")]);
    apply(&dir, "*** Update File: a.txt\n@@\n-2\n").unwrap();
    assert_eq!(read(&dir, "a.txt"), "1\n3\n");
}

// ---- failures ----

#[test]
fn update_of_missing_file_fails_naming_the_file() {
    let dir = dir_with(&[("foo.txt", b"stable\n")]);
    let (path, problem, line) = file_error(apply(&dir, "*** Update File: missing.txt\n@@\n-old\n+new\n"));
    assert_eq!(path, "missing.txt");
    assert_eq!(line, Some(2));
    assert!(problem.contains("does not exist"), "{problem}");
    assert!(!exists(&dir, "missing.txt"));
}

#[test]
fn delete_of_missing_file_fails_naming_the_file() {
    let dir = dir_with(&[("foo.txt", b"stable\n")]);
    let result = apply(&dir, "*** Delete File: missing.txt\n");
    assert!(result.as_ref().is_err_and(|e| e.to_string().starts_with("missing.txt: ")), "{result:?}");
    let (path, problem, _) = file_error(result);
    assert_eq!(path, "missing.txt");
    assert!(problem.contains("does not exist"), "{problem}");
}

#[test]
fn missing_context_fails_naming_the_file_and_patch_line() {
    let dir = dir_with(&[("modify.txt", b"line1\nline2\n")]);
    let result = apply(&dir, "*** Update File: modify.txt\n@@\n-missing\n+changed\n");
    let (path, problem, line) = file_error(result);
    assert_eq!(path, "modify.txt");
    assert_eq!(line, Some(3));
    assert!(problem.contains("could not find") && problem.contains("patch line 3") && problem.contains("missing"));
    assert_eq!(read(&dir, "modify.txt"), "line1\nline2\n");
}

#[test]
fn deleting_a_directory_fails() {
    let dir = dir_with(&[("sub/inner.txt", b"x\n")]);
    let (path, problem, _) = file_error(apply(&dir, "*** Delete File: sub\n"));
    assert_eq!(path, "sub");
    assert!(problem.contains("directory"), "{problem}");
    assert_eq!(read(&dir, "sub/inner.txt"), "x\n");
}

#[test]
fn updating_a_non_utf8_file_fails_clearly() {
    let dir = dir_with(&[("bin.dat", b"ok\n\xff\xfe\n")]);
    let (path, problem, _) = file_error(apply(&dir, "*** Update File: bin.dat\n-ok\n+no\n"));
    assert_eq!(path, "bin.dat");
    assert!(problem.contains("not valid UTF-8"), "{problem}");
    assert_eq!(fs::read(dir.path().join("bin.dat")).unwrap(), b"ok\n\xff\xfe\n");
}

#[test]
fn later_failure_keeps_earlier_hunks_and_lists_them() {
    let dir = dir_with(&[("bar.txt", b"b\n")]);
    let result =
        apply(&dir, "*** Add File: foo.txt\n+foo\n*** Update File: bar.txt\n-b\n+B\n*** Delete File: nope.txt\n");
    let err = result.unwrap_err();
    assert_eq!(
        err.applied(),
        [
            AppliedChange { kind: FileChange::Added, path: "foo.txt".into() },
            AppliedChange { kind: FileChange::Modified, path: "bar.txt".into() },
        ]
    );
    let message = err.to_string();
    assert!(message.starts_with("nope.txt: "), "{message}");
    assert!(message.ends_with("\napplied before the failure: A foo.txt, M bar.txt"), "{message}");
    let PatchError::PartiallyApplied { error, .. } = err else { panic!("expected PartiallyApplied") };
    assert!(matches!(*error, PatchError::File { ref path, .. } if path == "nope.txt"));
    assert_eq!(read(&dir, "foo.txt"), "foo\n");
    assert_eq!(read(&dir, "bar.txt"), "B\n");
}

#[test]
fn first_hunk_failure_is_not_wrapped() {
    let dir = dir_with(&[]);
    let err = apply(&dir, "*** Delete File: nope.txt\n*** Add File: later.txt\n+x\n").unwrap_err();
    assert!(matches!(err, PatchError::File { .. }), "{err:?}");
    assert!(err.applied().is_empty());
    assert!(!exists(&dir, "later.txt"));
}

// ---- writing files ----

#[test]
fn add_file_overwrites_existing_file_and_creates_parent_dirs() {
    let dir = dir_with(&[("dup.txt", b"old content\n")]);
    let report =
        apply(&dir, "*** Add File: dup.txt\n+new content\n*** Add File: deep/er/new.txt\n+x\n+\n+y\n").unwrap();
    assert_eq!(report.to_string(), "A dup.txt\nA deep/er/new.txt");
    assert_eq!(read(&dir, "dup.txt"), "new content\n");
    assert_eq!(read(&dir, "deep/er/new.txt"), "x\n\ny\n");
}

#[test]
fn add_file_keeps_blank_lines_between_plus_lines() {
    let dir = dir_with(&[]);
    apply(&dir, "*** Add File: a.txt\n+one\n\n+three\n").unwrap();
    assert_eq!(read(&dir, "a.txt"), "one\n\nthree\n");
}

#[test]
fn move_overwrites_existing_destination_and_creates_parent_dirs() {
    let dir = dir_with(&[("old/name.txt", b"old content\n"), ("taken.txt", b"taken\n")]);
    let report = apply(
        &dir,
        "*** Update File: old/name.txt\n*** Move to: new/dir/name.txt\n@@\n-old content\n+new content\n\
         *** Update File: new/dir/name.txt\n*** Move to: taken.txt\n@@\n-new content\n+final\n",
    )
    .unwrap();
    assert_eq!(report.to_string(), "M new/dir/name.txt\nM taken.txt");
    assert!(!exists(&dir, "old/name.txt"));
    assert!(dir.path().join("old").is_dir());
    assert!(!exists(&dir, "new/dir/name.txt"));
    assert_eq!(read(&dir, "taken.txt"), "final\n");
}

#[test]
fn report_lists_changes_in_hunk_order() {
    let dir = dir_with(&[("gone.txt", b"g\n"), ("src.txt", b"s\n")]);
    let report = apply(
        &dir,
        "*** Add File: new.txt\n+n\n*** Delete File: gone.txt\n*** Update File: src.txt\n*** Move to: dst.txt\n-s\n+S\n",
    )
    .unwrap();
    assert_eq!(
        report.changes,
        vec![
            AppliedChange { kind: FileChange::Added, path: "new.txt".into() },
            AppliedChange { kind: FileChange::Deleted, path: "gone.txt".into() },
            AppliedChange { kind: FileChange::Modified, path: "dst.txt".into() },
        ]
    );
    assert_eq!(report.to_string(), "A new.txt\nD gone.txt\nM dst.txt");
}

#[test]
fn updated_file_gets_a_trailing_newline() {
    let dir = dir_with(&[("a.txt", b"first\nlast without newline")]);
    apply(&dir, "*** Update File: a.txt\n@@\n-first\n+FIRST\n").unwrap();
    assert_eq!(read(&dir, "a.txt"), "FIRST\nlast without newline\n");
}

#[test]
fn a_bare_cr_is_a_line_ending_too() {
    let dir = dir_with(&[("a.txt", b"one\r\ntwo\rthree\nfour\r\n")]);
    apply(&dir, "*** Update File: a.txt\n@@\n-three\n+THREE\n").unwrap();
    assert_eq!(read(&dir, "a.txt"), "one\r\ntwo\rTHREE\r\nfour\r\n");
}

#[test]
fn a_context_line_ending_in_a_bare_cr_keeps_it() {
    // codex's mixed-line-ending scenario: only the new line takes the file's ending (CRLF).
    let dir = dir_with(&[("a.txt", b"one\r\ntwo\rthree\nfour\r\n")]);
    apply(&dir, "*** Update File: a.txt\n@@\n two\n-three\n+THREE\n four\n").unwrap();
    assert_eq!(read(&dir, "a.txt"), "one\r\ntwo\rTHREE\r\nfour\r\n");
}

#[test]
fn crlf_line_endings_are_preserved() {
    let dir = dir_with(&[("a.txt", b"one\r\ntwo\r\nthree\r\n")]);
    apply(&dir, "*** Update File: a.txt\n one\n-two\n+TWO\n+extra\n@@\n+appended\n").unwrap();
    assert_eq!(read(&dir, "a.txt"), "one\r\nTWO\r\nextra\r\nthree\r\nappended\r\n");
}

#[test]
fn crlf_file_without_final_newline_gets_a_crlf_one() {
    let dir = dir_with(&[("a.txt", b"a\r\nb\r\nc")]);
    apply(&dir, "*** Update File: a.txt\n@@\n+d\n").unwrap();
    assert_eq!(read(&dir, "a.txt"), "a\r\nb\r\nc\r\nd\r\n");
}

#[test]
fn mixed_line_endings_outside_the_patched_region_are_kept() {
    let dir = dir_with(&[("a.txt", b"top\nkeep\r\na\r\nb\nc\r\nd\ne\r\nlast\n")]);
    // The file's first ending (LF) is its style: new lines are written with it, as codex does; every
    // untouched line, the chunk's context lines included, keeps its own ending.
    apply(&dir, "*** Update File: a.txt\n a\n-b\n+B\n c\n+c2\n d\n").unwrap();
    assert_eq!(read(&dir, "a.txt"), "top\nkeep\r\na\r\nB\nc\r\nc2\nd\ne\r\nlast\n");
}

#[test]
fn new_lines_take_the_first_line_ending_of_the_file() {
    let dir = dir_with(&[("a.txt", b"x\r\ny\nz\n")]);
    apply(&dir, "*** Update File: a.txt\n-x\n-y\n+X\n+Y\n+Y2\n").unwrap();
    assert_eq!(read(&dir, "a.txt"), "X\r\nY\r\nY2\r\nz\n");
}

#[test]
fn utf8_content_with_emoji_and_cjk_is_updated() {
    let dir = dir_with(&[("u.txt", "héllo 🌍\n你好，世界\nend\n".as_bytes())]);
    apply(&dir, "*** Update File: u.txt\n héllo 🌍\n-你好，世界\n+こんにちは 🌸\n*** Add File: 新.txt\n+🚀 ok\n")
        .unwrap();
    assert_eq!(read(&dir, "u.txt"), "héllo 🌍\nこんにちは 🌸\nend\n");
    assert_eq!(read(&dir, "新.txt"), "🚀 ok\n");
}

#[test]
fn byte_order_mark_is_kept() {
    let dir = dir_with(&[("a.txt", "\u{feff}first\nsecond\n".as_bytes())]);
    apply(&dir, "*** Update File: a.txt\n-first\n+FIRST\n").unwrap();
    assert_eq!(read(&dir, "a.txt"), "\u{feff}FIRST\nsecond\n");
}

// ---- path resolution ----

#[test]
fn resolver_maps_every_patch_path_including_absolute_ones() {
    let dir = dir_with(&[("root/a.txt", b"a\n")]);
    let root = dir.path().join("root");
    let seen = std::cell::RefCell::new(Vec::new());
    let resolve = |p: &str| -> Result<PathBuf, String> {
        seen.borrow_mut().push(p.to_string());
        Ok(root.join(p.trim_start_matches("/virtual/")))
    };
    let text = patch("*** Update File: /virtual/a.txt\n*** Move to: b.txt\n-a\n+A\n*** Add File: /virtual/c.txt\n+c\n");
    let report = apply_patch(&text, &resolve).unwrap();
    assert_eq!(report.to_string(), "M b.txt\nA /virtual/c.txt");
    assert_eq!(*seen.borrow(), vec!["/virtual/a.txt", "b.txt", "/virtual/c.txt"]);
    assert_eq!(fs::read_to_string(root.join("b.txt")).unwrap(), "A\n");
    assert_eq!(fs::read_to_string(root.join("c.txt")).unwrap(), "c\n");
}

#[test]
fn resolver_refusal_fails_the_hunk_with_its_reason() {
    let dir = dir_with(&[]);
    let base = dir.path().to_path_buf();
    let resolve = |p: &str| -> Result<PathBuf, String> {
        if p.starts_with("..") { Err("path escapes the workspace".to_string()) } else { Ok(base.join(p)) }
    };
    let text = patch("*** Add File: ok.txt\n+ok\n*** Add File: ../escape.txt\n+bad\n");
    let err = apply_patch(&text, &resolve).unwrap_err();
    let message = err.to_string();
    assert!(message.starts_with("../escape.txt: path escapes the workspace"), "{message}");
    assert!(message.contains("applied before the failure: A ok.txt"), "{message}");
    assert!(!Path::new(&base).join("../escape.txt").exists());
}

#[test]
fn plain_resolver_joins_relative_paths_and_keeps_absolute_ones() {
    let resolve = resolve_in_dir(Path::new("/base"));
    assert_eq!(resolve("a/b.txt").unwrap(), PathBuf::from("/base/a/b.txt"));
    assert_eq!(resolve("/abs/c.txt").unwrap(), PathBuf::from("/abs/c.txt"));
    assert!(resolve("").is_err());
}
