//! The provider's side: one listener; per connection, the handshake (or a first-release peer
//! recognised without one), then the agreed wire version's requests (`answering.rs`).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use super::budget::{Account, Budget, ConnectionLimits};
use super::channel;
use super::established::{Established, Full, Peer};
use super::frames::{FrameLimits, Frames};
use super::opening::{OpeningSlot, Openings};
use crate::error::Reason;
use crate::net::{TcpListener, TcpStream};
use crate::rate_limited::RateLimited;
use crate::security::tls::{TLS_HANDSHAKE_RECORD, Tls};
use crate::server::CallerCount;
use crate::server::Dispatcher;
use crate::transport::wire::handshake::{self, Opening};
use crate::transport::wire::{Reply, v1, v2};

/// How long a new connection has to say how it opens (a handshake, or a wire 1 frame).
const OPENING_TIMEOUT: Duration = Duration::from_secs(10);

/// What the listener needs to know to serve connections.
#[derive(Clone)]
pub(crate) struct ServeConfig {
    pub(crate) node: Arc<str>,
    pub(crate) versions: RangeInclusive<u32>,
    pub(crate) limits: FrameLimits,
    pub(crate) connection: ConnectionLimits,
    /// Bytes held for all peers at once, past each connection's small allowance.
    pub(crate) max_buffered_bytes: usize,
    /// Connections that may be opening (not yet spoken) at once.
    pub(crate) max_opening: usize,
    /// Connections past their handshake.
    pub(crate) max_connections: usize,
    /// Mutual TLS; `None` on a node started `insecure()`.
    pub(crate) tls: Option<Arc<Tls>>,
}

/// What every connection of one listener shares.
struct Shared {
    dispatcher: Arc<Dispatcher>,
    config: ServeConfig,
    budget: Arc<Budget>,
    established: Arc<Established>,
    warnings: Arc<RateLimited>,
}

/// The connections a listener has established, for the node's metrics.
pub(crate) struct Incoming(Arc<Established>);

impl Incoming {
    /// Connections established now.
    pub(crate) fn open(&self) -> usize {
        self.0.count()
    }
}

/// Listens on `addr` until `stop` turns true; then closes the listener and every connection,
/// which aborts the handlers still running.
pub(crate) async fn serve(
    addr: SocketAddr,
    dispatcher: Arc<Dispatcher>,
    config: ServeConfig,
    mut stop: watch::Receiver<bool>,
    mut accepting: watch::Receiver<bool>,
) -> io::Result<(SocketAddr, tokio::task::JoinHandle<()>, Incoming)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let (max_opening, max_connections) = super::files::fit(&config);
    let openings = Openings::new(max_opening);
    let shared = Arc::new(Shared {
        dispatcher,
        budget: Budget::new(config.max_buffered_bytes),
        established: Established::new(max_connections),
        warnings: Arc::default(),
        config,
    });
    let incoming = Incoming(shared.established.clone());
    let task = crate::background::spawn(async move {
        // Bound but not accepting until told (`node/builder.rs`: once the node has claimed its
        // name); connections wait in the kernel's backlog meanwhile.
        tokio::select! {
            _ = stop.wait_for(|stopped| *stopped) => return,
            told = accepting.wait_for(|open| *open) => if told.is_err() {
                return;
            },
        }
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
                        let (opening, evicted) = openings.admit(peer.ip(), serving.clone());
                        if evicted {
                            tracing::debug!(
                                "{} connections on {local} were opening at once; the oldest of the busiest address was closed",
                                max_opening + 1
                            );
                        }
                        let task = connection(stream, peer, shared.clone(), serving.clone(), opening);
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
        // Dropping the set aborts every connection task: sockets close and the serving loops abort
        // the handlers still in flight on them.
    });
    Ok((local, task, incoming))
}

