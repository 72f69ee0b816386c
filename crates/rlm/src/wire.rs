//! The pipe protocol between the host ([`crate::sandbox::Sandbox`]) and its sandbox worker
//! process ([`crate::worker`]): length-prefixed JSON frames (a little-endian `u32` byte count,
//! then the message), strictly turn-based. The host sends [`ToWorker::Init`] once, then one
//! [`ToWorker::Feed`] per snippet and one answer per suspension the worker reports; the worker
//! answers every feed with suspensions ([`FromWorker::Call`], [`FromWorker::Lookup`],
//! [`FromWorker::Wait`]) and exactly one [`FromWorker::Done`].
//!
//! The worker runs model-written code, so the host treats every frame from it as untrusted:
//! frames are bounded ([`MAX_FRAME_BYTES`]) and a frame that does not decode ends the session.

use std::io::{self, Read, Write};
use std::time::Duration;

use monty_types::{CallArgs, MontyException, MontyObject};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The largest frame the host accepts from a worker.
pub const MAX_FRAME_BYTES: u32 = 1 << 30;

/// The most the host allocates ahead for a frame before its bytes arrive.
const PREALLOCATE_MAX: usize = 256 << 20;

/// Limits the worker applies inside the interpreter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerLimits {
    /// Interpreter time per snippet (time waiting for the host excluded).
    pub feed_duration: Duration,
    /// Live memory of the session; past it the interpreter raises `MemoryError`, and a hard
    /// ceiling slightly above it ends the worker.
    pub memory_bytes: Option<usize>,
    /// Deepest Python call stack.
    pub recursion_limit: usize,
    /// Printed characters kept per snippet (head and tail).
    pub max_output_chars: usize,
}

/// How the host answers a call from the snippet.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum CallAnswer {
    /// The call returns this value.
    Value(MontyObject),
    /// The call raises this exception (catchable).
    Raise(MontyException),
    /// The call is a future the host resolves later (answered through [`ToWorker::Futures`]).
    Pending,
    /// No such function: the snippet gets a `NameError`.
    NotFound,
    /// End the snippet at once with this exception (not catchable); `freeze_output` drops
    /// whatever is printed after it.
    Abort { exception: MontyException, freeze_output: bool },
}

/// Messages from the host.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToWorker {
    /// Configure the session (first message).
    Init(WorkerLimits),
    /// Run one snippet, binding `globals` first, then the texts whose raw UTF-8 bytes follow
    /// this frame on the pipe, in order (name, byte length): large inputs travel without
    /// encoding and are not copied on either side.
    Feed { code: String, globals: Vec<(String, MontyObject)>, texts: Vec<(String, u64)> },
    /// The answer to the pending [`FromWorker::Call`].
    Answer(CallAnswer),
    /// The answer to the pending [`FromWorker::Lookup`]: the value bound to the name, if any.
    Name(Option<MontyObject>),
    /// Results of some of the futures a [`FromWorker::Wait`] named (`Value` or `Raise`), or an
    /// `Abort` ending the snippet.
    Futures(Vec<(u32, CallAnswer)>),
}

/// Why a snippet ended without a value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerFailure {
    /// The exception's type name (`SyntaxError`, `MemoryError`, ...).
    pub exc_type: String,
    /// The traceback text as Python prints it.
    pub text: String,
}

/// The end of one snippet.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Finished {
    /// Printed output (capped; head and tail kept).
    pub stdout: String,
    /// Printed characters dropped by the cap.
    pub dropped_output_chars: usize,
    /// `repr()` of a final expression's value, unless `None`.
    pub value: Option<String>,
    /// The failure, if the snippet failed.
    pub failure: Option<WorkerFailure>,
}

/// Messages from the worker.
#[derive(Debug, Serialize, Deserialize)]
pub enum FromWorker {
    /// The session is configured.
    Ready,
    /// The snippet called a function the interpreter does not have.
    Call { call_id: u32, name: String, args: CallArgs, awaited: bool },
    /// The snippet read a name that is not defined.
    Lookup { name: String },
    /// Every task of the snippet waits on these futures.
    Wait { pending: Vec<u32> },
    /// The snippet ended.
    Done(Finished),
}

