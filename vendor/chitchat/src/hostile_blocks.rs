//! Adversarial tests of the gossip crate's block codec (`ruzstd`): hostile zstd frames fed to
//! `decompress_block` and `deserialize_stream`, the peak allocation of a worst-case block and
//! stream (a counting global allocator, per thread), one hostile Ack over a real UDP socket,
//! and `serialized_len_upperbound_after` against incompressible items around the block threshold.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use crate::limits::MAX_DECOMPRESSED_LEN;
use crate::serialize::{
    compress_block, decompress_block, deserialize_stream, CompressedStreamWriter, Serializable,
};

// ---- a counting allocator: bytes live and their peak, per thread ----

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn add(delta: isize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| {
            if now > peak.get() {
                peak.set(now)
            }
        });
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            add(layout.size() as isize);
        }
        ptr
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            add(layout.size() as isize);
        }
        ptr
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        add(-(layout.size() as isize));
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            // A moving realloc holds both for a moment.
            add(new_size as isize);
            add(-(layout.size() as isize));
        }
        new
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// The most bytes `f` had allocated at once on this thread, beyond what was live before it.
fn peak_allocated<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|peak| peak.set(base));
    let out = f();
    let peak = PEAK.with(Cell::get);
    (out, (peak - base).max(0) as usize)
}

// ---- hand-written zstd frames (RFC 8878) ----

const MAGIC: [u8; 4] = 0xFD2F_B528u32.to_le_bytes();
const ROOM: usize = u16::MAX as usize;

/// A frame header that is not single segment: a window of `2^(10+exponent) + mantissa/8 of it`.
fn header_window(exponent: u8, mantissa: u8) -> Vec<u8> {
    let mut frame = MAGIC.to_vec();
    frame.push(0);
    frame.push((exponent << 3) | mantissa);
    frame
}

/// A single-segment frame header declaring `content` bytes in a field of `fcs_len` bytes.
fn header_single_segment(content: u64, fcs_len: usize) -> Vec<u8> {
    let mut frame = MAGIC.to_vec();
    let (flag, value) = match fcs_len {
        1 => (0u8, content),
        2 => (1, content - 256),
        4 => (2, content),
        _ => (3, content),
    };
    frame.push((flag << 6) | 0b0010_0000);
    frame.extend(&value.to_le_bytes()[..fcs_len]);
    frame
}

fn block_header(last: bool, kind: u8, size: u32) -> [u8; 3] {
    let value = (size << 3) | ((kind as u32) << 1) | last as u32;
    let bytes = value.to_le_bytes();
    [bytes[0], bytes[1], bytes[2]]
}

fn rle_block(last: bool, size: u32, byte: u8) -> Vec<u8> {
    let mut block = block_header(last, 1, size).to_vec();
    block.push(byte);
    block
}

fn raw_block(last: bool, data: &[u8]) -> Vec<u8> {
    let mut block = block_header(last, 0, data.len() as u32).to_vec();
    block.extend(data);
    block
}

/// A stream of `blocks` compressed blocks, each `frame`, then the end tag.
fn stream_of(blocks: &[Vec<u8>]) -> Vec<u8> {
    let mut stream = Vec::new();
    for frame in blocks {
        stream.push(1u8); // BlockType::Compressed
        stream.extend((frame.len() as u16).to_le_bytes());
        stream.extend(frame);
    }
    stream.push(0u8);
    stream
}

fn decompress(frames: &[u8]) -> (anyhow::Result<usize>, usize) {
    let mut output = vec![0u8; ROOM];
    let (result, peak) = peak_allocated(|| decompress_block(frames, &mut output));
    (result, peak)
}

fn refused(frames: &[u8], what: &str) -> String {
    let (result, peak) = decompress(frames);
    let error = match result {
        Ok(len) => panic!("{what}: accepted, {len} bytes"),
        Err(error) => format!("{error:#}"),
    };
    assert!(peak <= 4 * ROOM, "{what}: {peak} bytes allocated at once");
    error
}

