//! The provider's limits against a peer that breaks the rules, over real sockets on loopback:
//! raw frames written here, as a hostile or broken peer would write them.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use tarpc::tokio_serde::Serializer as _;
use tarpc::tokio_serde::formats::Bincode;
use tarpc::{ClientMessage, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

use super::budget::ConnectionLimits;
use super::frames::FrameLimits;
use super::serve::{ServeConfig, serve};
use crate::options::CallOptions;
use crate::server::{DispatchFuture, Dispatcher, Provide, dispatch_with};
use crate::service::{FunctionDescription, ServiceDescription, encode_value, signature_hash};
use crate::transport::wire::handshake::{self, Hello};
use crate::transport::wire::{Head, Request, v2};

/// A service whose `park` never returns, whose `echo` returns its argument and whose `nap`
/// returns it after 50 ms; all counted.
struct Sink {
    runs: Arc<AtomicUsize>,
}

fn description() -> &'static ServiceDescription {
    static DESCRIPTION: std::sync::OnceLock<ServiceDescription> = std::sync::OnceLock::new();
    DESCRIPTION.get_or_init(|| {
        let function = |name: &str| FunctionDescription {
            name: name.to_owned(),
            signature: format!("{name}(Vec<u8>) -> Vec<u8>"),
            shape: None,
            cached_hash: Default::default(),
            idempotent: true,
            at_most_once: false,
            options: CallOptions::default(),
            params: Vec::new(),
        };
        ServiceDescription::new(
            "sink",
            semver::Version::new(1, 0, 0),
            None,
            CallOptions::default(),
            vec![function("echo"), function("park"), function("nap")],
        )
    })
}

impl Provide for Sink {
    fn description(&self) -> &'static ServiceDescription {
        description()
    }

    fn dispatch(&self, function: usize, args: &[u8]) -> DispatchFuture {
        self.runs.fetch_add(1, Ordering::SeqCst);
        dispatch_with(args, move |(bytes,): (Vec<u8>,)| async move {
            match function {
                1 => std::future::pending::<()>().await,
                2 => tokio::time::sleep(Duration::from_millis(50)).await,
                _ => {}
            }
            bytes
        })
    }
}

struct Provider {
    addr: SocketAddr,
    runs: Arc<AtomicUsize>,
    _stop: watch::Sender<bool>,
}

fn config() -> ServeConfig {
    ServeConfig {
        node: Arc::from("sink-1"),
        versions: 2..=2,
        limits: FrameLimits {
            max_frame: 1 << 20,
            frame_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
        },
        connection: ConnectionLimits {
            max_in_flight: 1000,
            per_connection: 1 << 20,
        },
        max_buffered_bytes: 4 << 20,
        max_opening: 64,
        max_connections: 64,
        tls: None,
    }
}

async fn provider(config: ServeConfig) -> Provider {
    let runs = Arc::new(AtomicUsize::new(0));
    let dispatcher = Arc::new(Dispatcher::new(1 << 20, 1024, Arc::from([])));
    dispatcher.host(Arc::new(Sink { runs: runs.clone() }));
    let (stop, stopped) = watch::channel(false);
    let (addr, _task, _incoming) = serve(
        ([127, 0, 0, 1], 0).into(),
        dispatcher,
        config,
        stopped,
        watch::channel(true).1,
    )
    .await
    .unwrap();
    Provider {
        addr,
        runs,
        _stop: stop,
    }
}

/// A connection from `from` through the handshake.
async fn connect_from(to: SocketAddr, from: [u8; 4]) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind((from, 0).into()).unwrap();
    handshaken(socket.connect(to).await.unwrap()).await
}

/// `stream` after a wire 2 handshake, which must be agreed.
async fn handshaken(mut stream: TcpStream) -> TcpStream {
    let hello = Hello {
        versions: (2, 2),
        node: "raw".to_owned(),
        max_frame: 1 << 20,
        ..Hello::default()
    };
    let welcome = handshake::offer(&mut stream, &hello).await.unwrap();
    assert_eq!(welcome.version, 2, "{:?}", welcome.refusal);
    stream
}

async fn connect(to: SocketAddr) -> TcpStream {
    connect_from(to, [127, 0, 0, 1]).await
}

