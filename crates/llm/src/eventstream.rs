//! AWS event streams (`application/vnd.amazon.eventstream`), the binary framing of Bedrock's
//! `ConverseStream`: response bytes, as they arrive, become [`EventMessage`]s — each frame's
//! prelude, headers, payload and both CRCs read and checked by `aws-smithy-eventstream` — for
//! the stream driver of [`crate::sse`] to decode like server-sent events.
//!
//! [`encode`] writes a message the same way, for servers and tests that speak such a stream.
//!
//! A frame the checks refuse is a malformed response; a body that ends inside a frame is a
//! truncated one. A frame longer than the crate's limit (16 MiB) is refused by it, so a stream
//! holds at most one frame in memory beyond what [`crate::http`] caps.

use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder, write_message_to};
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use bytes::{Buf, Bytes, BytesMut};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use recursive_core::ProviderError;

use crate::sse::Frame;

/// One message of an event stream: its string headers and its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventMessage {
    /// The headers whose values are strings (`:message-type`, `:event-type`,
    /// `:exception-type`, `:content-type`...), in frame order.
    pub headers: Vec<(String, String)>,
    /// The payload (JSON for Bedrock).
    pub payload: Bytes,
}

impl EventMessage {
    /// The value of a string header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// `:message-type`: `event`, `exception` or `error` (`event` when absent).
    pub fn message_type(&self) -> &str {
        self.header(":message-type").unwrap_or("event")
    }

    fn from_message(message: &Message) -> Self {
        let headers = message
            .headers()
            .iter()
            .filter_map(|h| match h.value() {
                HeaderValue::String(v) => Some((h.name().as_str().to_string(), v.as_str().to_string())),
                _ => None,
            })
            .collect();
        EventMessage { headers, payload: message.payload().clone() }
    }
}

impl Frame for EventMessage {
    /// A message is whole or not delivered: the framing itself tells a cut-off body.
    fn cut_off(&self) -> Option<&str> {
        None
    }
}

/// The bytes of one event-stream message with these string headers and this payload (prelude,
/// headers, payload and both CRCs, by `aws-smithy-eventstream`).
pub fn encode(headers: &[(&str, &str)], payload: &[u8]) -> Result<Vec<u8>, ProviderError> {
    let message = headers.iter().fold(Message::new(payload.to_vec()), |m, (name, value)| {
        m.add_header(Header::new(name.to_string(), HeaderValue::String(value.to_string().into())))
    });
    let mut out = Vec::new();
    write_message_to(&message, &mut out)
        .map_err(|e| ProviderError::Invalid(format!("cannot write an event-stream message: {e}")))?;
    Ok(out)
}

/// The state of framing one body.
struct Framing {
    provider: String,
    body: BoxStream<'static, Result<Bytes, ProviderError>>,
    buffer: BytesMut,
    decoder: MessageFrameDecoder,
    /// The decoder holds the prelude of a frame whose rest has not arrived.
    mid_frame: bool,
    done: bool,
}

impl Framing {
    /// The next whole message in the buffer, if there is one.
    fn next_message(&mut self) -> Result<Option<EventMessage>, ProviderError> {
        let before = self.buffer.remaining();
        match self.decoder.decode_frame(&mut self.buffer) {
            Ok(DecodedFrame::Complete(message)) => {
                self.mid_frame = false;
                Ok(Some(EventMessage::from_message(&message)))
            }
            Ok(DecodedFrame::Incomplete) => {
                self.mid_frame |= self.buffer.remaining() < before;
                Ok(None)
            }
            Err(e) => Err(ProviderError::Malformed {
                provider: self.provider.clone(),
                message: format!("not an AWS event stream frame: {e}"),
            }),
        }
    }

    /// The error for a body that ended with part of a frame unread, if it did.
    fn leftover(&self) -> Option<ProviderError> {
        (self.mid_frame || !self.buffer.is_empty()).then(|| ProviderError::Truncated {
            provider: self.provider.clone(),
            message: "the stream was cut off in the middle of an event-stream frame".into(),
        })
    }
}

/// Frames a byte stream into event-stream messages.
pub fn messages<S>(provider: &str, body: S) -> BoxStream<'static, Result<EventMessage, ProviderError>>
where
    S: Stream<Item = Result<Bytes, ProviderError>> + Send + 'static,
{
    let state = Framing {
        provider: provider.to_string(),
        body: body.boxed(),
        buffer: BytesMut::new(),
        decoder: MessageFrameDecoder::new(),
        mid_frame: false,
        done: false,
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if st.done {
                return None;
            }
            match st.next_message() {
                Ok(Some(message)) => return Some((Ok(message), st)),
                Ok(None) => {}
                Err(e) => {
                    st.done = true;
                    return Some((Err(e), st));
                }
            }
            match st.body.next().await {
                Some(Ok(chunk)) => st.buffer.extend_from_slice(&chunk),
                Some(Err(e)) => {
                    st.done = true;
                    return Some((Err(e), st));
                }
                None => {
                    st.done = true;
                    return st.leftover().map(|e| (Err(e), st));
                }
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(event: &str, payload: &str) -> Vec<u8> {
        encode(&[(":event-type", event), (":message-type", "event")], payload.as_bytes()).unwrap()
    }

    async fn collect(pieces: Vec<Vec<u8>>) -> Vec<Result<EventMessage, ProviderError>> {
        let body = futures::stream::iter(pieces.into_iter().map(|p| Ok(Bytes::from(p))));
        messages("bedrock", body).collect().await
    }

    #[tokio::test]
    async fn frames_split_anywhere_are_reassembled() {
        let mut bytes = frame("messageStart", r#"{"role":"assistant"}"#);
        bytes.extend(frame("messageStop", r#"{"stopReason":"end_turn"}"#));
        let pieces: Vec<Vec<u8>> = bytes.chunks(5).map(<[u8]>::to_vec).collect();
        let got: Vec<EventMessage> = collect(pieces).await.into_iter().map(Result::unwrap).collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].header(":event-type"), Some("messageStart"));
        assert_eq!(got[0].message_type(), "event");
        assert_eq!(got[1].payload.as_ref(), br#"{"stopReason":"end_turn"}"#);
    }

    #[tokio::test]
    async fn a_body_cut_inside_a_frame_is_truncated_even_after_its_prelude() {
        let bytes = frame("messageStart", r#"{"role":"assistant"}"#);
        for cut in [4, 12, 20, bytes.len() - 1] {
            let got = collect(vec![bytes[..cut].to_vec()]).await;
            assert!(matches!(got.as_slice(), [Err(ProviderError::Truncated { .. })]), "cut at {cut}: {got:?}");
        }
    }

    #[tokio::test]
    async fn a_corrupted_frame_is_malformed() {
        let mut bytes = frame("messageStart", r#"{"role":"assistant"}"#);
        let last = bytes.len() - 6;
        bytes[last] ^= 0xff;
        let got = collect(vec![bytes]).await;
        assert!(matches!(got.as_slice(), [Err(ProviderError::Malformed { .. })]), "{got:?}");
    }
}