#[test]
fn huge_declared_windows_are_refused_from_the_header() {
    // 2^41 bytes, and every exponent above the room.
    for exponent in 6..=31u8 {
        for mantissa in [0u8, 7] {
            let mut frame = header_window(exponent, mantissa);
            frame.extend(rle_block(true, 1, 0));
            let error = refused(&frame, &format!("window 2^{}", 10 + exponent));
            assert!(error.to_lowercase().contains("window"), "{error}");
        }
    }
    // Single segment: the content size is the window.
    for (content, fcs_len) in [
        (ROOM as u64 + 1, 2),
        (u32::MAX as u64, 4),
        (u64::MAX, 8),
        (1 << 40, 8),
    ] {
        let mut frame = header_single_segment(content, fcs_len);
        frame.extend(rle_block(true, 1, 0));
        refused(&frame, &format!("content size {content}"));
    }
}

#[test]
fn rle_bombs_stop_at_the_room() {
    // One RLE block larger than the window (Block_Maximum_Size).
    let mut frame = header_single_segment(1000, 2);
    frame.extend(rle_block(true, (1 << 21) - 1, 7));
    refused(&frame, "RLE block of 2 MiB in a 1000-byte window");
    // Many RLE blocks of a window each, in one frame: 32 KiB window, 1000 blocks = 32 MiB.
    let mut frame = header_window(5, 0);
    for _ in 0..1000 {
        frame.extend(rle_block(false, 32 * 1024, 7));
    }
    frame.extend(rle_block(true, 32 * 1024, 7));
    let started = Instant::now();
    let error = refused(&frame, "32 MiB of RLE blocks");
    assert!(error.contains("more than"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(2));
    // Many frames, each a full room of RLE: the second overflows.
    let mut one = header_single_segment(ROOM as u64, 2);
    one.extend(rle_block(true, ROOM as u32, 7));
    assert_eq!(decompress(&one).0.unwrap(), ROOM);
    let frames: Vec<u8> = one.iter().copied().cycle().take(one.len() * 5000).collect();
    let error = refused(&frames, "5000 frames of 64 KiB");
    assert!(error.contains("more than"), "{error}");
    // A content size that lies (declares 10, holds 1000).
    let mut frame = header_single_segment(10, 1);
    frame.extend(rle_block(true, 1000, 7));
    refused(&frame, "content 10, block 1000");
}

#[test]
fn a_worst_case_block_allocates_within_its_bound() {
    // Single segment of the full room, one RLE block filling it.
    let mut full = header_single_segment(ROOM as u64, 2);
    full.extend(rle_block(true, ROOM as u32, 7));
    let (result, peak_full) = decompress(&full);
    assert_eq!(result.unwrap(), ROOM);
    // Largest window a non-single-segment frame may declare under the room (60 KiB), two blocks:
    // the window kept while decoding plus a block.
    let mut windowed = header_window(5, 7); // 32 KiB + 7 * 4 KiB = 60 KiB
    windowed.extend(rle_block(false, 60 * 1024, 1));
    windowed.extend(rle_block(false, 60 * 1024, 2));
    windowed.extend(rle_block(true, 1, 3));
    let (result, peak_windowed) = decompress(&windowed);
    assert!(result.is_err());
    // A compressed (libzstd) block of the full room.
    let data: Vec<u8> = (0..ROOM).map(|i| (i % 251) as u8 ^ (i / 4096) as u8).collect();
    let libzstd = zstd::bulk::compress(&data, 3).unwrap();
    let (result, peak_zstd) = decompress(&libzstd);
    assert_eq!(result.unwrap(), ROOM);
    eprintln!(
        "peak allocation of one block (room {ROOM}): RLE full {peak_full}, windowed 60 KiB \
         {peak_windowed}, libzstd full {peak_zstd}"
    );
    // serialize.rs: "the decoder holds at most its window and one block of at most that window,
    // both at most output.len()". Allocation slack allowed: tables, the ring buffer's sentinel
    // and its power-of-two growth.
    for peak in [peak_full, peak_windowed, peak_zstd] {
        assert!(peak <= 3 * ROOM + 64 * 1024, "{peak} bytes at once for one block");
    }
}

#[test]
fn a_worst_case_stream_allocates_within_its_bound() {
    // 20 blocks of 64 KiB of RLE each: 1.25 MiB declared, in ~250 bytes.
    let mut one = header_single_segment(ROOM as u64, 2);
    one.extend(rle_block(true, ROOM as u32, 7));
    let stream = stream_of(&vec![one.clone(); 20]);
    assert!(stream.len() < 300);
    let (result, peak) =
        peak_allocated(|| deserialize_stream::<u8>(&mut &stream[..]).map(|items| items.len()));
    let error = format!("{:#}", result.unwrap_err());
    assert!(error.contains("more than"), "{error}");
    eprintln!("peak allocation of a refused 1.25 MiB stream: {peak} bytes");
    // The stream's decompressed bytes (at most 1 MiB, in a doubling Vec) and one block's buffers.
    assert!(
        peak <= 2 * MAX_DECOMPRESSED_LEN + 4 * ROOM,
        "{peak} bytes at once for a stream bounded at {MAX_DECOMPRESSED_LEN}"
    );
    // Exactly at the bound: 16 blocks of 65535 plus one of 16 bytes = 1 MiB: accepted.
    let mut last = header_single_segment(16, 1);
    last.extend(rle_block(true, 16, 7));
    let mut blocks = vec![one; 16];
    blocks.push(last);
    let stream = stream_of(&blocks);
    let items = deserialize_stream::<u8>(&mut &stream[..]).unwrap();
    assert_eq!(items.len(), MAX_DECOMPRESSED_LEN);
}

#[test]
fn skippable_frames_dictionaries_checksums_reserved_bits() {
    let mut good = header_single_segment(3, 1);
    good.extend(raw_block(true, b"abc"));
    // Skippable frame then a frame: decodes the frame.
    for magic in [0x184D_2A50u32, 0x184D_2A5F] {
        let mut frames = magic.to_le_bytes().to_vec();
        frames.extend(4u32.to_le_bytes());
        frames.extend([9, 9, 9, 9]);
        frames.extend(&good);
        assert_eq!(decompress(&frames).0.unwrap(), 3);
    }
    // Skippable frame whose length runs past the block, up to u32::MAX.
    for length in [5u32, 1 << 20, u32::MAX] {
        let mut frames = 0x184D_2A50u32.to_le_bytes().to_vec();
        frames.extend(length.to_le_bytes());
        frames.extend([9, 9, 9, 9]);
        refused(&frames, &format!("skippable frame of {length}"));
    }
    // Thousands of empty skippable frames: no hang.
    let mut frames = Vec::new();
    for _ in 0..8000 {
        frames.extend(0x184D_2A50u32.to_le_bytes());
        frames.extend(0u32.to_le_bytes());
    }
    let started = Instant::now();
    assert_eq!(decompress(&frames).0.unwrap(), 0);
    assert!(started.elapsed() < Duration::from_secs(2));
    // Thousands of empty frames.
    let mut empty = header_single_segment(0, 1);
    empty.extend(raw_block(true, b""));
    let frames: Vec<u8> = empty.iter().copied().cycle().take(empty.len() * 7000).collect();
    let started = Instant::now();
    assert_eq!(decompress(&frames).0.unwrap(), 0);
    assert!(started.elapsed() < Duration::from_secs(2));
    // A dictionary id (1, 2 and 4 bytes): no dictionary is known.
    for (flag, id_len) in [(1u8, 1usize), (2, 2), (3, 4)] {
        let mut frame = MAGIC.to_vec();
        frame.push(0b0010_0000 | flag);
        frame.extend(&[7u8, 0, 0, 0][..id_len]);
        frame.push(3);
        frame.extend(raw_block(true, b"abc"));
        refused(&frame, &format!("dictionary id of {id_len} bytes"));
    }
    // Reserved bit (bit 3): the RFC says a decoder must refuse the frame.
    let mut frame = good.clone();
    frame[4] |= 0b0000_1000;
    let (reserved, _) = decompress(&frame);
    eprintln!("reserved bit set: {reserved:?}");
    // Reserved block type 3.
    let mut frame = header_single_segment(3, 1);
    frame.extend(block_header(true, 3, 3));
    frame.extend(b"abc");
    refused(&frame, "reserved block type");
    // Checksum flag: a libzstd frame with a checksum decodes; one with its checksum cut short is
    // refused; a wrong checksum is not checked (ruzstd without `hash`).
    let data = b"hello hello hello hello hello hello hello".repeat(10);
    let mut compressor = zstd::bulk::Compressor::new(3).unwrap();
    compressor.include_checksum(true).unwrap();
    let with_checksum = compressor.compress(&data).unwrap();
    assert_eq!(with_checksum[4] & 0b100, 0b100);
    assert_eq!(decompress(&with_checksum).0.unwrap(), data.len());
    refused(&with_checksum[..with_checksum.len() - 2], "checksum cut short");
    let mut wrong = with_checksum.clone();
    *wrong.last_mut().unwrap() ^= 0xff;
    eprintln!("wrong checksum: {:?}", decompress(&wrong).0);
}

#[test]
fn every_truncation_of_valid_frames_is_refused_or_short_never_a_panic() {
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 13) as u8 + b'a').collect();
    let mut ours = Vec::new();
    compress_block(&data, &mut ours);
    let libzstd = zstd::bulk::compress(&data, 3).unwrap();
    for frame in [ours, libzstd] {
        assert_eq!(decompress(&frame).0.unwrap(), data.len());
        for cut in 0..frame.len() {
            let mut output = vec![0u8; ROOM];
            if let Ok(len) = decompress_block(&frame[..cut], &mut output) {
                assert!(len < data.len(), "a cut at {cut} decoded everything");
            }
        }
    }
}

