//! Append-only JSON Lines files: one value per line, flushed as it is written so a crash
//! loses at most the line in flight; and reading them back with line numbers in errors — a
//! last line cut short by a kill skipped and reported ([`read_jsonl_records`]), never a reason
//! to refuse the file.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
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
    #[error("line {line}: {message}")]
    Json {
        /// 1-based line number.
        line: usize,
        /// Why it is not.
        message: String,
    },
    /// The last line was cut short by an interrupted write (only [`read_jsonl`], which reads
    /// whole files, calls this an error; [`read_jsonl_records`] skips it and says so).
    #[error("line {}: the last record is cut short: {}", .0.line, .0.reason)]
    Cut(CutRecord),
}

/// An append-only list of records (one JSON text each) kept in a store rather than in a file
/// the run writes: a run's transcript or log as a slot of the store. An append is committed
/// before it returns, so a run goes on only once its record is kept; a record is never cut
/// short (a kill loses at most the one being appended).
pub trait StoredRecords: Send + Sync + std::fmt::Debug {
    /// Appends one record.
    fn append(&self, record: &str) -> std::io::Result<()>;
    /// Every record, in order.
    fn records(&self) -> std::io::Result<Vec<String>>;
}

/// Records kept in memory ([`StoredRecords`] for tests and library use without a store).
#[derive(Debug, Default)]
pub struct MemoryRecords(std::sync::Mutex<Vec<String>>);

impl StoredRecords for MemoryRecords {
    fn append(&self, record: &str) -> std::io::Result<()> {
        let mut records = self.0.lock().map_err(|_| std::io::Error::other("the records' lock is poisoned"))?;
        records.push(record.to_string());
        Ok(())
    }

    fn records(&self) -> std::io::Result<Vec<String>> {
        Ok(self.0.lock().map_err(|_| std::io::Error::other("the records' lock is poisoned"))?.clone())
    }
}

/// Most bytes of one line [`read_jsonl`] reads.
pub const MAX_LINE_BYTES: u64 = 64 * 1024 * 1024;

/// The last record of a file, cut short by an interrupted write (a process killed while it
/// appended): skipped by [`read_jsonl_records`], named by its line and bytes so the reader can
/// say what was dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutRecord {
    /// The file.
    pub path: PathBuf,
    /// The 1-based line number of the cut record.
    pub line: usize,
    /// Where the cut record starts (every byte before it is whole records).
    pub offset: u64,
    /// How many bytes it has.
    pub bytes: usize,
    /// Why it does not read (the parse error).
    pub reason: String,
    /// Its first characters, for the warning.
    pub preview: String,
}

impl std::fmt::Display for CutRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: the last record was cut short by an interrupted write and is skipped ({} bytes dropped: `{}`; {})",
            self.path.display(),
            self.line,
            self.bytes,
            self.preview,
            self.reason
        )
    }
}

/// The records of a JSONL file as [`read_jsonl_records`] reads them.
#[derive(Debug)]
pub struct JsonlRecords<T> {
    /// Every whole record with its 1-based line number, in order.
    pub records: Vec<(usize, T)>,
    /// The last record, when a kill cut it short.
    pub cut: Option<CutRecord>,
    /// The last whole record has no newline after it (cut right before it).
    pub unterminated: bool,
}

impl<T> JsonlRecords<T> {
    /// Makes `path` end after its last whole record, with a newline, so appending to it goes on
    /// after whole lines: the cut record is cut off the file, a missing final newline added.
    pub fn repair(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        if self.cut.is_none() && !self.unterminated {
            return Ok(());
        }
        let mut file = OpenOptions::new().write(true).open(path)?;
        if let Some(cut) = &self.cut {
            file.set_len(cut.offset)?;
        }
        if self.unterminated {
            file.seek(SeekFrom::End(0))?;
            file.write_all(b"\n")?;
        }
        file.sync_data()
    }
}

/// Reads every non-blank line of a JSONL file as a `T`. Only a regular file is read (a FIFO
/// would block, a device might never end) and no line may pass [`MAX_LINE_BYTES`].
///
/// This is the one rule for a file a kill may have cut: an unreadable LAST record (torn JSON,
/// a torn UTF-8 character) is what a process killed while appending leaves, so it is skipped
/// and returned as [`JsonlRecords::cut`] for the reader to report; an unreadable record before
/// the last is damage, not a kill, and an error naming its line.
pub fn read_jsonl_records<T: DeserializeOwned>(path: impl AsRef<Path>) -> Result<JsonlRecords<T>, JsonlReadError> {
    let path = path.as_ref();
    let invalid = |kind, message: String| JsonlReadError::Io(std::io::Error::new(kind, message));
    if !std::fs::metadata(path)?.is_file() {
        return Err(invalid(std::io::ErrorKind::InvalidInput, format!("{} is not a regular file", path.display())));
    }
    let mut reader = BufReader::new(File::open(path)?);
    let mut out = JsonlRecords { records: Vec::new(), cut: None, unterminated: false };
    let mut offset = 0u64;
    for number in 1.. {
        let mut bytes = Vec::new();
        if (&mut reader).take(MAX_LINE_BYTES + 1).read_until(b'\n', &mut bytes)? == 0 {
            break;
        }
        let terminated = bytes.last() == Some(&b'\n');
        if !terminated && bytes.len() as u64 > MAX_LINE_BYTES {
            let message = format!("line {number} of {} is longer than {MAX_LINE_BYTES} bytes", path.display());
            return Err(invalid(std::io::ErrorKind::InvalidData, message));
        }
        let start = offset;
        offset += bytes.len() as u64;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        // A record after an unreadable one: that one was not the last, so it is damage.
        if let Some(cut) = out.cut.take() {
            return Err(JsonlReadError::Json { line: cut.line, message: cut.reason });
        }
        match parse_line::<T>(&bytes) {
            Ok(value) => {
                out.records.push((number, value));
                out.unterminated = !terminated;
            }
            Err(reason) => out.cut = Some(cut_record(path, number, start, &bytes, reason)),
        }
    }
    if out.cut.is_some() {
        out.unterminated = false;
    }
    Ok(out)
}

