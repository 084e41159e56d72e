//! The attacker's side of the wire, written from the formats rather than with the cluster's own
//! client, so that it can send what no conforming client would:
//!
//! 1. the handshake (`cluster/src/transport/wire/handshake.rs`): the 8 bytes `cluster\0`, then a
//!    `Hello` as a MessagePack map with named fields behind a 4-byte big-endian length; the
//!    node answers a `Welcome` the same way;
//! 2. then frames (`cluster/src/transport/wire/envelope.rs`): a 4-byte big-endian length, then
//!    the envelope in bincode 1 with its default options (variable-length integers,
//!    little-endian), byte for byte tarpc 0.38's frames. A request is
//!    `ClientMessage::Request { context: { deadline as time left, trace context }, id, message }`
//!    whose message is `Call { request }`, and the request is wire 2's
//!    tuple (`cluster/src/transport/wire/v2.rs`): `(service, function, signature hash,
//!    (request id, attempt, budget left in µs, reply limit), headers, arguments)`, the
//!    arguments the MessagePack of the argument tuple (`cluster/src/service/codec.rs`);
//! 3. a reply is the envelope's
//!    `Response { request_id, message: Result<Call(reply), ServerError> }`, the reply wire 2's
//!    `(kind, code, body, headers)`; a node of this build never sends the `ServerError`.
//!
//! [`connect_tls`] is a compromised peer: a certificate of the cluster, and no interest in
//! whether the node's own is valid.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bincode::Options;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use serde::{Deserialize, Serialize};
use serde_bytes::{ByteBuf, Bytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use examples::{GreeterClient, Greeting, ProbeClient};

/// The node's default frame limit, as `cluster::DEFAULT_MAX_FRAME` says it.
pub(crate) const MAX_FRAME: usize = cluster::DEFAULT_MAX_FRAME;

/// A core field left unset (no budget, no reply limit): `u64::MAX`, as wire 2 writes it.
pub(crate) const NONE: u64 = u64::MAX;

/// What an attacker can read or write.
pub(crate) trait Wire: AsyncRead + AsyncWrite + Unpin + Send {}
impl<S: AsyncRead + AsyncWrite + Unpin + Send> Wire for S {}

#[derive(Serialize)]
struct Hello<'a> {
    versions: (u32, u32),
    features: Vec<String>,
    node: &'a str,
    max_frame: u64,
}

/// The node's answer to a hello.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Welcome {
    /// The agreed version; 0 when refused.
    pub(crate) version: u32,
    /// The node's name.
    pub(crate) node: String,
    /// Why it refused, if it did.
    pub(crate) refusal: Option<String>,
}

