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

use monty_types::{MontyException, MontyObject, ObjectRef};
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

/// One argument of a call as it crosses the pipe: a `str`, or a list or tuple of `str` (a batch
/// of prompts), travels as raw bytes after the frame — neither encoded nor copied on the way —
/// anything else as a Python value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum WireArg {
    /// Any other value.
    Value(MontyObject),
    /// A `str` of this many bytes.
    Text(u64),
    /// A list (or tuple) of `str`s of these byte lengths.
    Texts { lens: Vec<u64>, tuple: bool },
}

impl WireArg {
    /// How a call argument is sent; the texts it carries are added to `raw`.
    pub fn of<'a>(arg: ObjectRef<'a>, raw: &mut Vec<&'a str>) -> WireArg {
        if let Some(s) = arg.as_str() {
            raw.push(s);
            return WireArg::Text(s.len() as u64);
        }
        let tuple = arg.type_name() == "tuple";
        if (tuple || arg.type_name() == "list")
            && let Some(items) = arg.items()
            && let Some(texts) = items.iter().map(|i| i.as_str()).collect::<Option<Vec<&'a str>>>()
        {
            let lens = texts.iter().map(|t| t.len() as u64).collect();
            raw.extend(texts);
            return WireArg::Texts { lens, tuple };
        }
        WireArg::Value(arg.to_owned())
    }

    /// Bytes of raw text that follow the frame for this argument.
    fn raw_bytes(&self) -> u64 {
        match self {
            WireArg::Value(_) => 0,
            WireArg::Text(n) => *n,
            WireArg::Texts { lens, .. } => lens.iter().sum(),
        }
    }
}

/// What the host receives: a frame, or a call with its arguments read back into values.
#[derive(Debug)]
pub enum Incoming {
    /// Any frame but a call.
    Frame(FromWorker),
    /// A call, its texts read from the pipe.
    Call { call_id: u32, name: String, args: Vec<MontyObject>, kwargs: Vec<(String, MontyObject)>, awaited: bool },
}

/// Reads the next frame and, for a call, the texts that follow it (the host's side). Not
/// cancel-safe: run it in its own task.
pub async fn receive_incoming(r: &mut (impl AsyncRead + Unpin)) -> io::Result<Option<Incoming>> {
    let Some(frame) = receive(r).await? else { return Ok(None) };
    let FromWorker::Call { call_id, name, args, kwargs, awaited } = frame else {
        return Ok(Some(Incoming::Frame(frame)));
    };
    let total: u64 = args.iter().chain(kwargs.iter().map(|(_, a)| a)).map(WireArg::raw_bytes).sum();
    if total > u64::from(MAX_FRAME_BYTES) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("call arguments of {total} bytes are too large"),
        ));
    }
    let mut values = Vec::with_capacity(args.len());
    for arg in args {
        values.push(read_arg(r, arg).await?);
    }
    let mut keywords = Vec::with_capacity(kwargs.len());
    for (k, arg) in kwargs {
        keywords.push((k, read_arg(r, arg).await?));
    }
    Ok(Some(Incoming::Call { call_id, name, args: values, kwargs: keywords, awaited }))
}

async fn read_arg(r: &mut (impl AsyncRead + Unpin), arg: WireArg) -> io::Result<MontyObject> {
    Ok(match arg {
        WireArg::Value(v) => v,
        WireArg::Text(n) => MontyObject::string(read_raw_text(r, n).await?),
        WireArg::Texts { lens, tuple } => {
            let mut items = Vec::with_capacity(lens.len());
            for n in lens {
                items.push(MontyObject::string(read_raw_text(r, n).await?));
            }
            if tuple { MontyObject::tuple(items) } else { MontyObject::list(items) }
        }
    })
}

async fn read_raw_text(r: &mut (impl AsyncRead + Unpin), n: u64) -> io::Result<String> {
    let mut buf = Vec::with_capacity(usize::try_from(n).map_err(io::Error::other)?);
    let got = r.take(n).read_to_end(&mut buf).await?;
    if got as u64 != n {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "call text cut short"));
    }
    String::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Messages from the worker.
#[derive(Debug, Serialize, Deserialize)]
pub enum FromWorker {
    /// The session is configured.
    Ready,
    /// The snippet called a function the interpreter does not have. The raw UTF-8 bytes of
    /// every text in the arguments follow this frame on the pipe, in order.
    Call { call_id: u32, name: String, args: Vec<WireArg>, kwargs: Vec<(String, WireArg)>, awaited: bool },
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
        let args = vec![WireArg::Text(2)];
        let kwargs = vec![("model".to_string(), WireArg::Value(MontyObject::none()))];
        let msg = FromWorker::Call { call_id: 7, name: "llm_query".into(), args, kwargs, awaited: true };
        write_frame(&mut buf, &msg).unwrap();
        let back: FromWorker = read_frame(&mut buf.as_slice()).unwrap().unwrap();
        let FromWorker::Call { call_id: 7, awaited: true, args, .. } = back else { panic!("{back:?}") };
        assert_eq!(args, vec![WireArg::Text(2)]);
    }

    #[tokio::test]
    async fn a_call_brings_its_texts_back_as_values() {
        let list = MontyObject::list([MontyObject::string("ab"), MontyObject::string("cde")]);
        let mut raw = Vec::new();
        let args = vec![WireArg::of(list.as_ref(), &mut raw)];
        let one = MontyObject::string("xyz");
        let kwargs = vec![("k".to_string(), WireArg::of(one.as_ref(), &mut raw))];
        let mut pipe = Vec::new();
        write_frame(&mut pipe, &FromWorker::Call { call_id: 1, name: "f".into(), args, kwargs, awaited: false })
            .unwrap();
        for t in raw {
            pipe.extend_from_slice(t.as_bytes());
        }
        let Some(Incoming::Call { args, kwargs, .. }) = receive_incoming(&mut pipe.as_slice()).await.unwrap() else {
            panic!("not a call")
        };
        assert_eq!(args[0].py_repr(), "['ab', 'cde']");
        assert_eq!(kwargs[0].1.py_repr(), "'xyz'");
    }

    #[test]
    fn empty_input_reads_as_end_of_stream() {
        let none: Option<ToWorker> = read_frame(&mut [].as_slice()).unwrap();
        assert!(none.is_none());
    }
}
