//! The floor: the least a multiplexed request/response over one TCP connection can do, written
//! here so that every figure of the call path has it beside it.
//!
//! One connection on loopback (`TCP_NODELAY` on both ends). A frame is a `u32` length (of what
//! follows), a `u64` call id and the payload. The client's callers hand their frames to one
//! writer task and wait on a oneshot kept in a table under the call's id; a reader task matches
//! each reply to its waiting call. The server answers the frames of each read in order from one
//! task. Both ends coalesce: the client writes every frame queued by the time it writes, the
//! server every reply to what one read brought in, each in one `write_all`.
//!
//! No timeout, no deadline, no admission, no bound on anything, no codec: the cost of the bytes
//! and the wake-ups alone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::bytes::{Buf, BufMut, BytesMut};

/// The client: cheap to clone, one connection for all clones.
#[derive(Clone)]
pub(crate) struct EchoClient(Arc<Shared>);

struct Shared {
    next_id: AtomicU64,
    waiting: Mutex<HashMap<u64, oneshot::Sender<Vec<u8>>>>,
    frames: mpsc::UnboundedSender<(u64, Vec<u8>)>,
}

impl EchoClient {
    /// Sends `payload` and waits for it to come back.
    pub(crate) async fn echo(&self, payload: Vec<u8>) -> Vec<u8> {
        let id = self.0.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply, replied) = oneshot::channel();
        self.0.waiting.lock().expect("lock").insert(id, reply);
        self.0.frames.send((id, payload)).expect("the writer runs");
        replied.await.expect("the reader runs")
    }
}

/// A server on a port from the OS and one client connected to it.
pub(crate) async fn start() -> EchoClient {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.expect("listens");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            stream.set_nodelay(true).expect("nodelay");
            tokio::spawn(answer(stream));
        }
    });
    let stream = TcpStream::connect(addr).await.expect("connects");
    stream.set_nodelay(true).expect("nodelay");
    let (read, write) = stream.into_split();
    let (frames, queued) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        next_id: AtomicU64::new(0),
        waiting: Mutex::new(HashMap::new()),
        frames,
    });
    tokio::spawn(write_frames(write, queued));
    tokio::spawn(read_replies(read, shared.clone()));
    EchoClient(shared)
}

/// The server's one task per connection: every complete frame of a read answered, the answers
/// written together.
async fn answer(mut stream: TcpStream) {
    let (mut input, mut output) = (BytesMut::with_capacity(64 * 1024), BytesMut::new());
    while stream.read_buf(&mut input).await.is_ok_and(|n| n > 0) {
        while let Some(frame) = next_frame(&mut input) {
            output.put_u32(frame.len() as u32);
            output.put_slice(&frame);
        }
        if stream.write_all(&output).await.is_err() {
            return;
        }
        output.clear();
    }
}

/// The client's writer: every frame queued when it wakes, in one write.
async fn write_frames(
    mut write: OwnedWriteHalf,
    mut queued: mpsc::UnboundedReceiver<(u64, Vec<u8>)>,
) {
    let mut output = BytesMut::new();
    while let Some(mut frame) = queued.recv().await {
        loop {
            let (id, payload) = frame;
            output.put_u32((8 + payload.len()) as u32);
            output.put_u64(id);
            output.put_slice(&payload);
            match queued.try_recv() {
                Ok(next) => frame = next,
                Err(_) => break,
            }
        }
        if write.write_all(&output).await.is_err() {
            return;
        }
        output.clear();
    }
}

/// The client's reader: each reply to the call waiting under its id.
async fn read_replies(mut read: OwnedReadHalf, shared: Arc<Shared>) {
    let mut input = BytesMut::with_capacity(64 * 1024);
    while read.read_buf(&mut input).await.is_ok_and(|n| n > 0) {
        while let Some(mut frame) = next_frame(&mut input) {
            let id = frame.get_u64();
            let waiting = shared.waiting.lock().expect("lock").remove(&id);
            if let Some(reply) = waiting {
                let _ = reply.send(frame.to_vec());
            }
        }
    }
}

/// The next whole frame in `input` without its length (the id, then the payload), if one has
/// arrived.
fn next_frame(input: &mut BytesMut) -> Option<BytesMut> {
    let length = u32::from_be_bytes(input.get(..4)?.try_into().ok()?) as usize;
    if input.len() < 4 + length {
        return None;
    }
    input.advance(4);
    Some(input.split_to(length))
}