/// The bytes of a handshake's first half: the magic, then a hello from `node`.
pub(crate) fn hello(node: &str) -> Vec<u8> {
    let hello = Hello {
        versions: (2, 2),
        features: Vec::new(),
        node,
        max_frame: MAX_FRAME as u64,
    };
    let body = rmp_serde::to_vec_named(&hello).expect("a hello encodes");
    let mut out = b"cluster\0".to_vec();
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// Says hello as `node` and reads the welcome; an error unless wire 2 was agreed.
pub(crate) async fn handshake(io: &mut impl Wire, node: &str) -> io::Result<Welcome> {
    io.write_all(&hello(node)).await?;
    io.flush().await?;
    let body = read_frame(io, 16 << 10).await?;
    let welcome: Welcome = rmp_serde::from_slice(&body).map_err(invalid)?;
    if welcome.version != 2 {
        return Err(invalid(format!("refused: {welcome:?}")));
    }
    Ok(welcome)
}

/// Where the attacker connects from: another loopback address than the legitimate caller's
/// (127.0.0.1), so that the victim sees two peers, as it would on a network.
pub(crate) const ATTACKER_IP: std::net::Ipv4Addr = std::net::Ipv4Addr::new(127, 0, 0, 2);

/// A TCP connection to `addr`, from [`ATTACKER_IP`].
pub(crate) async fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    // Thousands of connections per run: ports of earlier ones may still be in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(SocketAddr::from((ATTACKER_IP, 0)))?;
    let stream = socket.connect(addr).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// A TCP connection to `addr`, from [`ATTACKER_IP`], whose receive buffer is `bytes`: the
/// node's writes to it stall early.
pub(crate) async fn connect_small(addr: SocketAddr, bytes: u32) -> io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.set_recv_buffer_size(bytes)?;
    socket.bind(SocketAddr::from((ATTACKER_IP, 0)))?;
    let stream = socket.connect(addr).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// A TCP connection to `addr` that resets (RST, not FIN) when dropped.
#[allow(deprecated)] // SO_LINGER 0 does not block the thread on drop: the socket resets at once.
pub(crate) fn resets_on_drop(stream: &TcpStream) -> io::Result<()> {
    stream.set_linger(Some(Duration::ZERO))
}

/// A compromised peer's TLS: `node`'s certificate from `dir` (as `cluster-node issue` wrote it),
/// any server certificate accepted.
pub(crate) fn tls_connector(dir: &Path, node: &str) -> TlsConnector {
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(dir.join(format!("{node}.pem")))
            .expect("the node's certificate")
            .map(|cert| cert.expect("a PEM certificate"))
            .collect();
    let key = PrivateKeyDer::from_pem_file(dir.join(format!("{node}.key"))).expect("its key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer(provider)))
        .with_client_auth_cert(chain, key)
        .expect("a client certificate");
    TlsConnector::from(Arc::new(config))
}

/// A TLS connection to the node `name` at `addr`.
pub(crate) async fn connect_tls(
    tls: &TlsConnector,
    addr: SocketAddr,
    name: &str,
) -> io::Result<TlsStream<TcpStream>> {
    tls_over(tls, connect(addr).await?, name).await
}

/// TLS over `tcp`, to the node `name`.
pub(crate) async fn tls_over(
    tls: &TlsConnector,
    tcp: TcpStream,
    name: &str,
) -> io::Result<TlsStream<TcpStream>> {
    let name = ServerName::try_from(name.to_owned()).map_err(invalid)?;
    tls.connect(name, tcp).await
}

/// Trusts any server: the attacker is after the node, not its identity.
#[derive(Debug)]
struct AnyServer(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The envelope's deadline: time left, as serde writes a `Duration`.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Deadline {
    /// Whole seconds.
    pub(crate) secs: u64,
    /// And nanoseconds.
    pub(crate) nanos: u32,
}

impl Deadline {
    /// `left` from now.
    pub(crate) fn in_(left: Duration) -> Self {
        Self {
            secs: left.as_secs(),
            nanos: left.subsec_nanos(),
        }
    }
}

#[derive(Serialize)]
struct TraceContext {
    trace_id: [u8; 16],
    span_id: u64,
    sampling_decision: Sampling,
}

#[derive(Serialize)]
#[allow(dead_code)] // Mirrors the envelope's enum: both variants are part of the format.
enum Sampling {
    Sampled,
    Unsampled,
}

#[derive(Serialize)]
struct Context {
    deadline: Deadline,
    trace_context: TraceContext,
}

#[derive(Serialize)]
#[allow(dead_code)] // Mirrors the envelope's enum: `Cancel` fixes `Request`'s variant number.
enum ClientMessage<'a> {
    Request(Request<'a>),
    Cancel {
        trace_context: TraceContext,
        request_id: u64,
    },
}

#[derive(Serialize)]
struct Request<'a> {
    context: Context,
    id: u64,
    message: WireRequest<'a>,
}

/// The envelope's call (`CallRequest`): one variant, `Call`.
#[derive(Serialize)]
enum WireRequest<'a> {
    Call { request: V2Request<'a> },
}

#[derive(Serialize)]
struct V2Request<'a>(
    &'a str,
    &'a str,
    u64,
    (u128, u32, u64, u64),
    &'a Bytes,
    &'a Bytes,
);

/// One call as the attacker chooses to write it.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    /// The request's id on the connection.
    pub(crate) id: u64,
    /// The envelope's deadline.
    pub(crate) deadline: Deadline,
    /// The service.
    pub(crate) service: &'static str,
    /// The function.
    pub(crate) function: &'static str,
    /// The function's signature hash.
    pub(crate) signature: u64,
    /// The call's budget left, in microseconds ([`NONE`]: no budget).
    pub(crate) budget_micros: u64,
    /// The arguments, as [`cluster::service::encode`] writes the argument tuple.
    pub(crate) args: Vec<u8>,
}

/// The signature hash of `service`'s function `function`, as the macro computes it.
fn signature(description: &cluster::ServiceDescription, function: &str) -> u64 {
    let f = description
        .functions
        .iter()
        .find(|f| f.name == function)
        .unwrap_or_else(|| panic!("no function {function} in {}", description.name));
    cluster::service::signature_hash(&f.signature)
}

impl Call {
    /// `greeter.greet(name)`, id `id`, 10 s to run.
    pub(crate) fn greet(id: u64, name: &str) -> Self {
        Self {
            id,
            deadline: Deadline::in_(Duration::from_secs(10)),
            service: "greeter",
            function: "greet",
            signature: signature(GreeterClient::description(), "greet"),
            budget_micros: NONE,
            args: cluster::service::encode(&(name,)).expect("arguments encode"),
        }
    }

    /// `probe.count()`, id `id`.
    pub(crate) fn count(id: u64) -> Self {
        Self {
            function: "count",
            signature: signature(ProbeClient::description(), "count"),
            args: cluster::service::encode(&()).expect("arguments encode"),
            ..Self::probe(id)
        }
    }

