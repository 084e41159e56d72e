//! The provider's frame codec: tarpc's bincode, with the one value in tarpc's own request
//! envelope that can panic it clamped first. tarpc reads a request's deadline as time left and
//! adds it to `Instant::now()` unchecked (`tarpc/src/context.rs`): a peer that sends `u64::MAX`
//! seconds panics the connection's task, and every call on that connection is lost. That
//! happens while the frame is decoded, before anything of ours sees the request, so the bytes
//! are mended here: the deadline's seconds are the first value after the message's variant.

use std::io;
use std::pin::Pin;

use tarpc::tokio_serde::formats::Bincode;
use tarpc::tokio_serde::{Deserializer, Serializer};
use tokio_util::bytes::{Bytes, BytesMut};

use super::MAX_DEADLINE;

/// bincode 1's variable-length integers: below 251 one byte, else a tag and 2, 4 or 8 bytes.
fn read_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let tag = *bytes.first()?;
    let fixed = |n: usize| -> Option<u64> {
        let raw = bytes.get(1..1 + n)?;
        let mut buf = [0u8; 8];
        buf[..n].copy_from_slice(raw);
        Some(u64::from_le_bytes(buf))
    };
    match tag {
        0..=250 => Some((u64::from(tag), 1)),
        251 => Some((fixed(2)?, 3)),
        252 => Some((fixed(4)?, 5)),
        253 => Some((fixed(8)?, 9)),
        _ => None,
    }
}

/// `value` as bincode's varint writes it (the inverse of [`read_varint`]).
pub(super) fn write_varint(value: u64, out: &mut BytesMut) {
    match value {
        0..=250 => out.extend_from_slice(&[value as u8]),
        251..=0xffff => {
            out.extend_from_slice(&[251]);
            out.extend_from_slice(&(value as u16).to_le_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.extend_from_slice(&[252]);
            out.extend_from_slice(&(value as u32).to_le_bytes());
        }
        _ => {
            out.extend_from_slice(&[253]);
            out.extend_from_slice(&value.to_le_bytes());
        }
    }
}

/// `frame` with a request deadline over [`MAX_DEADLINE`] lowered to it; `None` when it needs
/// no change (the usual case: nothing is copied).
fn clamp_deadline(frame: &[u8]) -> Option<BytesMut> {
    // `ClientMessage::Request` is variant 0; its first field is the deadline's seconds.
    let (variant, at) = read_varint(frame)?;
    if variant != 0 {
        return None;
    }
    let (secs, len) = read_varint(&frame[at..])?;
    let max = MAX_DEADLINE.as_secs();
    if secs <= max {
        return None;
    }
    let mut mended = BytesMut::with_capacity(frame.len());
    mended.extend_from_slice(&frame[..at]);
    write_varint(max, &mut mended);
    mended.extend_from_slice(&frame[at + len..]);
    Some(mended)
}

/// tarpc's bincode codec, with request deadlines clamped before it reads them.
pub(super) struct Clamping<Item, SinkItem>(Bincode<Item, SinkItem>);

impl<Item, SinkItem> Default for Clamping<Item, SinkItem> {
    fn default() -> Self {
        Self(Bincode::default())
    }
}

impl<Item, SinkItem> Deserializer<Item> for Clamping<Item, SinkItem>
where
    Bincode<Item, SinkItem>: Deserializer<Item, Error = io::Error> + Unpin,
{
    type Error = io::Error;

    fn deserialize(self: Pin<&mut Self>, src: &BytesMut) -> Result<Item, io::Error> {
        let inner = Pin::new(&mut self.get_mut().0);
        match clamp_deadline(src) {
            Some(mended) => inner.deserialize(&mended),
            None => inner.deserialize(src),
        }
    }
}

impl<Item, SinkItem> Serializer<SinkItem> for Clamping<Item, SinkItem>
where
    Bincode<Item, SinkItem>: Serializer<SinkItem, Error = io::Error> + Unpin,
{
    type Error = io::Error;

    fn serialize(self: Pin<&mut Self>, item: &SinkItem) -> Result<Bytes, io::Error> {
        Pin::new(&mut self.get_mut().0).serialize(item)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn an_absurd_deadline_is_lowered_and_a_sane_frame_left_alone() {
        for secs in [0u64, 250, 251, 70_000, 1 << 33] {
            let mut frame = BytesMut::new();
            write_varint(secs, &mut frame);
            assert_eq!(read_varint(&frame), Some((secs, frame.len())));
        }
        let frame = |secs: u64| {
            let mut f = BytesMut::from(&[0u8][..]);
            write_varint(secs, &mut f);
            f.extend_from_slice(&[7, 8, 9]);
            f
        };
        assert!(clamp_deadline(&frame(10)).is_none());
        let mended = clamp_deadline(&frame(u64::MAX)).expect("clamped");
        let (secs, len) = read_varint(&mended[1..]).unwrap();
        assert_eq!(Duration::from_secs(secs), MAX_DEADLINE);
        assert_eq!(&mended[1 + len..], &[7, 8, 9]);
        assert!(
            clamp_deadline(&[1, 255, 255]).is_none(),
            "a cancel is left alone"
        );
        assert!(clamp_deadline(&[]).is_none());
    }

    #[test]
    fn tarpc_reads_a_request_whose_deadline_would_have_panicked_it() {
        use tarpc::ClientMessage;
        type Message = ClientMessage<u32>;
        let request = ClientMessage::Request(tarpc::Request {
            context: tarpc::context::current(),
            id: 7,
            message: 42u32,
        });
        let mut codec = Clamping::<Message, Message>::default();
        let bytes = Pin::new(&mut codec).serialize(&request).unwrap();
        // The deadline's seconds as a peer might send them: u64::MAX.
        let (_, at) = read_varint(&bytes).unwrap();
        let (_, len) = read_varint(&bytes[at..]).unwrap();
        let mut hostile = BytesMut::from(&bytes[..at]);
        write_varint(u64::MAX, &mut hostile);
        hostile.extend_from_slice(&bytes[at + len..]);
        let read = Pin::new(&mut codec).deserialize(&hostile).unwrap();
        let ClientMessage::Request(read) = read else {
            panic!("not a request")
        };
        assert_eq!((read.id, read.message), (7, 42));
        // The nanoseconds are left as sent: a u32, so at most 4.3 s more than a year, which tarpc
        // still represents (its limit is about two years). This frame sent a real, small one.
        let latest = std::time::Instant::now() + MAX_DEADLINE + Duration::from_secs(1);
        assert!(read.context.deadline <= latest);
    }
}
