//! The provider's side: one listener; per connection, the handshake (or a first-release peer
//! recognised without one), then tarpc in the agreed wire version.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use tarpc::server::{BaseChannel, Channel};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_util::bytes::{Bytes, BytesMut};
use tokio_util::codec::{Framed, FramedParts, LengthDelimitedCodec};

use super::channel;
use super::codec::Clamping;
use super::opening::{OpeningSlot, Openings};
use crate::error::Reason;
use crate::security::tls::{TLS_HANDSHAKE_RECORD, Tls};
use crate::server::Dispatcher;
use crate::transport::wire::handshake::{self, Opening};
use crate::transport::wire::v1::Wire as _;
use crate::transport::wire::v2::Wire as _;
use crate::transport::wire::{Reply, v1, v2};

/// How long a new connection has to say how it opens (a handshake, or a wire 1 frame).
const OPENING_TIMEOUT: Duration = Duration::from_secs(10);

/// What the listener needs to know to serve connections.
#[derive(Clone)]
pub(crate) struct ServeConfig {
    pub(crate) node: Arc<str>,
    pub(crate) versions: RangeInclusive<u32>,
    pub(crate) max_frame: usize,
    /// Connections that may be opening (not yet spoken) at once.
    pub(crate) max_opening: usize,
    /// Mutual TLS; `None` on a node started `insecure()`.
    pub(crate) tls: Option<Arc<Tls>>,
}

/// Listens on `addr` until `stop` turns true; then closes the listener and every connection,
/// which aborts the handlers still running.
pub(crate) async fn serve(
    addr: SocketAddr,
    dispatcher: Arc<Dispatcher>,
    config: ServeConfig,
    mut stop: watch::Receiver<bool>,
) -> io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let openings = Openings::new(config.max_opening);
    let task = tokio::spawn(async move {
        let mut connections = JoinSet::new();
        let mut pause = false;
        // Accept failures in a row: the first is logged, the rest counted until one succeeds.
        let mut failing = 0u64;
        loop {
            if std::mem::take(&mut pause) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tokio::select! {
                _ = stop.wait_for(|stopped| *stopped) => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        if std::mem::take(&mut failing) > 1 {
                            tracing::info!("accepting connections on {local} again");
                        }
                        let serving = Arc::new(OnceLock::new());
                        let (opening, evicted) = openings.admit(serving.clone());
                        if evicted {
                            tracing::debug!(
                                "{} connections on {local} were opening at once; the oldest was closed",
                                config.max_opening + 1
                            );
                        }
                        let task = connection(stream, peer, dispatcher.clone(), config.clone(), serving.clone(), opening);
                        let _ = serving.set(connections.spawn(task));
                    }
                    // A failed accept (a peer that reset at once, too many open files) costs
                    // that connection, not the listener; a pause keeps a persistent cause
                    // (out of file handles) from spinning the loop, and one line says so.
                    Err(e) => {
                        failing += 1;
                        if failing == 1 {
                            tracing::warn!("accepting a connection on {local} failed: {e}; retrying every 100 ms");
                        }
                        pause = true;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        // Dropping the set aborts every connection task: sockets close and tarpc aborts the
        // handlers still in flight on them.
    });
    Ok((local, task))
}

/// One connection, from its first byte to its close. A secure node serves only TLS clients
/// with a certificate of its cluster, and answers a plaintext handshake with a refusal that says
/// so; a plaintext node closes a TLS connection at once. Neither waits for a timeout.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    dispatcher: Arc<Dispatcher>,
    config: ServeConfig,
    serving: Arc<OnceLock<AbortHandle>>,
    opening: OpeningSlot,
) {
    // Replies are small frames written one by one: without this, Nagle's algorithm holds each
    // behind the client's delayed ACK.
    let _ = stream.set_nodelay(true);
    let mut first = [0u8; 1];
    let tls_client = match tokio::time::timeout(OPENING_TIMEOUT, stream.peek(&mut first)).await {
        Ok(Ok(1)) => first[0] == TLS_HANDSHAKE_RECORD,
        _ => return,
    };
    match (&config.tls, tls_client) {
        (Some(tls), true) => {
            let accepted = tokio::time::timeout(
                OPENING_TIMEOUT,
                TlsAcceptor::from(tls.server.clone()).accept(stream),
            )
            .await;
            let stream = match accepted {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    return tracing::debug!("a TLS handshake from {peer} failed: {e}");
                }
                Err(_) => return tracing::debug!("a TLS handshake from {peer} timed out"),
            };
            match tls.peer_of(stream.get_ref().1.peer_certificates()) {
                Ok(caller) => {
                    opened(
                        stream,
                        peer,
                        Some(caller),
                        dispatcher,
                        config,
                        serving,
                        opening,
                    )
                    .await
                }
                Err(why) => tracing::debug!("refused a connection from {peer}: {why}"),
            }
        }
        (Some(_), false) => refuse_plaintext(stream, peer, &config, opening).await,
        (None, true) => {
            // A fatal `handshake_failure` alert: the caller's TLS stack reports a refusal, not a
            // reset it might retry.
            let mut stream = stream;
            let alert = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 40];
            let _ = tokio::time::timeout(OPENING_TIMEOUT, stream.write_all(&alert)).await;
            tracing::debug!(
                "refused a TLS connection from {peer}: this node was started insecure() and speaks plaintext"
            );
        }
        (None, false) => opened(stream, peer, None, dispatcher, config, serving, opening).await,
    }
}

