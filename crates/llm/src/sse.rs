//! Server-sent events for the streaming providers: response bytes, as they arrive, become
//! [`SseFrame`]s (framing and UTF-8 reassembly by `eventsource-stream`), and a decoder
//! turns frames into text deltas and one final response. The decoder and its driver take any
//! kind of frame, so the messages of an AWS event stream ([`crate::eventstream`]) are decoded
//! the same way.
//!
//! The end of the byte stream is made explicit: when the body ends, a blank line is fed to the
//! parser so a last event without its terminating blank line is still delivered, marked
//! `at_eof`. If such a tail event does not decode, the stream was cut off mid-event and the
//! caller gets [`ProviderError::Truncated`] rather than a parse error.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use eventsource_stream::{EventStream, EventStreamError};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use recursive_core::{ChatResponse, ChatStream, Message, ProviderError, StopReason, StreamEvent, Usage};

use crate::http::clip;

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseFrame {
    /// The `event:` name (`message` when the server sent none).
    pub event: String,
    /// The `data:` lines, joined with newlines.
    pub data: String,
    /// Whether the event was only completed by the end of the stream (no blank line after it).
    pub at_eof: bool,
}

/// Frames a byte stream into server-sent events.
pub fn frames<S>(provider: &str, body: S) -> BoxStream<'static, Result<SseFrame, ProviderError>>
where
    S: Stream<Item = Result<Bytes, ProviderError>> + Send + 'static,
{
    let ended = Arc::new(AtomicBool::new(false));
    let mark = ended.clone();
    let tail = futures::stream::once(async move {
        mark.store(true, Ordering::SeqCst);
        Ok::<Bytes, ProviderError>(Bytes::from_static(b"\n\n"))
    });
    let provider = provider.to_string();
    EventStream::new(body.chain(tail))
        .map(move |item| match item {
            Ok(event) => Ok(SseFrame { event: event.event, data: event.data, at_eof: ended.load(Ordering::SeqCst) }),
            Err(EventStreamError::Transport(e)) => Err(e),
            Err(EventStreamError::Utf8(e)) => Err(ProviderError::Malformed {
                provider: provider.clone(),
                message: format!("the event stream is not valid UTF-8: {e}"),
            }),
            Err(EventStreamError::Parser(e)) => Err(ProviderError::Malformed {
                provider: provider.clone(),
                message: format!("not a server-sent event stream: {e}"),
            }),
        })
        .boxed()
}

/// A frame of a streamed answer as [`drive`] sees it: a server-sent event, or one message of
/// another framing (AWS event streams, [`crate::eventstream`]).
pub(crate) trait Frame: Send + 'static {
    /// The frame's data when only the end of the stream completed it (so a frame that does not
    /// decode was cut off, not malformed); `None` for a frame that was complete on its own.
    fn cut_off(&self) -> Option<&str>;
}

impl Frame for SseFrame {
    fn cut_off(&self) -> Option<&str> {
        self.at_eof.then_some(self.data.as_str())
    }
}

/// Turns the frames of one protocol into text deltas and a final response.
pub(crate) trait Decoder<F = SseFrame>: Send + 'static {
    /// Handles one frame and returns the text that arrived with it.
    fn feed(&mut self, frame: &F) -> Result<Vec<String>, ProviderError>;

    /// Reasoning (thinking) that arrived with the frames fed since the last call.
    fn take_reasoning(&mut self) -> Vec<String> {
        Vec::new()
    }

    /// Whether the protocol's last event has arrived (nothing more to read).
    fn is_done(&self) -> bool;

    /// The assembled response, or [`ProviderError::Truncated`] if the protocol did not finish.
    fn finish(&mut self) -> Result<ChatResponse, ProviderError>;
}

/// A decoder's state: the provider's name, its protocol's accumulator, and the request's model
/// for a response that names none.
pub(crate) struct Decoding<A> {
    pub(crate) provider: String,
    pub(crate) acc: A,
    pub(crate) fallback_model: String,
}

/// Decodes an SSE byte stream with a fresh accumulator `A`.
pub(crate) fn decode<A: Default>(
    provider: &str,
    bytes: BoxStream<'static, Result<Bytes, ProviderError>>,
    fallback_model: String,
) -> ChatStream
where
    Decoding<A>: Decoder,
{
    let decoder = Decoding { provider: provider.to_string(), acc: A::default(), fallback_model };
    drive(provider, frames(provider, bytes), decoder)
}

struct Drive<F, D> {
    provider: String,
    frames: BoxStream<'static, Result<F, ProviderError>>,
    decoder: D,
    queue: VecDeque<StreamEvent>,
    finished: bool,
}

/// Runs a decoder over a framed stream: text deltas as they arrive, then `Completed`.
pub(crate) fn drive<F: Frame, D: Decoder<F>>(
    provider: &str,
    frames: BoxStream<'static, Result<F, ProviderError>>,
    decoder: D,
) -> ChatStream {
    let state = Drive { provider: provider.to_string(), frames, decoder, queue: VecDeque::new(), finished: false };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(event) = st.queue.pop_front() {
                return Some((Ok(event), st));
            }
            if st.finished {
                return None;
            }
            if st.decoder.is_done() {
                st.finished = true;
                match st.decoder.finish() {
                    Ok(response) => st.queue.push_back(StreamEvent::Completed(response)),
                    Err(e) => return Some((Err(e), st)),
                }
                continue;
            }
            match st.frames.next().await {
                Some(Ok(frame)) => match st.decoder.feed(&frame) {
                    Ok(deltas) => {
                        let reasoning = st.decoder.take_reasoning();
                        st.queue
                            .extend(reasoning.into_iter().filter(|d| !d.is_empty()).map(StreamEvent::ReasoningDelta));
                        st.queue.extend(deltas.into_iter().filter(|d| !d.is_empty()).map(StreamEvent::TextDelta));
                    }
                    Err(e) => {
                        st.finished = true;
                        let e = match (e, frame.cut_off()) {
                            (ProviderError::Malformed { .. }, Some(data)) => ProviderError::Truncated {
                                provider: st.provider.clone(),
                                message: format!(
                                    "the stream was cut off in the middle of an event: {}",
                                    clip(data, 200)
                                ),
                            },
                            (other, _) => other,
                        };
                        return Some((Err(e), st));
                    }
                },
                Some(Err(e)) => {
                    st.finished = true;
                    return Some((Err(e), st));
                }
                None => {
                    st.finished = true;
                    match st.decoder.finish() {
                        Ok(response) => st.queue.push_back(StreamEvent::Completed(response)),
                        Err(e) => return Some((Err(e), st)),
                    }
                }
            }
        }
    })
    .boxed()
}