/// A valid frame with a few bytes overwritten.
fn mutated_frame() -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::collection::vec(any::<u8>(), 1..3000),
        any::<bool>(),
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(seed, libzstd, edits, cut)| {
            let data: Vec<u8> = seed.iter().flat_map(|b| [*b, *b, b'x']).collect();
            let mut frame = if libzstd {
                zstd::bulk::compress(&data, 3).unwrap()
            } else {
                let mut frame = Vec::new();
                compress_block(&data, &mut frame);
                frame
            };
            for (at, byte) in edits {
                let at = at.index(frame.len());
                frame[at] = byte;
            }
            let cut = cut.index(frame.len() + 1);
            frame.truncate(cut.max(frame.len() / 2));
            frame
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn mutated_frames_never_panic_nor_overflow(frame in mutated_frame()) {
        let mut output = vec![0u8; 4096];
        let (result, peak) = peak_allocated(|| decompress_block(&frame, &mut output));
        if let Ok(len) = result {
            prop_assert!(len <= output.len());
        }
        prop_assert!(peak <= 4 * ROOM, "{} bytes at once", peak);
    }

    #[test]
    fn arbitrary_bytes_after_a_header_never_panic(
        fhd in any::<u8>(), window in any::<u8>(), rest in proptest::collection::vec(any::<u8>(), 0..600)
    ) {
        let mut frame = MAGIC.to_vec();
        frame.push(fhd);
        frame.push(window);
        frame.extend(rest);
        let mut output = vec![0u8; 1000];
        let (result, peak) = peak_allocated(|| decompress_block(&frame, &mut output));
        if let Ok(len) = result {
            prop_assert!(len <= 1000);
        }
        prop_assert!(peak <= 4 * ROOM, "{} bytes at once", peak);
    }

    #[test]
    fn arbitrary_streams_never_panic(stream in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let _ = deserialize_stream::<u8>(&mut &stream[..]);
    }

}