/// A plaintext caller of a secure node: a handshake is answered with a refusal that says why
/// (the caller fails at once, not at its timeout); a first-release frame is closed.
async fn refuse_plaintext(
    mut stream: TcpStream,
    peer: SocketAddr,
    config: &ServeConfig,
    opening: OpeningSlot,
) {
    let opened = tokio::time::timeout(OPENING_TIMEOUT, handshake::open(&mut stream)).await;
    drop(opening);
    if let Ok(Ok(Opening::Hello(hello))) = opened {
        let why = format!(
            "node {} accepts only mutual TLS with a certificate of its cluster; {} connected in plaintext (started insecure()?)",
            config.node, hello.node
        );
        tracing::debug!("refused a plaintext connection from {peer}: {why}");
        let refusal = handshake::Welcome {
            needs_tls: true,
            ..handshake::refusal(&config.node, config.max_frame as u64, why)
        };
        let _ =
            tokio::time::timeout(OPENING_TIMEOUT, handshake::answer(&mut stream, &refusal)).await;
    }
}

/// A connection past TLS (or plaintext, on an insecure node): the handshake (or a
/// first-release peer), then tarpc in the agreed version. `verified` is the caller's name as
/// its certificate says it.
async fn opened<S>(
    mut stream: S,
    peer: SocketAddr,
    verified: Option<String>,
    dispatcher: Arc<Dispatcher>,
    config: ServeConfig,
    serving: Arc<OnceLock<AbortHandle>>,
    opening: OpeningSlot,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let codec = LengthDelimitedCodec::builder()
        .max_frame_length(config.max_frame)
        .new_codec();
    let opened = tokio::time::timeout(OPENING_TIMEOUT, handshake::open(&mut stream)).await;
    // It has spoken (or given up): no longer one of the connections opening.
    drop(opening);
    match opened {
        Ok(Ok(Opening::Hello(hello))) => {
            let mut welcome = handshake::welcome(
                &hello,
                &config.versions,
                &config.node,
                config.max_frame as u64,
            );
            if let Some(verified) = &verified
                && *verified != hello.node
            {
                welcome = handshake::refusal(
                    &config.node,
                    config.max_frame as u64,
                    format!(
                        "the caller's handshake says node `{}`, its certificate `{verified}`",
                        hello.node
                    ),
                );
            }
            let answered =
                tokio::time::timeout(OPENING_TIMEOUT, handshake::answer(&mut stream, &welcome))
                    .await;
            if !matches!(answered, Ok(Ok(()))) || welcome.version == 0 {
                if let Some(why) = welcome.refusal {
                    tracing::debug!("refused a connection from {peer} ({}): {why}", hello.node);
                }
                return;
            }
            let transport =
                tarpc::serde_transport::new(Framed::new(stream, codec), Clamping::default());
            let server = V2 {
                dispatcher,
                peer: Arc::from(verified.unwrap_or(hello.node).as_str()),
            };
            BaseChannel::with_defaults(channel::guard(transport, serving))
                .execute(server.serve())
                .for_each(|call| async {
                    tokio::spawn(call);
                })
                .await;
        }
        // The first release had no TLS: a secure node has no first-release callers.
        Ok(Ok(Opening::Legacy(_))) if verified.is_some() => {
            tracing::debug!(
                "closed a wire 1 connection from {peer}: wire 1 has no handshake to verify"
            );
        }
        Ok(Ok(Opening::Legacy(first))) => {
            // The four bytes read to tell the two apart begin the peer's first frame.
            let mut parts = FramedParts::new::<Bytes>(stream, codec);
            parts.read_buf = BytesMut::from(&first[..]);
            let transport =
                tarpc::serde_transport::new(Framed::from_parts(parts), Clamping::default());
            let server = V1 {
                dispatcher,
                versions: config.versions.clone(),
            };
            BaseChannel::with_defaults(channel::guard(transport, serving))
                .execute(server.serve())
                .for_each(|call| async {
                    tokio::spawn(call);
                })
                .await;
        }
        Ok(Err(e)) => tracing::debug!("a connection from {peer} did not open correctly: {e}"),
        Err(_) => {
            tracing::debug!("a connection from {peer} said nothing within {OPENING_TIMEOUT:?}")
        }
    }
}