/// A length-prefixed request frame: `function` of `sink` with `payload`, id `id`, `left` to run.
fn frame(id: u64, function: &str, payload: Vec<u8>, left: Duration) -> Vec<u8> {
    frame_with(id, function, payload, left, Head::default())
}

fn frame_with(id: u64, function: &str, payload: Vec<u8>, left: Duration, head: Head) -> Vec<u8> {
    let request = Request {
        service: "sink".into(),
        function: function.to_owned().into(),
        signature: signature_hash(&format!("{function}(Vec<u8>) -> Vec<u8>")),
        args: encode_value(&(payload,)).unwrap(),
        head,
        attempt: AtomicU32::new(1),
    };
    let mut context = tarpc::context::current();
    context.deadline = std::time::Instant::now() + left;
    let message = ClientMessage::Request(tarpc::Request {
        context,
        id,
        message: v2::WireRequest::Call {
            request: v2::RequestFrame(Arc::new(request)),
        },
    });
    let mut codec = Bincode::<(), ClientMessage<v2::WireRequest>>::default();
    let body = Pin::new(&mut codec).serialize(&message).unwrap();
    let mut bytes = (body.len() as u32).to_be_bytes().to_vec();
    bytes.extend_from_slice(&body);
    bytes
}

/// The next reply on `stream`.
async fn reply(stream: &mut TcpStream) -> Response<v2::WireResponse> {
    let len = stream.read_u32().await.unwrap() as usize;
    let mut body = vec![0; len];
    stream.read_exact(&mut body).await.unwrap();
    use tarpc::tokio_serde::Deserializer as _;
    let mut codec = Bincode::<Response<v2::WireResponse>, ()>::default();
    Pin::new(&mut codec)
        .deserialize(&tokio_util::bytes::BytesMut::from(&body[..]))
        .unwrap()
}

/// The id of the next reply on `stream`, which must come within `within` (`what` says whose).
async fn answered(stream: &mut TcpStream, within: Duration, what: &str) -> u64 {
    tokio::time::timeout(within, reply(stream))
        .await
        .unwrap_or_else(|_| panic!("{what}: no reply within {within:?}"))
        .request_id
}

/// Waits until `stream` is closed by the other side; how long that took.
async fn closed(stream: &mut TcpStream, within: Duration) -> Duration {
    let start = Instant::now();
    let mut sink = vec![0; 64 << 10];
    tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .expect("the provider closes the connection");
    start.elapsed()
}

