//! Append-only JSON Lines files: one value per line, flushed as it is written so a crash
//! loses at most the line in flight; and reading them back with line numbers in errors.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A JSONL file opened for appending; shareable between threads.
#[derive(Debug)]
pub struct JsonlFile {
    path: PathBuf,
    file: Mutex<File>,
}

impl JsonlFile {
    /// Opens `path` for appending, creating it and its parent directories.
    pub fn append_to(path: impl AsRef<Path>) -> std::io::Result<Self> {
        let path = path.as_ref().to_path_buf();
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        Ok(Self { path, file: Mutex::new(file) })
    }

    /// Appends one value as a line and flushes it.
    pub fn write<T: Serialize + ?Sized>(&self, value: &T) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(value).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut f = self.file.lock().map_err(|_| std::io::Error::other("JSONL file lock poisoned"))?;
        f.write_all(&line)?;
        f.flush()
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Failure reading a JSONL file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JsonlReadError {
    /// The file could not be read.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A line is not the expected value.
    #[error("line {line}: {source}")]
    Json {
        /// 1-based line number.
        line: usize,
        /// The parse error.
        source: serde_json::Error,
    },
}

/// Most bytes of one line [`read_jsonl`] reads.
pub const MAX_LINE_BYTES: u64 = 64 * 1024 * 1024;

/// Reads every non-blank line of a JSONL file as a `T`. Only a regular file is read (a FIFO
/// would block, a device might never end) and no line may pass [`MAX_LINE_BYTES`].
pub fn read_jsonl<T: DeserializeOwned>(path: impl AsRef<Path>) -> Result<Vec<(usize, T)>, JsonlReadError> {
    let path = path.as_ref();
    let invalid = |kind, message: String| JsonlReadError::Io(std::io::Error::new(kind, message));
    if !std::fs::metadata(path)?.is_file() {
        return Err(invalid(std::io::ErrorKind::InvalidInput, format!("{} is not a regular file", path.display())));
    }
    let mut reader = BufReader::new(File::open(path)?);
    let mut out = Vec::new();
    for number in 1.. {
        let mut bytes = Vec::new();
        if (&mut reader).take(MAX_LINE_BYTES + 1).read_until(b'\n', &mut bytes)? == 0 {
            break;
        }
        if bytes.last() != Some(&b'\n') && bytes.len() as u64 > MAX_LINE_BYTES {
            let message = format!("line {number} of {} is longer than {MAX_LINE_BYTES} bytes", path.display());
            return Err(invalid(std::io::ErrorKind::InvalidData, message));
        }
        let line = String::from_utf8(bytes).map_err(|e| invalid(std::io::ErrorKind::InvalidData, e.to_string()))?;
        if line.trim().is_empty() {
            continue;
        }
        let value = serde_json::from_str(&line).map_err(|e| JsonlReadError::Json { line: number, source: e })?;
        out.push((number, value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_written_are_read_back_in_order_across_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b.jsonl");
        JsonlFile::append_to(&path).unwrap().write(&serde_json::json!({"n": 1})).unwrap();
        JsonlFile::append_to(&path).unwrap().write(&serde_json::json!({"n": 2})).unwrap();
        let back: Vec<(usize, serde_json::Value)> = read_jsonl(&path).unwrap();
        assert_eq!(back.iter().map(|(_, v)| v["n"].as_i64().unwrap()).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn a_bad_line_is_reported_with_its_number() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.jsonl");
        std::fs::write(&path, "{\"n\":1}\n\nnot json\n").unwrap();
        let err = read_jsonl::<serde_json::Value>(&path).unwrap_err();
        assert!(matches!(err, JsonlReadError::Json { line: 3, .. }), "{err}");
    }

    #[test]
    fn a_fifo_or_a_device_is_refused_not_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("t.jsonl");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success(), "mkfifo");
        for path in [fifo.as_path(), Path::new("/dev/zero")] {
            let err = read_jsonl::<serde_json::Value>(path).unwrap_err();
            assert!(err.to_string().contains("not a regular file"), "{err}");
        }
    }
}