/// Counts the bytes written to it.
struct Counter(u64);

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes one frame (blocking; the worker's side). The message is encoded twice, once to count
/// its bytes and once into `w`, so a large one (a batch of prompts) is never held whole in memory.
pub fn write_frame(w: &mut impl Write, msg: &impl Serialize) -> io::Result<()> {
    let mut counter = Counter(0);
    serde_json::to_writer(&mut counter, msg).map_err(io::Error::other)?;
    let len = u32::try_from(counter.0).map_err(|_| io::Error::other("frame too large"))?;
    w.write_all(&len.to_le_bytes())?;
    serde_json::to_writer(&mut *w, msg).map_err(io::Error::other)?;
    w.flush()
}

/// Reads one frame (blocking; the worker's side); `None` at a clean end of input.
pub fn read_frame<T: for<'de> Deserialize<'de>>(r: &mut impl Read) -> io::Result<Option<T>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
    r.read_exact(&mut body)?;
    serde_json::from_slice(&body).map(Some).map_err(io::Error::other)
}

/// Writes one frame (the host's side).
pub async fn send(w: &mut (impl AsyncWrite + Unpin), msg: &ToWorker) -> io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(io::Error::other)?;
    let len = u32::try_from(body.len()).map_err(|_| io::Error::other("frame too large"))?;
    w.write_all(&len.to_le_bytes()).await?;
    w.write_all(&body).await?;
    w.flush().await
}

/// Sends a feed: its frame, then the raw bytes of each text (the host's side).
pub async fn send_feed(
    w: &mut (impl AsyncWrite + Unpin),
    code: String,
    globals: Vec<(String, MontyObject)>,
    texts: &[(String, std::sync::Arc<String>)],
) -> io::Result<()> {
    let lens = texts.iter().map(|(n, t)| (n.clone(), t.len() as u64)).collect();
    send(w, &ToWorker::Feed { code, globals, texts: lens }).await?;
    for (_, text) in texts {
        w.write_all(text.as_bytes()).await?;
    }
    w.flush().await
}

/// Reads the raw text that follows a feed frame (the worker's side).
pub fn read_text(r: &mut impl Read, len: u64) -> io::Result<String> {
    let mut buf = Vec::with_capacity(usize::try_from(len).map_err(io::Error::other)?);
    r.take(len).read_to_end(&mut buf)?;
    if buf.len() as u64 != len {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "text cut short"));
    }
    String::from_utf8(buf).map_err(io::Error::other)
}

/// Reads one frame (the host's side); `None` at a clean end of input. Not cancel-safe: run it
/// in its own task.
pub async fn receive(r: &mut (impl AsyncRead + Unpin)) -> io::Result<Option<FromWorker>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len);
    if len > MAX_FRAME_BYTES {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("worker frame of {len} bytes is too large")));
    }
    // Sized for the announced length up to a bound; past it, grows with the bytes that arrive.
    let mut body = Vec::with_capacity((len as usize).min(PREALLOCATE_MAX));
    let got = r.take(u64::from(len)).read_to_end(&mut body).await?;
    if got != len as usize {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "worker frame cut short"));
    }
    serde_json::from_slice(&body).map(Some).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_through_a_pipe_buffer() {
        let mut buf = Vec::new();
        let mut args = CallArgs::new();
        args.push_arg(MontyObject::string("hi"));
        args.push_kwarg("model", MontyObject::none());
        let msg = FromWorker::Call { call_id: 7, name: "llm_query".into(), args, awaited: true };
        write_frame(&mut buf, &msg).unwrap();
        let back: FromWorker = read_frame(&mut buf.as_slice()).unwrap().unwrap();
        let FromWorker::Call { call_id: 7, awaited: true, args, .. } = back else { panic!("{back:?}") };
        assert_eq!(args.arg(0).and_then(|a| a.as_str().map(str::to_string)), Some("hi".to_string()));
    }

    #[test]
    fn empty_input_reads_as_end_of_stream() {
        let none: Option<ToWorker> = read_frame(&mut [].as_slice()).unwrap();
        assert!(none.is_none());
    }
}