/// Waits until `condition` holds (within 5 s).
async fn until(what: &str, condition: impl Fn() -> bool) {
    let start = Instant::now();
    while !condition() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "timed out waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A legitimate echo on a new connection gets its reply.
async fn echo_works(addr: SocketAddr) {
    let mut stream = connect(addr).await;
    stream
        .write_all(&frame(1, "echo", b"ping".to_vec(), Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(
        answered(
            &mut stream,
            Duration::from_secs(2),
            "a legitimate call is answered"
        )
        .await,
        1
    );
}

#[tokio::test]
async fn a_handler_that_waits_goes_on_in_its_own_task_and_those_behind_it_are_answered() {
    // `echo` answers when it is read, on the connection's task; `nap` and `park` wait, and go
    // on in tasks of their own. One write brings all of them: the echoes behind a napping and
    // a parked request are answered at once, the nap's reply comes when it wakes.
    let provider = provider(config()).await;
    let mut stream = connect(provider.addr).await;
    let mut bytes = Vec::new();
    let left = Duration::from_secs(10);
    bytes.extend(frame(1, "nap", b"one".to_vec(), left));
    bytes.extend(frame(2, "park", b"two".to_vec(), left));
    bytes.extend(frame(3, "echo", b"three".to_vec(), left));
    bytes.extend(frame(4, "echo", b"four".to_vec(), left));
    stream.write_all(&bytes).await.unwrap();
    let mut order = Vec::new();
    for _ in 0..3 {
        order.push(answered(&mut stream, Duration::from_secs(5), "answered").await);
    }
    assert_eq!(order, [3, 4, 1], "answered in the order they finished");
    assert_eq!(provider.runs.load(Ordering::SeqCst), 4);
    echo_works(provider.addr).await;
}

#[tokio::test]
async fn a_hundred_requests_in_one_write_are_all_answered() {
    // The provider's loop writes the replies of every 32 requests it starts before it reads
    // on (`answering.rs`, `STARTED_BETWEEN_WRITES`): all are answered, none lost in between.
    let provider = provider(config()).await;
    let mut stream = connect(provider.addr).await;
    let mut bytes = Vec::new();
    for id in 0..100 {
        bytes.extend(frame(
            id,
            "echo",
            vec![id as u8; 10],
            Duration::from_secs(10),
        ));
    }
    stream.write_all(&bytes).await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..100 {
        ids.push(answered(&mut stream, Duration::from_secs(5), "answered").await);
    }
    ids.sort_unstable();
    assert_eq!(ids, (0..100).collect::<Vec<u64>>());
}

#[tokio::test]
async fn a_frame_behind_one_that_waited_for_room_is_timed_from_when_that_one_got_in() {
    // Frame A waits for the connection's share of bytes (a parked request holds most of it
    // until its deadline and the grace pass, about 1.2 s); half of frame B came with it. B's
    // rest follows A's reply. Timed from when its first bytes were read, B would be 1.2 s
    // late against a 300 ms frame timeout, and the connection closed for the node's own wait.
    let mut config = config();
    config.limits.frame_timeout = Duration::from_millis(300);
    config.connection.per_connection = 64 << 10;
    let provider = provider(config).await;
    let mut stream = connect(provider.addr).await;
    let park = frame(1, "park", vec![0; 40 << 10], Duration::from_millis(200));
    stream.write_all(&park).await.unwrap();
    until("it is parked", || provider.runs.load(Ordering::SeqCst) == 1).await;
    let a = frame(2, "echo", vec![1; 30 << 10], Duration::from_secs(10));
    let b = frame(3, "echo", b"b".to_vec(), Duration::from_secs(10));
    let (b_head, b_rest) = b.split_at(b.len() / 2);
    stream.write_all(&[&a[..], b_head].concat()).await.unwrap();
    assert_eq!(
        answered(
            &mut stream,
            Duration::from_secs(5),
            "A is answered once it got in"
        )
        .await,
        2
    );
    stream.write_all(b_rest).await.unwrap();
    assert_eq!(
        answered(
            &mut stream,
            Duration::from_secs(2),
            "B is answered: its connection was not closed"
        )
        .await,
        3
    );
}

#[tokio::test]
async fn a_connection_with_its_most_requests_in_flight_is_not_read_from() {
    let mut config = config();
    config.connection.max_in_flight = 10;
    let provider = provider(config).await;
    let mut stream = connect(provider.addr).await;
    let mut bytes = Vec::new();
    for id in 0..50 {
        bytes.extend(frame(id, "park", vec![0; 100], Duration::from_secs(60)));
    }
    stream.write_all(&bytes).await.unwrap();
    until("ten run", || provider.runs.load(Ordering::SeqCst) == 10).await;
    // Another caller gets through; by then the provider would have read the rest if it did.
    echo_works(provider.addr).await;
    assert_eq!(
        provider.runs.load(Ordering::SeqCst),
        11,
        "ten parked, one echo"
    );
}

#[tokio::test]
async fn a_connection_past_its_share_of_bytes_waits_and_others_are_served() {
    let mut config = config();
    config.connection.per_connection = 256 << 10;
    let provider = provider(config).await;
    let mut stream = connect(provider.addr).await;
    let mut bytes = Vec::new();
    for id in 0..8 {
        bytes.extend(frame(
            id,
            "park",
            vec![0; 100 << 10],
            Duration::from_secs(60),
        ));
    }
    let write = tokio::spawn(async move {
        let _ = stream.write_all(&bytes).await;
        stream
    });
    until("two run", || provider.runs.load(Ordering::SeqCst) == 2).await;
    echo_works(provider.addr).await;
    assert_eq!(
        provider.runs.load(Ordering::SeqCst),
        3,
        "two parked requests of 100 KiB fill a 256 KiB share; the third waits unread"
    );
    write.abort();
}

#[tokio::test]
async fn a_frame_begun_and_not_finished_is_closed_at_the_frame_timeout() {
    let mut config = config();
    config.limits.frame_timeout = Duration::from_millis(300);
    let provider = provider(config).await;
    let mut stream = connect(provider.addr).await;
    let whole = frame(1, "echo", vec![0; 1000], Duration::from_secs(5));
    stream.write_all(&whole[..500]).await.unwrap();
    let took = closed(&mut stream, Duration::from_secs(5)).await;
    assert!(took >= Duration::from_millis(250), "closed after {took:?}");
    echo_works(provider.addr).await;
}

#[tokio::test]
async fn an_idle_connection_is_closed_and_a_busy_one_is_not() {
    let mut config = config();
    config.limits.idle_timeout = Duration::from_millis(300);
    let provider = provider(config).await;
    let mut idle = connect(provider.addr).await;
    let mut busy = connect(provider.addr).await;
    busy.write_all(&frame(1, "park", vec![], Duration::from_secs(60)))
        .await
        .unwrap();
    let took = closed(&mut idle, Duration::from_secs(5)).await;
    assert!(took >= Duration::from_millis(250), "closed after {took:?}");
    // The busy one, with a request in flight, is still open twice the timeout later.
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_millis(600), busy.read(&mut byte)).await;
    assert!(read.is_err(), "closed with a request in flight: {read:?}");
}

#[tokio::test]
async fn a_frame_over_the_limit_a_reused_id_and_garbage_close_the_connection_at_once() {
    let provider = provider(config()).await;
    let mut over = connect(provider.addr).await;
    over.write_all(&(2u32 << 20).to_be_bytes()).await.unwrap();
    closed(&mut over, Duration::from_secs(2)).await;

    let mut reused = connect(provider.addr).await;
    let park = frame(7, "park", vec![], Duration::from_secs(60));
    reused
        .write_all(&[park.clone(), park].concat())
        .await
        .unwrap();
    closed(&mut reused, Duration::from_secs(2)).await;

    let mut garbage = connect(provider.addr).await;
    garbage
        .write_all(&[0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0xff])
        .await
        .unwrap();
    closed(&mut garbage, Duration::from_secs(2)).await;
    echo_works(provider.addr).await;
}

#[tokio::test]
async fn a_request_whose_deadline_has_passed_never_runs() {
    let provider = provider(config()).await;
    let mut stream = connect(provider.addr).await;
    stream
        .write_all(&frame(1, "echo", vec![1], Duration::ZERO))
        .await
        .unwrap();
    // Time left for the attempt, but none for the call: its budget is over.
    let spent = Head {
        budget_deadline: Some(Instant::now()),
        ..Head::default()
    };
    stream
        .write_all(&frame_with(
            2,
            "echo",
            vec![1],
            Duration::from_secs(5),
            spent,
        ))
        .await
        .unwrap();
    echo_works(provider.addr).await;
    assert_eq!(
        provider.runs.load(Ordering::SeqCst),
        1,
        "only the live echo ran"
    );
}

#[tokio::test]
async fn at_the_connection_bound_a_flooding_address_gives_way_to_a_new_caller() {
    let mut config = config();
    config.max_connections = 4;
    let provider = provider(config).await;
    let flood_from = [127, 0, 0, 2];
    let mut flood = Vec::new();
    for _ in 0..4 {
        flood.push(connect_from(provider.addr, flood_from).await);
    }
    // A caller from another address gets in, and the flood's oldest connection is closed.
    let mut caller = connect(provider.addr).await;
    caller
        .write_all(&frame(1, "echo", b"ping".to_vec(), Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(reply(&mut caller).await.request_id, 1);
    closed(&mut flood[0], Duration::from_secs(2)).await;
    // A fifth from the flood's address replaces one of its own idle ones.
    flood.push(connect_from(provider.addr, flood_from).await);
    closed(&mut flood[1], Duration::from_secs(2)).await;
    // With a request in flight on each of its connections, it is refused, and told why.
    for (id, stream) in flood.iter_mut().skip(2).enumerate() {
        let park = frame(id as u64, "park", vec![], Duration::from_secs(60));
        stream.write_all(&park).await.unwrap();
    }
    until("three parked", || provider.runs.load(Ordering::SeqCst) == 4).await;
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind((flood_from, 0).into()).unwrap();
    let mut sixth = socket.connect(provider.addr).await.unwrap();
    let hello = Hello {
        versions: (2, 2),
        node: "raw".to_owned(),
        ..Hello::default()
    };
    let refused = handshake::offer(&mut sixth, &hello).await.unwrap();
    assert!(refused.busy, "{refused:?}");
    assert!(refused.refusal.unwrap().contains("its limit"));
}

#[tokio::test]
async fn a_provider_that_stalls_inside_a_reply_frame_loses_the_connection_at_the_frame_timeout() {
    use super::connect::{ConnectConfig, TcpConnector};
    use crate::registry::NodeInfo;
    use crate::transport::TransportError;
    // A provider that agrees to wire 2, reads the request, then sends half a reply and stops.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let stalling = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let handshake::Opening::Hello(hello) = handshake::open(&mut stream).await.unwrap() else {
            panic!("no hello");
        };
        let welcome = handshake::welcome(&hello, &(2..=2), "stall-1", 1 << 20);
        handshake::answer(&mut stream, &welcome).await.unwrap();
        let mut request = vec![0u8; 4096];
        let _ = stream.read(&mut request).await.unwrap();
        stream.write_all(&[0, 0, 0, 100, 1, 2, 3]).await.unwrap();
        std::future::pending::<()>().await;
        drop(stream);
    });
    let connector = TcpConnector::new(ConnectConfig {
        node: Arc::from("caller-1"),
        versions: 2..=2,
        max_frame: 1 << 20,
        connect_timeout: Duration::from_secs(1),
        max_in_flight: 10,
        frame_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_secs(300),
        tls: None,
    });
    let to = NodeInfo::new("stall-1", addr, 1).with_wire(Some(2..=2));
    let request = Arc::new(Request {
        service: "sink".into(),
        function: "echo".into(),
        signature: 0,
        args: Vec::new().into(),
        head: Head::default(),
        attempt: AtomicU32::new(1),
    });
    let start = Instant::now();
    let sent = connector
        .send(&to, request, Instant::now() + Duration::from_secs(30))
        .await;
    let took = start.elapsed();
    assert!(matches!(sent, Err(TransportError::Lost(_))), "{sent:?}");
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(5),
        "{took:?}"
    );
    stalling.abort();
}