/// One connection, from its first byte to its close. A secure node serves only TLS clients
/// with a certificate of its cluster, and answers a plaintext handshake with a refusal that says
/// so; a plaintext node closes a TLS connection at once. Neither waits for a timeout.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    serving: Arc<OnceLock<AbortHandle>>,
    opening: OpeningSlot,
) {
    let config = &shared.config;
    set_options(&stream);
    // turmoil's `peek` takes `&mut self`, tokio's `&self` (`crate::net`): one binding for both.
    #[allow(unused_mut)]
    let mut stream = stream;
    let mut first = [0u8; 1];
    let tls_client = match tokio::time::timeout(OPENING_TIMEOUT, stream.peek(&mut first)).await {
        Ok(Ok(1)) => first[0] == TLS_HANDSHAKE_RECORD,
        _ => return,
    };
    match (&config.tls, tls_client) {
        (Some(tls), true) => {
            let accepted = tokio::time::timeout(
                OPENING_TIMEOUT,
                TlsAcceptor::from(tls.server.clone()).accept(crate::net::beneath_tls(stream)),
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
                Ok(caller) => opened(stream, peer, Some(caller), &shared, serving, opening).await,
                Err(why) => tracing::debug!("refused a connection from {peer}: {why}"),
            }
        }
        (Some(_), false) => refuse_plaintext(stream, peer, config, opening).await,
        (None, true) => {
            // A fatal `handshake_failure` alert: the caller's TLS stack reports a refusal, not a
            // reset it might retry.
            let mut stream = stream;
            let alert = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 40];
            let refused = async {
                stream.write_all(&alert).await?;
                stream.shutdown().await?;
                // What the caller still sends is read, a little, before the close: a socket
                // closed with unread bytes resets the connection, and the caller, its hello
                // not yet all written on a slow link, would see a reset instead of the alert
                // (and retry, taking it for a busy provider).
                let mut unread = [0u8; 1024];
                let mut left = 64usize << 10;
                while left > 0 {
                    let n = stream.read(&mut unread).await?;
                    if n == 0 {
                        break;
                    }
                    left = left.saturating_sub(n);
                }
                io::Result::Ok(())
            };
            let _ = tokio::time::timeout(Duration::from_secs(1), refused).await;
            tracing::debug!(
                "refused a TLS connection from {peer}: this node was started insecure() and speaks plaintext"
            );
        }
        (None, false) => {
            let stream = crate::net::beneath_tls(stream);
            opened(stream, peer, None, &shared, serving, opening).await
        }
    }
}

/// The options of every accepted connection.
fn set_options(stream: &TcpStream) {
    // Replies are small frames written one by one: without this, Nagle's algorithm holds each
    // behind the client's delayed ACK.
    let _ = stream.set_nodelay(true);
    // A caller gone without a word is then found by the kernel, and its place among the
    // established connections freed, instead of held until the idle timeout.
    crate::net::keep_alive(stream);
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
            ..handshake::refusal(&config.node, config.limits.max_frame as u64, why)
        };
        let _ =
            tokio::time::timeout(OPENING_TIMEOUT, handshake::answer(&mut stream, &refusal)).await;
    }
}

