//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`; not a public API: it
//! changes without notice). Each hands the fuzzer's bytes to the reader this crate runs on
//! bytes from the network, and returns that reader's error for input it refuses: a panic here
//! is a bug. Where a value can be written again, it is, and must read back the same (that
//! check panics when it fails). The `seed_*` functions write real messages, for the fuzz
//! corpus (`fuzz/src/bin/seeds.rs`). `fuzz/README.md` says how to run the targets.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use chitchat::{
    Chitchat, ChitchatConfig, ChitchatEnvelope, ChitchatId, ChitchatMessage, FailureDetectorConfig,
};
use futures::executor::block_on;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::context::{Metadata, RequestId};
use crate::registry::NodeInfo;
use crate::registry::gossip::state;
use crate::security::seal::{Refused, Sealer};
use crate::security::{GossipKey, Keyring};
use crate::service::ServiceDescription;
use crate::transport::wire::envelope::{self, ClientMessage, Response};
use crate::transport::wire::{self, Head, Reply, Request, handshake, v1, v2};

/// What a wire 2 provider reads: one frame of a connection (`transport/wire/envelope.rs`).
type V2Request = ClientMessage<v2::WireRequest>;
/// What a wire 2 client reads.
type V2Reply = Response<v2::WireResponse>;
type V1Request = ClientMessage<v1::WireRequest>;
type V1Reply = Response<v1::WireResponse>;

/// A frame's message as a provider or a client reads it (`transport/wire/envelope.rs`).
fn reads<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    envelope::decode(bytes).map_err(|e| e.to_string())
}

fn written<T: Serialize>(value: &T) -> Vec<u8> {
    envelope::encode(value)
}

/// `a` and `b`, a deadline apart by at most the time the check took.
fn close(a: std::time::Instant, b: std::time::Instant) -> bool {
    let apart = a.max(b).duration_since(a.min(b));
    apart < Duration::from_secs(1)
}

/// A wire 2 request frame, read as the provider reads it (by hand, `transport/wire/reader.rs`),
/// which must agree with bincode's reading of the same bytes; the request it holds is written
/// again and must read back the same.
pub fn v2_request(bytes: &[u8]) -> Result<(), String> {
    let by_bincode: Result<V2Request, String> = reads(bytes);
    let message = match (wire::reader::read_request(bytes), by_bincode) {
        (Ok(message), Ok(theirs)) => {
            same_message(&message, &theirs);
            message
        }
        (Err(e), Err(_)) => return Err(e.to_string()),
        (ours, theirs) => panic!("the provider read {ours:?}, bincode {theirs:?}"),
    };
    let ClientMessage::Request(mut request) = message else {
        return Ok(());
    };
    let v2::WireRequest::Call { request: frame } = &mut request.message;
    let first = Arc::get_mut(&mut frame.0).expect("just read");
    if first.head.invalid.is_some() {
        // Refused on its own, with the headers that could not be read: nothing to write again.
        return Ok(());
    }
    // A reader keeps the metadata decoded; a writer sends it encoded.
    first.head.encoded_metadata = wire::encode_metadata(&first.head.metadata);
    let first = frame.0.clone();
    let again: V2Request = reads(&written(&V2Request::Request(envelope::Request {
        context: request.context,
        id: request.id,
        message: v2::WireRequest::Call {
            request: v2::RequestFrame(first.clone()),
        },
    })))
    .expect("a request written from one read reads back");
    let ClientMessage::Request(again) = again else {
        panic!("a request read back as a cancel");
    };
    assert_eq!(again.id, request.id);
    assert_eq!(again.context.trace_context, request.context.trace_context);
    assert!(close(
        again.context.deadline.into_std(),
        request.context.deadline.into_std()
    ));
    let v2::WireRequest::Call { request: second } = again.message;
    same_request(&first, &second.0, true);
    Ok(())
}