/// A connection from 127.0.0.1 with a small receive buffer: its replies back up at once.
async fn connect_slow_reader(to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    handshaken(socket.connect(to).await.unwrap()).await
}

/// A provider with a 16 MiB budget and a connection to it that has sent six echoes of
/// 900 KiB (ids 1 to 6), all run, whose replies (more than the kernel's socket buffers take)
/// wait for a reader that does not read yet.
async fn six_echoes_waiting_for_their_reader() -> (Provider, TcpStream) {
    let mut config = config();
    config.max_buffered_bytes = 16 << 20;
    config.connection.per_connection = 16 << 20;
    let provider = provider(config).await;
    let mut stream = connect_slow_reader(provider.addr).await;
    let mut bytes = Vec::new();
    for id in 1..=6 {
        bytes.extend(frame(
            id,
            "echo",
            vec![7; 900 << 10],
            Duration::from_secs(60),
        ));
    }
    stream.write_all(&bytes).await.unwrap();
    until("six echoes ran", || {
        provider.runs.load(Ordering::SeqCst) == 6
    })
    .await;
    (provider, stream)
}

#[tokio::test]
async fn an_id_reused_while_its_reply_waits_closes_the_connection_and_gives_every_byte_back() {
    let (provider, mut stream) = six_echoes_waiting_for_their_reader().await;
    // tarpc still tracks id 6, whose reply waits for a reader that does not read.
    let again = frame(6, "echo", vec![7; 100], Duration::from_secs(60));
    let _ = stream.write_all(&again).await;
    closed(&mut stream, Duration::from_secs(5)).await;
    // Every byte came back: 16 requests of 900 KiB in flight at once fit the 16 MiB budget.
    let mut big = connect(provider.addr).await;
    let parks: Vec<u8> = (1..=16)
        .flat_map(|id| frame(id, "park", vec![1; 900 << 10], Duration::from_secs(60)))
        .collect();
    big.write_all(&parks).await.unwrap();
    until("sixteen more parked", || {
        provider.runs.load(Ordering::SeqCst) == 22
    })
    .await;
}