proptest! {
    // Debug builds code up to 64 KiB twice per case: fewer cases.
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn our_blocks_are_read_by_libzstd_and_libzstds_by_us(
        data in proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), any::<u8>()], 1..70_000)
    ) {
        let data = &data[..data.len().min(ROOM)];
        let mut ours = Vec::new();
        compress_block(data, &mut ours);
        if !ours.is_empty() {
            let back = zstd::bulk::decompress(&ours, data.len()).unwrap();
            prop_assert_eq!(&back[..], data);
        }
        let theirs = zstd::bulk::compress(data, 3).unwrap();
        let mut output = vec![0u8; ROOM];
        let len = decompress_block(&theirs, &mut output).unwrap();
        prop_assert_eq!(&output[..len], data);
    }

    /// The writer's bound, used to keep a delta under its mtu: a stream never exceeds the bound
    /// given before its last item, with incompressible items of sizes around multiples of the
    /// block threshold.
    #[test]
    fn the_bound_holds_around_block_threshold_multiples(
        threshold in prop_oneof![Just(1u16), Just(2), Just(3), Just(255), Just(256), Just(1024), 16u16..4096, Just(u16::MAX)],
        sizes in proptest::collection::vec((0usize..4, -3isize..=3), 1..6),
        compressible in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut writer = CompressedStreamWriter::with_block_threshold(threshold);
        let mut bound = 0;
        let mut items = Vec::new();
        for (multiple, offset) in sizes {
            // A string item is 2 bytes of length then its bytes.
            let len = (multiple * threshold as usize) as isize + offset - 2;
            let len = len.clamp(0, u16::MAX as isize - 2) as usize;
            let item: String = if compressible {
                "a".repeat(len)
            } else {
                (0..len).map(|_| rng.alphanumeric()).collect()
            };
            bound = writer.serialized_len_upperbound_after(&item);
            writer.append(&item);
            items.push(item);
        }
        let stream = writer.finish();
        prop_assert!(stream.len() <= bound, "stream {} over its bound {}", stream.len(), bound);
        let back: Vec<String> = deserialize_stream(&mut &stream[..]).unwrap();
        prop_assert_eq!(back, items);
    }

}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The delta writer's use: append while the bound is within the mtu, then the stream is.
    #[test]
    fn a_stream_filled_up_to_an_mtu_stays_under_it(
        threshold in prop_oneof![Just(16u16), Just(64), Just(1000), 16u16..2000],
        mtu in 20usize..70_000,
        lens in proptest::collection::vec(1usize..3000, 1..200),
        seed in any::<u64>(),
    ) {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut writer = CompressedStreamWriter::with_block_threshold(threshold);
        for len in lens {
            let item: String = (0..len).map(|_| rng.alphanumeric()).collect();
            if writer.serialized_len_upperbound_after(&item) > mtu {
                break;
            }
            writer.append(&item);
        }
        let stream = writer.finish();
        prop_assert!(stream.len() <= mtu, "stream {} over the mtu {}", stream.len(), mtu);
    }
}