/// tarpc carries the deadline as a relative duration; this rebuilds it against tokio's clock.
fn deadline_of(ctx: &tarpc::context::Context) -> Instant {
    let left = ctx
        .deadline
        .saturating_duration_since(std::time::Instant::now());
    crate::deadline::later(Instant::now(), left)
}

#[derive(Clone)]
struct V2 {
    dispatcher: Arc<Dispatcher>,
    /// The node that opened the connection, as its handshake named it: the caller of every
    /// request on it.
    peer: Arc<str>,
}

impl v2::Wire for V2 {
    // Not an `async fn`: that would keep its arguments (the context, the request) in every
    // request's task beside the handler's future for as long as the call runs.
    fn call(
        self,
        ctx: tarpc::context::Context,
        request: v2::RequestFrame,
    ) -> impl Future<Output = v2::ReplyFrame> {
        let deadline = deadline_of(&ctx);
        let mut request = request.0;
        // Just read from the frame: nothing else holds it.
        if let Some(request) = Arc::get_mut(&mut request) {
            request.head.caller = Some(self.peer);
        }
        // Only what the handler needs goes into every request's task.
        let dispatcher = self.dispatcher;
        async move { v2::ReplyFrame(dispatcher.handle(request, deadline).await) }
    }
}

#[derive(Clone)]
struct V1 {
    dispatcher: Arc<Dispatcher>,
    versions: RangeInclusive<u32>,
}

impl v1::Wire for V1 {
    fn call(
        self,
        ctx: tarpc::context::Context,
        request: v1::RequestFrame,
    ) -> impl Future<Output = v1::ReplyFrame> {
        let deadline = deadline_of(&ctx);
        let refusal = (!self.versions.contains(&1) || request.wire != 1).then(|| {
            Reply::Refused(
                Reason::WireVersion.code(),
                format!(
                    "a request of wire version {} without a handshake; this node speaks {}..={}",
                    request.wire,
                    self.versions.start(),
                    self.versions.end()
                ),
            )
        });
        async move {
            match refusal {
                Some(refused) => refused.into(),
                None => self
                    .dispatcher
                    .handle(request.request, deadline)
                    .await
                    .into(),
            }
        }
    }
}