#[tokio::test]
async fn a_peer_that_reads_none_of_its_replies_is_closed_at_the_frame_timeout() {
    let mut config = config();
    config.limits.frame_timeout = Duration::from_millis(300);
    let provider = provider(config).await;
    let mut stream = connect_slow_reader(provider.addr).await;
    let mut bytes = Vec::new();
    for id in 1..=8 {
        bytes.extend(frame(
            id,
            "echo",
            vec![7; 500 << 10],
            Duration::from_secs(60),
        ));
    }
    let writer = tokio::spawn(async move {
        let _ = stream.write_all(&bytes).await;
        stream
    });
    let mut stream = tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("the provider reads the requests")
        .unwrap();
    let start = Instant::now();
    // Not reading for a while (a read would be progress), then checking it was closed: a read
    // now drains what was sent and ends.
    tokio::time::sleep(Duration::from_secs(1)).await;
    closed(&mut stream, Duration::from_secs(5)).await;
    assert!(start.elapsed() < Duration::from_secs(6));
    echo_works(provider.addr).await;
}

/// A length-prefixed cancel of request `id`.
fn cancel(id: u64) -> Vec<u8> {
    let message: ClientMessage<v2::WireRequest> = ClientMessage::Cancel {
        trace_context: Default::default(),
        request_id: id,
    };
    let mut codec = Bincode::<(), ClientMessage<v2::WireRequest>>::default();
    let body = Pin::new(&mut codec).serialize(&message).unwrap();
    let mut bytes = (body.len() as u32).to_be_bytes().to_vec();
    bytes.extend_from_slice(&body);
    bytes
}