/// `a` and `b` the same message, read from the same bytes at about the same time.
fn same_message(a: &V2Request, b: &V2Request) {
    match (a, b) {
        (ClientMessage::Request(a), ClientMessage::Request(b)) => {
            assert_eq!(a.id, b.id);
            assert_eq!(a.context.trace_context, b.context.trace_context);
            assert!(close(
                a.context.deadline.into_std(),
                b.context.deadline.into_std()
            ));
            let (v2::WireRequest::Call { request: a }, v2::WireRequest::Call { request: b }) =
                (&a.message, &b.message);
            same_request(&a.0, &b.0, true);
        }
        (
            ClientMessage::Cancel {
                trace_context: a,
                request_id: x,
            },
            ClientMessage::Cancel {
                trace_context: b,
                request_id: y,
            },
        ) => assert_eq!((a, x), (b, y)),
        (a, b) => panic!("{a:?} read as {b:?}"),
    }
}

fn same_request(a: &Request, b: &Request, with_head: bool) {
    assert_eq!(
        (&a.service, &a.function, a.signature, &a.args),
        (&b.service, &b.function, b.signature, &b.args)
    );
    if !with_head {
        return;
    }
    assert_eq!(a.attempt(), b.attempt());
    let (a, b) = (&a.head, &b.head);
    assert_eq!(
        (a.request_id, a.reply_limit, &a.invalid, a.call_id, a.pinned),
        (b.request_id, b.reply_limit, &b.invalid, b.call_id, b.pinned)
    );
    assert_eq!(a.metadata.entries(), b.metadata.entries());
    assert_eq!(format!("{:?}", a.trace), format!("{:?}", b.trace));
    match (a.budget_deadline, b.budget_deadline) {
        (Some(a), Some(b)) => assert!(close(a.into_std(), b.into_std())),
        (a, b) => assert_eq!(a, b),
    }
}

/// A wire 2 reply frame, read as a client reads it; written again, it reads back the same.
pub fn v2_reply(bytes: &[u8]) -> Result<(), String> {
    let reply: V2Reply = reads(bytes)?;
    let again: V2Reply = reads(&written(&reply)).expect("a reply written reads back");
    assert_eq!(again.request_id, reply.request_id);
    match (reply.message, again.message) {
        (Ok(v2::WireResponse::Call(a)), Ok(v2::WireResponse::Call(b))) => assert_eq!(a.0, b.0),
        (Err(a), Err(b)) => assert_eq!(a, b),
        (a, b) => panic!("{a:?} read back as {b:?}"),
    }
    Ok(())
}

/// A wire 1 frame: a request as the provider reads it, and the same bytes as a reply as a
/// client reads it; each written again reads back the same.
pub fn v1(bytes: &[u8]) -> Result<(), String> {
    let request = reads::<V1Request>(bytes).map(|message| {
        if let ClientMessage::Request(request) = message {
            let v1::WireRequest::Call { request: a } = request.message;
            let again: V1Request = reads(&written(&V1Request::Request(envelope::Request {
                context: request.context,
                id: request.id,
                message: v1::WireRequest::Call { request: a.clone() },
            })))
            .expect("a request written reads back");
            let ClientMessage::Request(again) = again else {
                panic!("a request read back as a cancel");
            };
            let v1::WireRequest::Call { request: b } = again.message;
            assert_eq!(a.wire, b.wire);
            same_request(&a.request, &b.request, false);
        }
    });
    let reply = reads::<V1Reply>(bytes).map(|reply| {
        let again: V1Reply = reads(&written(&reply)).expect("a reply written reads back");
        match (reply.message, again.message) {
            (Ok(v1::WireResponse::Call(a)), Ok(v1::WireResponse::Call(b))) => assert_eq!(a, b),
            (Err(a), Err(b)) => assert_eq!(a, b),
            (a, b) => panic!("{a:?} read back as {b:?}"),
        }
    });
    request.or(reply)
}

/// An in-memory connection: reads `input`, keeps what is written.
struct Pipe<'a> {
    input: &'a [u8],
    output: Vec<u8>,
}

impl AsyncRead for Pipe<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.input).poll_read(cx, buf)
    }
}