fn parse_line<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let line = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
    serde_json::from_str(line).map_err(|e| e.to_string())
}

fn cut_record(path: &Path, line: usize, offset: u64, bytes: &[u8], reason: String) -> CutRecord {
    let text = String::from_utf8_lossy(bytes);
    CutRecord {
        path: path.to_path_buf(),
        line,
        offset,
        bytes: bytes.len(),
        reason,
        preview: crate::text::clip_chars(text.trim(), 60),
    }
}

/// Reads every non-blank line of a JSONL file as a `T`, all of them whole: a cut last record is
/// an error too ([`JsonlReadError::Cut`]). A reader that goes on from the file (a resume) uses
/// [`read_jsonl_records`], which skips it.
pub fn read_jsonl<T: DeserializeOwned>(path: impl AsRef<Path>) -> Result<Vec<(usize, T)>, JsonlReadError> {
    let read = read_jsonl_records(path)?;
    match read.cut {
        Some(cut) => Err(JsonlReadError::Cut(cut)),
        None => Ok(read.records),
    }
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
    fn a_bad_line_before_the_last_is_an_error_with_its_number() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.jsonl");
        std::fs::write(&path, "{\"n\":1}\n\nnot json\n{\"n\":2}\n").unwrap();
        for err in [
            read_jsonl::<serde_json::Value>(&path).unwrap_err(),
            read_jsonl_records::<serde_json::Value>(&path).unwrap_err(),
        ] {
            assert!(matches!(err, JsonlReadError::Json { line: 3, .. }), "{err}");
        }
    }

    #[test]
    fn a_cut_last_record_is_skipped_and_named_then_cut_off_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.jsonl");
        let whole = "{\"n\":1}\n{\"n\":2}\n";
        let torn = "{\"n\":3, \"text\": \"hal";
        std::fs::write(&path, format!("{whole}{torn}")).unwrap();
        let read = read_jsonl_records::<serde_json::Value>(&path).unwrap();
        assert_eq!(read.records.len(), 2);
        let cut = read.cut.clone().unwrap();
        assert_eq!((cut.line, cut.offset, cut.bytes), (3, whole.len() as u64, torn.len()));
        let warning = cut.to_string();
        let dropped = format!("{} bytes", torn.len());
        assert!(warning.contains("x.jsonl:3") && warning.contains(&dropped) && warning.contains("hal"), "{warning}");
        assert!(
            matches!(read_jsonl::<serde_json::Value>(&path), Err(JsonlReadError::Cut(_))),
            "strict reading refuses it"
        );
        read.repair(&path).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), whole, "appends go on after whole lines");
    }

    #[test]
    fn a_torn_utf8_character_in_the_last_record_is_a_cut_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.jsonl");
        let mut bytes = b"{\"n\":1}\n{\"t\":\"".to_vec();
        bytes.extend_from_slice(&"é".as_bytes()[..1]);
        std::fs::write(&path, bytes).unwrap();
        let read = read_jsonl_records::<serde_json::Value>(&path).unwrap();
        assert_eq!((read.records.len(), read.cut.map(|c| c.line)), (1, Some(2)));
    }

    #[test]
    fn a_whole_last_record_without_its_newline_is_kept_and_the_newline_added() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.jsonl");
        std::fs::write(&path, "{\"n\":1}\n{\"n\":2}").unwrap();
        let read = read_jsonl_records::<serde_json::Value>(&path).unwrap();
        assert_eq!((read.records.len(), read.cut.is_none(), read.unterminated), (2, true, true));
        read.repair(&path).unwrap();
        JsonlFile::append_to(&path).unwrap().write(&serde_json::json!({"n": 3})).unwrap();
        let back: Vec<(usize, serde_json::Value)> = read_jsonl(&path).unwrap();
        assert_eq!(back.iter().map(|(l, _)| *l).collect::<Vec<_>>(), [1, 2, 3]);
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