#[tokio::test]
async fn an_id_reused_after_a_cancel_gets_its_own_reply_not_the_cancelled_ones() {
    let (provider, mut stream) = six_echoes_waiting_for_their_reader().await;
    // Cancelled, their ids reused by small echoes.
    let mut again = Vec::new();
    for id in 2..=6 {
        again.extend(cancel(id));
        again.extend(frame(
            id,
            "echo",
            vec![id as u8; 8],
            Duration::from_secs(60),
        ));
    }
    stream.write_all(&again).await.unwrap();
    until("five more ran", || {
        provider.runs.load(Ordering::SeqCst) == 11
    })
    .await;
    // Replies written before their cancel arrived are on their way already; every other
    // cancelled reply is dropped, and each new request gets its own reply, once.
    let mut replies: Vec<(u64, usize)> = Vec::new();
    while let Ok(reply) = tokio::time::timeout(Duration::from_millis(500), reply(&mut stream)).await
    {
        let Ok(v2::WireResponse::Call(v2::ReplyFrame(crate::transport::Reply::Done(body)))) =
            reply.message
        else {
            panic!("not a reply: {:?}", reply.message)
        };
        let echoed: Vec<u8> = crate::service::decode(&body).unwrap();
        replies.push((reply.request_id, echoed.len()));
    }
    let count = |id: u64, len: usize| replies.iter().filter(|r| **r == (id, len)).count();
    assert_eq!(count(1, 900 << 10), 1, "{replies:?}");
    for id in 2..=6 {
        assert_eq!(
            count(id, 8),
            1,
            "the new request {id} answered once: {replies:?}"
        );
        assert!(count(id, 900 << 10) <= 1, "{replies:?}");
        let last = replies.iter().rev().find(|r| r.0 == id);
        assert_eq!(
            last,
            Some(&(id, 8)),
            "nothing of the old request after the new: {replies:?}"
        );
    }
    assert!(
        replies.iter().filter(|r| r.1 == 900 << 10).count() < 6,
        "some cancelled replies were dropped, not written: {replies:?}"
    );
}

/// CPU time this thread has used (user and system, in clock ticks of 10 ms): a
/// `#[tokio::test]` runs its runtime, and every task it spawns, on its own thread, so this is
/// the test's alone, whatever other tests run beside it.
fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("Linux");
    let fields: Vec<&str> = stat[stat.rfind(')').expect("a name") + 2..]
        .split(' ')
        .collect();
    // After the name, utime and stime are the 12th and 13th fields.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