impl AsyncWrite for Pipe<'_> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.output.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The first bytes of a connection, read as the provider reads them (a hello, or a wire 1
/// peer), and as a client reads the provider's answer (a welcome). A hello that is read is
/// answered; the hello and the answer, written again, read back the same.
pub fn handshake(bytes: &[u8]) -> Result<(), String> {
    let hello = block_on(handshake::open(&mut &bytes[..])).map_err(|e| e.to_string());
    if let Ok(handshake::Opening::Hello(hello)) = &hello {
        let welcome = handshake::welcome(hello, &wire::WIRE_VERSIONS, "fuzz", 1 << 20);
        let mut answer = Vec::new();
        block_on(handshake::answer(&mut answer, &welcome)).expect("a welcome is written");
        let mut pipe = Pipe {
            input: &answer,
            output: Vec::new(),
        };
        let read = block_on(handshake::offer(&mut pipe, hello)).expect("a welcome reads back");
        assert_eq!(read, welcome);
        let Ok(handshake::Opening::Hello(again)) = block_on(handshake::open(&mut &pipe.output[..]))
        else {
            panic!("a hello written is not read as one");
        };
        assert_eq!(&again, hello);
    }
    let mut pipe = Pipe {
        input: bytes,
        output: Vec::new(),
    };
    let welcome = block_on(handshake::offer(&mut pipe, &handshake::Hello::default()));
    hello
        .map(drop)
        .or(welcome.map(drop).map_err(|e| e.to_string()))
}

/// The cluster's gossip key in the fuzz targets: fixed, so that the seeds open.
const KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const CLUSTER: &str = "fuzz";

fn sealer() -> Sealer {
    let key = GossipKey::from_hex(KEY).expect("a valid key");
    // A window of a century: the seeds, sealed once, still open years later.
    Sealer::new(
        Keyring::new(key),
        CLUSTER,
        Duration::from_secs(100 * 365 * 24 * 3600),
    )
}

/// A datagram, opened under the fixed key; one that opens is refused as a replay the second
/// time. The same bytes, sealed, open to themselves, and not at all with any one bit flipped.
pub fn gossip_open(bytes: &[u8]) -> Result<(), String> {
    let sealer = sealer();
    let opened = sealer.open(bytes);
    if opened.is_ok() {
        assert_eq!(sealer.open(bytes), Err(Refused::Replayed));
    }
    let sealed = sealer.seal(bytes);
    let spread = bytes
        .iter()
        .fold(bytes.len(), |h, &b| h.wrapping_mul(31) ^ usize::from(b));
    let bit = spread % (sealed.len() * 8);
    let mut flipped = sealed.clone();
    flipped[bit / 8] ^= 1 << (bit % 8);
    let refused = sealer.open(&flipped);
    assert!(
        matches!(
            refused,
            // A flipped time is out of the window before the datagram is opened.
            Err(Refused::NotSealed | Refused::UnknownKey(_) | Refused::Forged | Refused::Stale(_))
        ),
        "bit {bit} flipped: {refused:?}"
    );
    assert_eq!(sealer.open(&sealed).as_deref(), Ok(bytes));
    opened.map(drop).map_err(|e| e.to_string())
}

/// An opened datagram, read as chitchat's envelope (`registry/gossip/transport.rs`). A SYN,
/// written again, reads back the same. (A delta read from a peer cannot be written again:
/// chitchat checks that it compresses to the length it was read from, which holds only for one
/// it compressed itself; nothing writes a received delta.)
pub fn gossip_envelope(bytes: &[u8]) -> Result<(), String> {
    let envelope = ChitchatEnvelope::deserialize(&mut &bytes[..]).map_err(|e| format!("{e:#}"))?;
    if let ChitchatMessage::Syn { .. } | ChitchatMessage::BadCluster = envelope.message {
        let once = envelope.serialize_to_vec();
        let again =
            ChitchatEnvelope::deserialize(&mut &once[..]).expect("what chitchat wrote reads");
        assert_eq!(again, envelope);
    }
    Ok(())
}