/// The end of a decoded stream: the response `finish` assembles when the protocol's end arrived
/// (`complete`), else [`ProviderError::Truncated`] naming what never did (`missing`); a response
/// naming no model gets `fallback_model`.
pub(crate) fn finished(
    provider: &str,
    complete: bool,
    missing: &str,
    fallback_model: &str,
    finish: impl FnOnce() -> ChatResponse,
) -> Result<ChatResponse, ProviderError> {
    if !complete {
        return Err(ProviderError::Truncated {
            provider: provider.to_string(),
            message: format!("the stream ended before {missing} arrived"),
        });
    }
    let mut response = finish();
    if response.model.is_empty() {
        response.model = fallback_model.to_string();
    }
    Ok(response)
}

/// An assembled answer (no cost yet: pricing adds it).
pub(crate) fn assembled(message: Message, stop_reason: StopReason, usage: Usage, model: &str) -> ChatResponse {
    ChatResponse { message, stop_reason, usage, cost_usd: None, model: model.to_string() }
}

/// A frame's JSON payload, or `None` for an empty frame; `what` names it in a parse error.
pub(crate) fn frame_json<T: serde::de::DeserializeOwned>(
    provider: &str,
    frame: &SseFrame,
    what: &str,
) -> Result<Option<T>, ProviderError> {
    let data = frame.data.trim();
    if data.is_empty() {
        return Ok(None);
    }
    serde_json::from_str(data).map(Some).map_err(|e| bad_json(provider, what, data, &e))
}

/// What a frame is called in an error: its event name, or `stream event` when it has none.
pub(crate) fn frame_name(frame: &SseFrame) -> String {
    if frame.event == "message" { "stream event".to_string() } else { format!("`{}` event", frame.event) }
}

/// A complete JSON answer (`what` names it in the error when it does not parse).
pub(crate) fn parse_body<T: serde::de::DeserializeOwned>(
    provider: &str,
    what: &str,
    body: &[u8],
) -> Result<T, ProviderError> {
    serde_json::from_slice(body).map_err(|e| bad_json(provider, what, &String::from_utf8_lossy(body), &e))
}

/// A [`ProviderError::Malformed`] for a parsed answer that is no answer (`why`), quoting it.
pub(crate) fn not_an_answer(provider: &str, why: &str, body: &[u8]) -> ProviderError {
    ProviderError::Malformed {
        provider: provider.to_string(),
        message: format!("{why}: {}", clip(&String::from_utf8_lossy(body), 200)),
    }
}

/// A [`ProviderError::Malformed`] for a frame whose JSON did not parse.
pub(crate) fn bad_json(provider: &str, what: &str, data: &str, e: &serde_json::Error) -> ProviderError {
    ProviderError::Malformed {
        provider: provider.to_string(),
        message: format!("invalid JSON in {what}: {e}; data: {}", clip(data, 200)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(parts: &[&[u8]]) -> impl Stream<Item = Result<Bytes, ProviderError>> + Send + 'static {
        let owned: Vec<Result<Bytes, ProviderError>> = parts.iter().map(|p| Ok(Bytes::copy_from_slice(p))).collect();
        futures::stream::iter(owned)
    }

    async fn collect(parts: &[&[u8]]) -> Vec<SseFrame> {
        frames("t", chunks(parts)).map(|f| f.unwrap()).collect().await
    }

    #[tokio::test]
    async fn an_event_split_across_reads_is_reassembled() {
        let got = collect(&[b"event: a\nda", b"ta: {\"x\"", b":1}\n", b"\ndata: 2\n\n"]).await;
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].event.as_str(), got[0].data.as_str(), got[0].at_eof), ("a", "{\"x\":1}", false));
        assert_eq!((got[1].event.as_str(), got[1].data.as_str()), ("message", "2"));
    }

    #[tokio::test]
    async fn a_multibyte_character_split_across_reads_survives() {
        let text = "data: caf\u{e9} \u{1f600}\n\n".as_bytes();
        // Cut inside the two-byte é and inside the four-byte emoji.
        let e_acute = text.iter().position(|b| *b == 0xc3).unwrap();
        let emoji = text.iter().position(|b| *b == 0xf0).unwrap();
        let got = collect(&[&text[..e_acute + 1], &text[e_acute + 1..emoji + 2], &text[emoji + 2..]]).await;
        assert_eq!(got[0].data, "caf\u{e9} \u{1f600}");
    }

    #[tokio::test]
    async fn a_last_event_without_blank_line_is_marked_at_eof() {
        let got = collect(&[b"data: 1\n\ndata: 2"]).await;
        assert_eq!(got.len(), 2);
        assert!(!got[0].at_eof);
        assert!(got[1].at_eof);
        assert_eq!(got[1].data, "2");
    }
}