/// A connection past TLS (or plaintext, on an insecure node): the handshake (or a
/// first-release peer), a place among the established connections, then the requests in the agreed
/// version. `verified` is the caller's name as its certificate says it.
async fn opened<S>(
    mut stream: S,
    peer: SocketAddr,
    verified: Option<String>,
    shared: &Shared,
    serving: Arc<OnceLock<AbortHandle>>,
    opening: OpeningSlot,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let config = &shared.config;
    let max_frame = config.limits.max_frame as u64;
    let opened = tokio::time::timeout(OPENING_TIMEOUT, handshake::open(&mut stream)).await;
    // It has spoken (or given up): no longer one of the connections opening.
    drop(opening);
    let who = match &verified {
        Some(name) => Peer::Named(Arc::from(name.as_str())),
        None => Peer::Address(peer.ip()),
    };
    let account = Account::new(shared.budget.clone(), &who, config.connection);
    match opened {
        Ok(Ok(Opening::Hello(hello))) => {
            let mut welcome = handshake::welcome(&hello, &config.versions, &config.node, max_frame);
            if let Some(verified) = &verified
                && *verified != hello.node
            {
                welcome = handshake::refusal(
                    &config.node,
                    max_frame,
                    format!(
                        "the caller's handshake says node `{}`, its certificate `{verified}`",
                        hello.node
                    ),
                );
            }
            welcome.idle_timeout_ms =
                u64::try_from(config.limits.idle_timeout.as_millis()).unwrap_or(u64::MAX);
            let mut place = None;
            if welcome.version != 0 {
                match shared
                    .established
                    .admit(who, serving.clone(), account.clone())
                {
                    Ok(admitted) => place = Some(admitted),
                    Err(full) => welcome = busy(config, full),
                }
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
            let name: Arc<str> = Arc::from(verified.unwrap_or(hello.node).as_str());
            let server = V2 {
                dispatcher: shared.dispatcher.clone(),
                caller: Arc::new(shared.dispatcher.admission.caller(Some(&name))),
                peer: name,
                account: account.clone(),
            };
            let mut frames = Frames::new(
                stream,
                peer,
                account,
                config.limits,
                shared.warnings.clone(),
                serving.clone(),
                &[],
            );
            if welcome.features.iter().any(|f| f == super::HEARTBEAT) {
                frames = frames.beating();
            }
            let guarded = channel::guard(frames, serving);
            super::answering::serve(guarded, |deadline, request| {
                server.clone().answer(deadline, request)
            })
            .await;
            drop(place);
        }
        // The first release had no TLS: a secure node has no first-release callers.
        Ok(Ok(Opening::Legacy(_))) if verified.is_some() => {
            tracing::debug!(
                "closed a wire 1 connection from {peer}: wire 1 has no handshake to verify"
            );
        }
        Ok(Ok(Opening::Legacy(first))) => {
            let Ok(place) = shared
                .established
                .admit(who, serving.clone(), account.clone())
            else {
                return tracing::debug!(
                    "closed a wire 1 connection from {peer}: {} connections are established, the limit",
                    config.max_connections
                );
            };
            let server = V1 {
                dispatcher: shared.dispatcher.clone(),
                caller: Arc::new(shared.dispatcher.admission.caller(None)),
                versions: config.versions.clone(),
                account: account.clone(),
            };
            // The four bytes read to tell the two apart begin the peer's first frame.
            let frames = Frames::new(
                stream,
                peer,
                account,
                config.limits,
                shared.warnings.clone(),
                serving.clone(),
                &first,
            );
            super::answering::serve(channel::guard(frames, serving), |deadline, request| {
                server.clone().answer(deadline, request)
            })
            .await;
            drop(place);
        }
        Ok(Err(e)) => tracing::debug!("a connection from {peer} did not open correctly: {e}"),
        Err(_) => {
            tracing::debug!("a connection from {peer} said nothing within {OPENING_TIMEOUT:?}")
        }
    }
}

/// The refusal of a connection past the bound, saying so.
fn busy(config: &ServeConfig, full: Full) -> handshake::Welcome {
    let why = format!(
        "node {} holds {} connections, its limit, and the caller {} of them, its share",
        config.node, full.cap, full.theirs
    );
    handshake::Welcome {
        busy: true,
        ..handshake::refusal(&config.node, config.limits.max_frame as u64, why)
    }
}

#[derive(Clone)]
struct V2 {
    dispatcher: Arc<Dispatcher>,
    /// The node that opened the connection, as its handshake named it: the caller of every
    /// request on it.
    peer: Arc<str>,
    /// The calls that caller has running, over all its connections.
    caller: Arc<CallerCount>,
    /// The connection's account, which counts each reply until it is written.
    account: Arc<Account>,
}

impl V2 {
    /// One request, which runs until `deadline` (read from its context once, by the loop
    /// that runs it). Not an `async fn`: that would keep its arguments (the request) in every
    /// request's future beside the handler's for as long as the call runs.
    fn answer(
        self,
        deadline: Instant,
        request: v2::RequestFrame,
    ) -> impl Future<Output = v2::ReplyFrame> + Send + 'static {
        let mut request = request.0;
        // Just read from the frame: nothing else holds it.
        if let Some(request) = Arc::get_mut(&mut request) {
            request.head.caller = Some(self.peer);
        }
        let frame = request.head.frame_id;
        // Only what the handler needs goes into every request's task.
        let (dispatcher, account, caller) = (self.dispatcher, self.account, self.caller);
        async move {
            let reply = dispatcher.handle(request, deadline, &caller).await;
            if let Some(frame) = frame {
                account.add_reply(frame, reply.size());
            }
            v2::ReplyFrame(reply)
        }
    }
}

#[derive(Clone)]
struct V1 {
    dispatcher: Arc<Dispatcher>,
    /// The calls of this connection's unnamed caller, and of every other wire 1 one.
    caller: Arc<CallerCount>,
    versions: RangeInclusive<u32>,
    account: Arc<Account>,
}

impl V1 {
    /// One request, which runs until `deadline`.
    fn answer(
        self,
        deadline: Instant,
        request: v1::RequestFrame,
    ) -> impl Future<Output = v1::ReplyFrame> + Send + 'static {
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
        let frame = request.request.head.frame_id;
        async move {
            let reply = match refusal {
                Some(refused) => refused,
                None => {
                    self.dispatcher
                        .handle(request.request, deadline, &self.caller)
                        .await
                }
            };
            if let Some(frame) = frame {
                self.account.add_reply(frame, reply.size());
            }
            reply.into()
        }
    }
}

#[cfg(all(test, not(feature = "simulation")))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_accepted_connection_has_keepalive_and_no_nagle() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _caller = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        set_options(&accepted);
        assert!(socket2::SockRef::from(&accepted).keepalive().unwrap());
        assert!(accepted.nodelay().unwrap());
    }
}