fn chitchat_config() -> ChitchatConfig {
    let addr = SocketAddr::from(([127, 0, 0, 1], 7280));
    ChitchatConfig {
        chitchat_id: ChitchatId::new("fuzz-1", 2, addr),
        cluster_id: CLUSTER.into(),
        gossip_interval: Duration::from_secs(1),
        listen_addr: addr,
        seed_nodes: Vec::new(),
        failure_detector_config: FailureDetectorConfig::default(),
        marked_for_deletion_grace_period: Duration::from_secs(3600),
        catchup_callback: None,
        extra_liveness_predicate: None,
        protocol_version: chitchat::ProtocolVersion::V2,
        datagram_budget: chitchat::DEFAULT_DATAGRAM_BUDGET,
    }
}

/// A node's gossip state, as `key=value` lines, read into the registry's index as every node
/// reads its peers' (`registry/gossip/state.rs`); every entry read, written again, reads back
/// the same.
pub fn gossip_state(bytes: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(bytes);
    let keys = text
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let (_, seeds) = tokio::sync::watch::channel(HashSet::new());
    let cc = Chitchat::with_chitchat_id_and_seeds(chitchat_config(), seeds, keys);
    let own = cc.self_chitchat_id();
    let _ = state::holders(
        &cc,
        &ChitchatId::new(own.node_id.clone(), 1, own.gossip_advertise_addr),
    );
    let index = state::build_index(&cc);
    for entry in index.entries() {
        let (_, value) = state::service_key_value(&entry.description, usize::MAX)
            .expect("a description read is written");
        let again: ServiceDescription = serde_json::from_str(&value).expect("and read back");
        assert_eq!(&again, &*entry.description);
    }
    match index.entries().next() {
        Some(_) => Ok(()),
        None => Err("no service read".into()),
    }
}

/// A certificate as a node's gossip state carries it (`registry/gossip/authorship.rs`, before
/// its chain is verified): its expiry and public key (`security/der.rs`) and the node it names
/// (webpki, `security/names.rs`).
pub fn certificate(bytes: &[u8]) -> Result<(), String> {
    let named = crate::security::names::of_certificate(&bytes.into());
    let read = crate::security::der::read(bytes).ok_or("not a certificate's shape")?;
    if read.public_key.len() > bytes.len() {
        return Err("a key longer than its certificate".into());
    }
    named.map(|_| ())
}

fn seed_request() -> Request {
    let mut metadata = Metadata::new();
    metadata.insert("tenant", "acme");
    Request {
        service: "search".into(),
        function: "search".into(),
        signature: crate::service::signature_hash("search(String) -> Vec<String>"),
        args: crate::service::encode_value(&("rust",)).expect("encodes"),
        head: Head {
            request_id: RequestId(7 << 70 | 9),
            reply_limit: Some(1 << 20),
            budget_deadline: Some(tokio::time::Instant::now() + Duration::from_millis(1500)),
            encoded_metadata: wire::encode_metadata(&metadata),
            metadata,
            // An at-most-once retry's headers, so that the fuzzer starts from them too.
            call_id: Some(u128::MAX / 3),
            pinned: Some(1_700_000_000_000_000_000),
            ..Head::default()
        },
        attempt: AtomicU32::new(2),
    }
}

fn context() -> envelope::Context {
    envelope::Context::until(tokio::time::Instant::now() + Duration::from_secs(5))
}

/// Real wire 2 request frames: a call with metadata and a budget, one without, a cancel.
pub fn seed_v2_requests() -> Vec<Vec<u8>> {
    let full = Arc::new(seed_request());
    let mut bare = seed_request();
    bare.head = Head::default();
    let call = |request: Arc<Request>, id| {
        written(&V2Request::Request(envelope::Request {
            context: context(),
            id,
            message: v2::WireRequest::Call {
                request: v2::RequestFrame(request),
            },
        }))
    };
    vec![
        call(full, 1),
        call(Arc::new(bare), 2),
        written(&V2Request::Cancel {
            trace_context: context().trace_context,
            request_id: 1,
        }),
    ]
}