    /// `probe.sleep(ms)`, id `id`.
    pub(crate) fn sleep(id: u64, ms: u64) -> Self {
        Self {
            function: "sleep",
            signature: signature(ProbeClient::description(), "sleep"),
            args: cluster::service::encode(&(ms,)).expect("arguments encode"),
            ..Self::probe(id)
        }
    }

    fn probe(id: u64) -> Self {
        Self {
            service: "probe",
            ..Self::greet(id, "")
        }
    }

    /// The frame, length prefix included.
    pub(crate) fn frame(&self) -> Vec<u8> {
        let message = ClientMessage::Request(Request {
            context: Context {
                deadline: self.deadline,
                trace_context: TraceContext {
                    trace_id: (u128::from(self.id) + 1).to_le_bytes(),
                    span_id: self.id + 1,
                    sampling_decision: Sampling::Unsampled,
                },
            },
            id: self.id,
            message: WireRequest::Call {
                request: V2Request(
                    self.service,
                    self.function,
                    self.signature,
                    (
                        u128::from(self.id) << 64 | 0xabcd,
                        1,
                        self.budget_micros,
                        NONE,
                    ),
                    Bytes::new(&[]),
                    Bytes::new(&self.args),
                ),
            },
        });
        let body = bincode::DefaultOptions::new()
            .serialize(&message)
            .expect("a request encodes");
        let mut out = Vec::with_capacity(4 + body.len());
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }
}

#[derive(Deserialize)]
struct Response {
    request_id: u64,
    message: Result<WireResponse, ServerError>,
}

#[derive(Deserialize)]
enum WireResponse {
    Call(V2Reply),
}

#[derive(Deserialize)]
#[allow(dead_code)] // The header map is read to check the frame, not used: no reply header yet.
struct V2Reply(u16, u16, ByteBuf, ByteBuf);

#[derive(Deserialize)]
struct ServerError {
    kind: u32,
    detail: String,
}

/// A reply as the attacker reads it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    /// The function ran; its encoded result.
    Done {
        /// The request's id on the connection.
        id: u64,
        /// The MessagePack of the result.
        body: Vec<u8>,
    },
    /// Any other reply of the cluster's: refused (1), panicked (2), too large (3),
    /// undeliverable (4), expired (5).
    Other {
        /// The request's id on the connection.
        id: u64,
        /// The reply's kind.
        kind: u16,
        /// Its code (a refusal's reason).
        code: u16,
        /// Its text.
        detail: String,
    },
    /// The envelope's `ServerError`: a refusal before the handler ran, which a node of an
    /// earlier release sends when it throttles (this build never does).
    ServerError {
        /// The request's id on the connection.
        id: u64,
        /// An `io::ErrorKind` as a number.
        kind: u32,
        /// Its text.
        detail: String,
    },
}

/// The cluster's reply kind for an expired request.
pub(crate) const EXPIRED: u16 = 5;

impl Reply {
    /// The request id it answers.
    pub(crate) fn id(&self) -> u64 {
        match self {
            Reply::Done { id, .. } | Reply::Other { id, .. } | Reply::ServerError { id, .. } => *id,
        }
    }

    /// The greeting, if this is a greet's reply.
    pub(crate) fn greeting(&self) -> Option<Greeting> {
        match self {
            Reply::Done { body, .. } => cluster::service::decode(body).ok(),
            _ => None,
        }
    }
}

/// One length-prefixed frame's body, refused past `limit` bytes.
async fn read_frame(io: &mut impl Wire, limit: usize) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    io.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > limit {
        return Err(invalid(format!("a frame of {len} bytes")));
    }
    let mut body = vec![0u8; len];
    io.read_exact(&mut body).await?;
    Ok(body)
}

/// The next reply on the connection.
pub(crate) async fn read_reply(io: &mut impl Wire) -> io::Result<Reply> {
    let body = read_frame(io, MAX_FRAME).await?;
    let response: Response = bincode::DefaultOptions::new()
        .deserialize(&body)
        .map_err(invalid)?;
    let id = response.request_id;
    Ok(match response.message {
        Ok(WireResponse::Call(V2Reply(0, _, body, _))) => Reply::Done {
            id,
            body: body.into_vec(),
        },
        Ok(WireResponse::Call(V2Reply(kind, code, body, _))) => Reply::Other {
            id,
            kind,
            code,
            detail: String::from_utf8_lossy(&body).into_owned(),
        },
        Err(ServerError { kind, detail }) => Reply::ServerError { id, kind, detail },
    })
}

/// Sends `call` and reads replies until its own, for at most `limit`.
pub(crate) async fn call(io: &mut impl Wire, call: &Call, limit: Duration) -> io::Result<Reply> {
    io.write_all(&call.frame()).await?;
    io.flush().await?;
    tokio::time::timeout(limit, async {
        loop {
            let reply = read_reply(io).await?;
            if reply.id() == call.id {
                return Ok(reply);
            }
        }
    })
    .await
    .map_err(|_| {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no reply within {limit:?}"),
        )
    })?
}

fn invalid(e: impl ToString) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}
