//! bincode 1's variable-length integers, as its default options write them (tarpc's frames
//! were written with them, and so are ours, [`super::super::wire::envelope`]): below 251 one
//! byte, else a tag (251, 252, 253) and 2, 4 or 8 little-endian bytes. Written by hand where a
//! small call's frame is (`frames.rs`).

use tokio_util::bytes::BytesMut;

/// `value` as bincode's varint writes it.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_varint_reads_back_at_every_width() {
        for value in [
            0u64,
            250,
            251,
            0xffff,
            0x1_0000,
            0xffff_ffff,
            1 << 33,
            u64::MAX,
        ] {
            let mut bytes = BytesMut::new();
            write_varint(value, &mut bytes);
            let written: Vec<u8> =
                bincode::Options::serialize(bincode::DefaultOptions::new(), &value).unwrap();
            assert_eq!(&bytes[..], &written[..], "as bincode writes {value}");
        }
    }
}