#[tokio::test]
async fn a_quiet_connection_does_not_spin_once_its_requests_are_past_their_deadline() {
    // From an outside review: the frame reader keeps each request's expiry (its deadline plus a
    // second's grace) to give back its hold; on a connection with nothing more to read, the
    // timer for the first expiry fired and was armed again for it, at once, for ever: a core
    // spent per quiet connection, forever with a request stopped at its deadline (no reply,
    // no cancel to end its hold). Waits out the grace in real time: it is a constant.
    let provider = provider(config()).await;
    let mut stream = connect(provider.addr).await;
    let short = Duration::from_millis(10);
    stream
        .write_all(&frame(1, "echo", b"ping".to_vec(), short))
        .await
        .unwrap();
    assert_eq!(reply(&mut stream).await.request_id, 1);
    stream
        .write_all(&frame(2, "park", vec![], short))
        .await
        .unwrap();
    until("parked", || provider.runs.load(Ordering::SeqCst) == 2).await;
    tokio::time::sleep(super::frames::EXPIRY_GRACE + Duration::from_millis(100)).await;
    let before = thread_cpu();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let used = thread_cpu() - before;
    assert!(
        used < Duration::from_millis(100),
        "{used:?} of CPU in half a second of a quiet connection"
    );
}

// From an outside review: the serving loop flushed only in a turn in which it wrote, so a large
// reply to a reader that drains slowly stopped part-way once the last reply had been handed
// over, and the connection died at the frame timeout.
#[tokio::test]
async fn a_6_mb_reply_to_a_client_with_a_4_kib_receive_buffer_arrives_whole() {
    let mut config = config();
    config.limits.max_frame = 8 << 20;
    config.connection.per_connection = 16 << 20;
    config.max_buffered_bytes = 32 << 20;
    let dispatcher = Arc::new(Dispatcher::new(8 << 20, 1024, Arc::from([])));
    let runs = Arc::new(AtomicUsize::new(0));
    dispatcher.host(Arc::new(Sink { runs: runs.clone() }));
    let (_stop, stopped) = watch::channel(false);
    let (addr, _task, _incoming) = serve(
        ([127, 0, 0, 1], 0).into(),
        dispatcher,
        config,
        stopped,
        watch::channel(true).1,
    )
    .await
    .unwrap();
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4 << 10).unwrap();
    let mut stream = handshaken(socket.connect(addr).await.unwrap()).await;
    let payload: Vec<u8> = (0..6_000_000u32).map(|i| (i % 128) as u8).collect();
    let request = frame(1, "echo", payload.clone(), Duration::from_secs(60));
    // Written and read at once, a little at a time, as a slow reader does.
    let (reader, mut writer) = stream.into_split();
    let writing = tokio::spawn(async move {
        writer.write_all(&request).await.unwrap();
        writer
    });
    let mut reader = reader;
    let len = reader.read_u32().await.unwrap() as usize;
    let mut body = vec![0; len];
    let mut got = 0;
    let whole = tokio::time::timeout(Duration::from_secs(20), async {
        while got < len {
            let n = reader
                .read(&mut body[got..(got + 4096).min(len)])
                .await
                .unwrap();
            assert!(
                n > 0,
                "the provider closed the connection after {got} of {len} bytes"
            );
            got += n;
            if got % (256 << 10) < 4096 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    })
    .await;
    assert!(whole.is_ok(), "only {got} of {len} bytes arrived");
    use tarpc::tokio_serde::Deserializer as _;
    let mut codec = Bincode::<Response<v2::WireResponse>, ()>::default();
    let reply = Pin::new(&mut codec)
        .deserialize(&tokio_util::bytes::BytesMut::from(&body[..]))
        .unwrap();
    let Ok(v2::WireResponse::Call(v2::ReplyFrame(crate::transport::Reply::Done(bytes)))) =
        reply.message
    else {
        panic!("not a reply: {:?}", reply.message)
    };
    let echoed: Vec<u8> = crate::service::decode(&bytes).unwrap();
    assert_eq!(echoed, payload);
    stream = writing.await.unwrap().reunite(reader).unwrap();
    drop(stream);
}
