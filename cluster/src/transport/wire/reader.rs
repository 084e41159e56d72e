//! A wire 2 request frame read by hand, as `frames.rs` writes it: the provider's reader of every
//! request. It reads what bincode's reader of the envelope (`envelope.rs`) and of the request
//! (`v2.rs`) reads, and refuses what they refuse, without serde's visitors between the bytes and
//! the values (about a sixth of a small call's instructions went to them).
//!
//! Step by step, each integer bincode's variable-length one (below 251 one byte, else a tag,
//! 251 to 254, and 2, 4, 8 or 16 little-endian bytes), each string and byte string its length
//! then its bytes:
//!
//! 1. the message's variant: 0, a request, or 1, a cancel (then a trace context and the id of
//!    the request to stop, and nothing more);
//! 2. the request's context: the time left, seconds then nanoseconds (a `Duration`: nanoseconds
//!    that carry past `u64::MAX` seconds are refused), read as at most a year; the trace
//!    context, 16 raw bytes, a span id and a sampling variant (0 or 1);
//! 3. the request's id, then the call's variant, 0;
//! 4. the service's and the function's names (UTF-8; a name this node hosts is borrowed, not
//!    copied: `names.rs`), the signature, then `(request id, attempt, budget left, reply limit)`;
//! 5. the header map, a byte string read in place (`headers.rs`; a header that cannot be read
//!    marks the request invalid, refused on its own);
//! 6. the arguments, copied out of the frame; then nothing may be left.
//!
//! A property test checks that it reads every frame, well formed or not, as bincode does (the
//! same request, or an error from both), and the `wire_v2_request` fuzz target checks the same
//! on whatever the fuzzer finds.

use std::borrow::Cow;
use std::io;
use std::time::Duration;

use tokio::time::Instant;

use super::envelope::{
    CallRequest, ClientMessage, Context, Request, SamplingDecision, TraceContext, time_left_read,
};
use super::v2::{RequestFrame, WireRequest, head_of, read_request_headers};
use crate::service::Encoded;

/// Reads one wire 2 request frame's message.
pub(crate) fn read_request(frame: &[u8]) -> io::Result<ClientMessage<WireRequest>> {
    let mut bytes = Bytes(frame);
    // One reading of the clock for the deadline and the budget.
    let now = Instant::now();
    let message = match bytes.u32()? {
        0 => {
            let context = bytes.context(now)?;
            let id = bytes.u64()?;
            if bytes.u32()? != 0 {
                return Err(invalid("a request that is not a call"));
            }
            ClientMessage::Request(Request {
                context,
                id,
                message: CallRequest::Call {
                    request: bytes.call(now)?,
                },
            })
        }
        1 => ClientMessage::Cancel {
            trace_context: bytes.trace()?,
            request_id: bytes.u64()?,
        },
        other => return Err(invalid(&format!("a message of variant {other}"))),
    };
    bytes.end()?;
    Ok(message)
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("not a wire 2 request: {what}"),
    )
}