fn replies() -> Vec<Reply> {
    vec![
        Reply::Done(crate::service::encode_value(&vec!["rust"]).expect("encodes")),
        Reply::Refused(6, "draining".into()),
        Reply::Panicked("boom".into()),
        Reply::TooLarge("a reply of 2 MiB, over the caller's 1 MiB".into()),
        Reply::Undeliverable("not encodable".into()),
        Reply::Expired,
    ]
}

/// Real wire 2 reply frames, one of each kind.
pub fn seed_v2_replies() -> Vec<Vec<u8>> {
    replies()
        .into_iter()
        .enumerate()
        .map(|(id, reply)| {
            written(&V2Reply {
                request_id: id as u64,
                message: Ok(v2::WireResponse::Call(v2::ReplyFrame(reply))),
            })
        })
        .collect()
}

/// Real wire 1 frames: a request, and a reply of each kind.
pub fn seed_v1() -> Vec<Vec<u8>> {
    let mut seeds = vec![written(&V1Request::Request(envelope::Request {
        context: context(),
        id: 1,
        message: v1::WireRequest::Call {
            request: v1::RequestFrame {
                wire: 1,
                request: Arc::new(seed_request()),
            },
        },
    }))];
    seeds.extend(replies().into_iter().map(|reply| {
        written(&V1Reply {
            request_id: 1,
            message: Ok(v1::WireResponse::Call(reply.into())),
        })
    }));
    seeds
}

/// A real hello (as a client opens a connection) and welcomes (an agreement, a refusal).
pub fn seed_handshake() -> Vec<Vec<u8>> {
    let hello = handshake::Hello {
        versions: (1, 2),
        features: vec!["compression".into()],
        node: "web-1".into(),
        max_frame: 8 << 20,
    };
    let mut pipe = Pipe {
        input: &[],
        output: Vec::new(),
    };
    let _ = block_on(handshake::offer(&mut pipe, &hello));
    let mut seeds = vec![pipe.output];
    for welcome in [
        handshake::welcome(&hello, &wire::WIRE_VERSIONS, "search-1", 8 << 20),
        handshake::refusal("search-1", 8 << 20, "node search-1 speaks 2..=2".into()),
    ] {
        let mut out = Vec::new();
        block_on(handshake::answer(&mut out, &welcome)).expect("a welcome is written");
        seeds.push(out);
    }
    seeds
}

/// A service description as gossip and Eureka carry it.
fn seed_description() -> ServiceDescription {
    let json = r#"{"name":"search","version":"2.1.0","compat":"^2","options":{"timeout":{"secs":5,"nanos":0},"retry_after":{"secs":0,"nanos":200000000},"retry_budget":{"secs":30,"nanos":0}},"functions":[{"name":"search","signature":"(String) -> Vec<String>","idempotent":true,"options":{}},{"name":"reindex","signature":"(bool) -> u64","options":{"timeout":{"secs":60,"nanos":0}}}],"wire":2}"#;
    serde_json::from_str(json).expect("a valid description")
}

/// A node's real gossip state, as [`gossip_state`] reads it.
pub fn seed_gossip_state() -> Vec<u8> {
    let node = NodeInfo::new("search-1", SocketAddr::from(([127, 0, 0, 1], 7000)), 2)
        .with_max_frame(Some(8 << 20))
        .with_wire(Some(1..=2));
    let mut keys = state::initial_keys(&node);
    keys.push(("status".into(), "up".into()));
    keys.push(state::service_key_value(&seed_description(), 64 << 10).expect("small"));
    keys.iter()
        .map(|(k, v)| format!("{k}={v}\n"))
        .collect::<String>()
        .into_bytes()
}

/// Real sealed datagrams, under the fixed key.
pub fn seed_sealed(plain: &[&[u8]]) -> Vec<Vec<u8>> {
    let sealer = sealer();
    plain.iter().map(|p| sealer.seal(p)).collect()
}