#[tokio::test]
async fn hostile_acks_over_a_real_udp_socket_are_dropped_and_the_socket_keeps_reading() {
    use std::net::SocketAddr;

    use tokio::net::UdpSocket;

    use crate::delta::Delta;
    use crate::message::{ChitchatEnvelope, ChitchatMessage, ProtocolVersion};
    use crate::transport::{Transport, UdpTransport};

    let bind_addr: SocketAddr = ([127, 0, 0, 1], 0).into();
    let sender = UdpSocket::bind(bind_addr).await.unwrap();
    let mut receiver = UdpTransport.open(bind_addr).await.unwrap();
    let to = receiver.local_addr().unwrap();
    // An Ack with an empty delta: its last byte is the stream's end tag.
    let mut prefix = Vec::new();
    ChitchatEnvelope {
        version: ProtocolVersion::V2,
        message: ChitchatMessage::Ack {
            delta: Delta::default(),
        },
    }
    .serialize(&mut prefix);
    assert_eq!(prefix.pop(), Some(0));
    let mut one = header_single_segment(ROOM as u64, 2);
    one.extend(rle_block(true, ROOM as u32, 7));
    let mut huge_window = header_window(31, 7);
    huge_window.extend(rle_block(true, 1, 0));
    let mut bomb = header_window(5, 0);
    for _ in 0..2000 {
        bomb.extend(rle_block(false, 32 * 1024, 7));
    }
    let hostile = [
        stream_of(&vec![one; 200]),
        stream_of(&[huge_window]),
        stream_of(&[bomb]),
        stream_of(&[0x184D_2A50u32.to_le_bytes().into_iter().chain(u32::MAX.to_le_bytes()).collect()]),
    ];
    for stream in &hostile {
        let mut datagram = prefix.clone();
        datagram.extend(stream);
        assert!(datagram.len() < 65_000);
        sender.send_to(&datagram, to).await.unwrap();
    }
    let valid = ChitchatEnvelope {
        version: ProtocolVersion::V2,
        message: ChitchatMessage::BadCluster,
    };
    let mut payload = Vec::new();
    valid.serialize(&mut payload);
    sender.send_to(&payload, to).await.unwrap();
    let received = tokio::time::timeout(Duration::from_secs(10), receiver.recv())
        .await
        .expect("the socket stopped reading")
        .unwrap();
    assert_eq!(received.envelope, valid, "a hostile datagram was accepted");
}