/// What is left of a frame.
struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(invalid("cut short"));
        }
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }

    /// bincode's variable-length integer; `wide` allows the 16-byte form (a `u128`).
    fn varint(&mut self, wide: bool) -> io::Result<u128> {
        Ok(match self.array::<1>()?[0] {
            small @ 0..=250 => u128::from(small),
            251 => u128::from(u16::from_le_bytes(self.array()?)),
            252 => u128::from(u32::from_le_bytes(self.array()?)),
            253 => u128::from(u64::from_le_bytes(self.array()?)),
            254 if wide => u128::from_le_bytes(self.array()?),
            _ => return Err(invalid("an integer's tag is not one bincode writes")),
        })
    }

    /// A one-byte integer, the usual case, without the wide path.
    #[inline]
    fn small(&mut self) -> Option<u8> {
        match self.0.split_first() {
            Some((&small, rest)) if small <= 250 => {
                self.0 = rest;
                Some(small)
            }
            _ => None,
        }
    }

    fn u64(&mut self) -> io::Result<u64> {
        match self.small() {
            Some(small) => Ok(u64::from(small)),
            None => Ok(self.varint(false)? as u64),
        }
    }

    fn u128(&mut self) -> io::Result<u128> {
        match self.small() {
            Some(small) => Ok(u128::from(small)),
            None => self.varint(true),
        }
    }

    /// Nothing may be left after a message.
    fn end(&self) -> io::Result<()> {
        match self.0.len() {
            0 => Ok(()),
            left => Err(invalid(&format!("{left} bytes after the message"))),
        }
    }

    fn u32(&mut self) -> io::Result<u32> {
        u32::try_from(self.u64()?).map_err(|_| invalid("a u32 out of range"))
    }

    fn byte_string(&mut self) -> io::Result<&'a [u8]> {
        let len = usize::try_from(self.u64()?).map_err(|_| invalid("a length out of range"))?;
        self.take(len)
    }

    fn name(&mut self) -> io::Result<Cow<'static, str>> {
        let text = std::str::from_utf8(self.byte_string()?)
            .map_err(|_| invalid("a name that is not UTF-8"))?;
        Ok(super::names::of(text))
    }

    fn trace(&mut self) -> io::Result<TraceContext> {
        Ok(TraceContext {
            trace_id: self.array()?,
            span_id: self.u64()?,
            sampling_decision: match self.u32()? {
                0 => SamplingDecision::Sampled,
                1 => SamplingDecision::Unsampled,
                _ => return Err(invalid("a sampling decision of no known variant")),
            },
        })
    }

    fn context(&mut self, now: Instant) -> io::Result<Context> {
        let (secs, nanos) = (self.u64()?, self.u32()?);
        // As serde reads a `Duration`: nanoseconds carried into seconds must not overflow.
        if secs.checked_add(u64::from(nanos / 1_000_000_000)).is_none() {
            return Err(invalid("a deadline past a Duration's range"));
        }
        Ok(Context {
            deadline: time_left_read(now, Duration::new(secs, nanos)),
            trace_context: self.trace()?,
        })
    }

    fn call(&mut self, now: Instant) -> io::Result<RequestFrame> {
        let service = self.name()?;
        let function = self.name()?;
        let signature = self.u64()?;
        let core = (self.u128()?, self.u32()?, self.u64()?, self.u64()?);
        let mut head = head_of(core, now);
        read_request_headers(&mut head, self.byte_string()?);
        let args = Encoded::from_slice(self.byte_string()?);
        Ok(RequestFrame::of(
            (service, function, signature),
            core.1,
            head,
            args,
        ))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::transport::tcp::paused;

    /// Both readers' verdicts on `frame`: the same message, or an error from both.
    fn same_verdict(frame: &[u8]) -> Result<(), TestCaseError> {
        let by_hand = read_request(frame);
        let by_bincode = super::super::envelope::decode::<ClientMessage<WireRequest>>(frame);
        match (by_hand, by_bincode) {
            (Ok(a), Ok(b)) => prop_assert_eq!(format!("{a:?}"), format!("{b:?}")),
            (Err(_), Err(_)) => {}
            (a, b) => prop_assert!(false, "by hand {a:?}, by bincode {b:?}"),
        }
        Ok(())
    }

    /// A frame made of plausible pieces: varints of every width and tag, names, byte strings,
    /// raw bytes, in any order and number.
    fn pieces() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            (0u8..=255).prop_map(|b| vec![b]),
            any::<u16>().prop_map(|v| [&[251u8][..], &v.to_le_bytes()].concat()),
            any::<u32>().prop_map(|v| [&[252u8][..], &v.to_le_bytes()].concat()),
            any::<u64>().prop_map(|v| [&[253u8][..], &v.to_le_bytes()].concat()),
            any::<u128>().prop_map(|v| [&[254u8][..], &v.to_le_bytes()].concat()),
            ".{0,12}".prop_map(|s: String| [&[s.len() as u8][..], s.as_bytes()].concat()),
            prop::collection::vec(any::<u8>(), 0..24),
        ];
        prop::collection::vec(piece, 0..24).prop_map(|pieces| pieces.concat())
    }

    proptest! {
        #[test]
        fn any_bytes_are_read_as_bincode_reads_them(frame in pieces()) {
            let rt = paused();
            let _clock = rt.enter();
            same_verdict(&frame)?;
        }

        /// Frames the caller writes, whole, cut short, with a byte changed or with bytes added.
        #[test]
        fn written_frames_and_their_corruptions_are_read_as_bincode_reads_them(
            frame in super::super::super::tcp::written_request_frames(),
            cut in any::<prop::sample::Index>(),
            flip in any::<(prop::sample::Index, u8)>(),
            extra in prop::collection::vec(any::<u8>(), 1..4),
            widen in (any::<prop::sample::Index>(), prop::sample::select(vec![251u8, 252, 253, 254])),
        ) {
            let rt = paused();
            let _clock = rt.enter();
            same_verdict(&frame)?;
            prop_assert!(read_request(&frame).is_ok(), "a frame as written reads");
            same_verdict(&frame[..cut.index(frame.len() + 1)])?;
            let mut flipped = frame.clone();
            let at = flip.0.index(flipped.len());
            flipped[at] ^= flip.1.max(1);
            same_verdict(&flipped)?;
            same_verdict(&[&frame[..], &extra[..]].concat())?;
            // A byte read as a one-byte integer written in a wider form (which bincode reads
            // too), or in the 16-byte form only a `u128` may take.
            let at = widen.0.index(frame.len());
            let (value, tag) = (frame[at], widen.1);
            let width = match tag { 251 => 2, 252 => 4, 253 => 8, _ => 16 };
            let mut wide = frame[..at].to_vec();
            wide.push(tag);
            wide.extend_from_slice(&u128::from(value).to_le_bytes()[..width]);
            wide.extend_from_slice(&frame[at + 1..]);
            same_verdict(&wide)?;
        }
    }
}
