//! The client's side: a pool of one connection per peer (per address, node name and
//! generation: a connection is reused only for the node it was checked to be), opened by one
//! connection attempt at a time (the calls that need it meanwhile wait for that one), under a
//! connect timeout of its own, and a bound on requests in flight on each connection that this
//! side enforces, so that a request never waits in a queue where a timeout could not tell
//! whether it left.
//! A connection idle for three quarters of the provider's idle timeout is closed here, before
//! the provider would: only this side knows that no request is about to leave on it.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

use super::caller_frames::CallerFrames;
use super::calling::{Calls, Ended};
use super::limit::{InFlightLimit, NoPlace};
use crate::catch_unwind::CatchUnwind;
use crate::fast_map::FastMap;
use crate::net::TcpStream;
use crate::rate_limited::RateLimited;
use crate::registry::NodeInfo;
use crate::security::tls::{self, Tls};
use crate::transport::TransportError;
use crate::transport::wire::handshake::{self, Hello};
use crate::transport::wire::{self, Reply, Request, v1, v2};

/// The shortest idle timeout a provider's welcome is taken at.
const MIN_IDLE: Duration = Duration::from_secs(1);

/// What the connector needs to know to open connections.
#[derive(Clone)]
pub(crate) struct ConnectConfig {
    /// This node's name, said in every handshake.
    pub(crate) node: Arc<str>,
    pub(crate) versions: RangeInclusive<u32>,
    pub(crate) max_frame: usize,
    /// How long opening a connection (TCP and the handshake) may take.
    pub(crate) connect_timeout: Duration,
    /// Requests in flight on one connection; more wait here, where waiting means "not sent".
    pub(crate) max_in_flight: usize,
    /// How long a reply frame that has begun to arrive may take to finish.
    pub(crate) frame_timeout: Duration,
    /// This node's idle timeout: a connection is closed here at three quarters of the lower of
    /// it and the provider's.
    pub(crate) idle_timeout: Duration,
    /// Mutual TLS; `None` on a node started `insecure()`.
    pub(crate) tls: Option<Arc<Tls>>,
}

/// The client side: a pool of one connection per peer.
pub(crate) struct TcpConnector {
    pool: Arc<Mutex<Pool>>,
    config: ConnectConfig,
    attempts: AtomicU64,
}

type Pool = FastMap<Peer, Slot>;

/// A pooled connection's key. The name a connection reaches is checked when it opens (the
/// certificate's under TLS, the welcome's in plaintext), so a connection is reused only for
/// the node it was checked against: an entry that names another node at a pooled address
/// (forged, or stale after another node took the port) opens a connection of its own, which
/// the check refuses, instead of being handed the pooled one. A node restarted at the same
/// address under a new generation gets a new connection too.
struct Peer {
    addr: SocketAddr,
    name: Box<str>,
    generation: u64,
}

impl Peer {
    fn of(to: &NodeInfo) -> Self {
        Self {
            addr: to.addr,
            name: to.name.as_str().into(),
            generation: to.generation,
        }
    }
}

/// What the pool tells peers apart by. A trait so that a call looks its connection up by its
/// `NodeInfo` as it is (`&dyn Keyed`), without copying the name into a `Peer`: one allocation
/// per call less. The map hashes and compares `Peer`s and lookups alike through `key()`, as
/// `Borrow` requires.
trait Keyed {
    fn key(&self) -> (SocketAddr, &str, u64);
}

impl Keyed for NodeInfo {
    fn key(&self) -> (SocketAddr, &str, u64) {
        (self.addr, &self.name, self.generation)
    }
}

impl Keyed for Peer {
    fn key(&self) -> (SocketAddr, &str, u64) {
        (self.addr, &self.name, self.generation)
    }
}

/// `to` as a key to look up.
fn keyed(to: &NodeInfo) -> &dyn Keyed {
    to
}

impl<'a> Borrow<dyn Keyed + 'a> for Peer {
    fn borrow(&self) -> &(dyn Keyed + 'a) {
        self
    }
}

impl Hash for dyn Keyed + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

impl PartialEq for dyn Keyed + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for dyn Keyed + '_ {}

impl Hash for Peer {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

impl PartialEq for Peer {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Peer {}

enum Slot {
    Open(Connection),
    /// One connection attempt under way, numbered, in a task of its own ([`open`]); every call
    /// that needs the peer waits for its outcome here, `None` until it has one.
    Connecting(u64, watch::Receiver<Option<Opened>>),
}

/// How a connection attempt ended: every call that waited for it is told the same.
type Opened = Result<Connection, TransportError>;

/// One pooled connection, shared by the calls on it: every call takes it from the pool, and
/// one count is all that costs.
#[derive(Clone)]
struct Connection(Arc<Parts>);

/// A connection's calls in its wire version (`calling.rs`), its dispatch task (whose end means
/// the connection is closed), and the bound on requests in flight on it.
struct Parts {
    client: WireClient,
    dispatch: tokio::task::AbortHandle,
    in_flight: Arc<InFlightLimit>,
}

impl std::ops::Deref for Connection {
    type Target = Parts;

    fn deref(&self) -> &Parts {
        &self.0
    }
}

#[derive(Clone)]
enum WireClient {
    /// The first release's wire.
    V1(Calls<v1::RequestFrame>),
    V2(Calls<v2::RequestFrame>),
}

impl Connection {
    fn is_open(&self) -> bool {
        !self.dispatch.is_finished()
    }
}

impl TcpConnector {
    pub(crate) fn new(config: ConnectConfig) -> Self {
        Self {
            pool: Arc::default(),
            config,
            attempts: AtomicU64::new(0),
        }
    }

    fn pool(&self) -> MutexGuard<'_, Pool> {
        lock(&self.pool)
    }

    /// Removes `conn` from the pool, unless another call has replaced it already.
    fn evict(&self, to: &NodeInfo, conn: &Connection) {
        let mut pool = self.pool();
        if let Some(Slot::Open(c)) = pool.get(keyed(to))
            && c.dispatch.id() == conn.dispatch.id()
        {
            pool.remove(keyed(to));
        }
    }

    /// Pooled connections open now.
    pub(crate) fn open(&self) -> usize {
        self.pool()
            .values()
            .filter(|slot| matches!(slot, Slot::Open(c) if c.is_open()))
            .count()
    }

    /// Closes every pooled connection (the node is stopping).
    pub(crate) fn close(&self) {
        for (_, slot) in self.pool().drain() {
            if let Slot::Open(conn) = slot {
                conn.dispatch.abort();
            }
        }
    }

    /// The pooled connection to `to`, or the one being opened, or a new one.
    async fn connection(
        &self,
        to: &NodeInfo,
        version: u32,
        deadline: Instant,
    ) -> Result<Connection, TransportError> {
        let mut pending = {
            let mut pool = self.pool();
            match pool.get(keyed(to)) {
                Some(Slot::Open(conn)) if conn.is_open() => return Ok(conn.clone()),
                Some(Slot::Connecting(_, pending)) => pending.clone(),
                _ => {
                    let id = self.attempts.fetch_add(1, Ordering::Relaxed);
                    let (outcome, pending) = watch::channel(None);
                    // A task of its own: the attempt goes on (and settles the pool) even if
                    // every call waiting for it gives up first.
                    crate::background::spawn(open(
                        self.config.clone(),
                        to.clone(),
                        version,
                        Arc::clone(&self.pool),
                        id,
                        outcome,
                    ));
                    pool.insert(Peer::of(to), Slot::Connecting(id, pending.clone()));
                    pending
                }
            }
        };
        let opened = async {
            match pending.wait_for(Option::is_some).await {
                Ok(outcome) => Option::clone(&outcome),
                Err(_) => None,
            }
            // The attempt's task ended with no outcome: its runtime is shutting down.
            .unwrap_or_else(|| {
                Err(TransportError::NotSent(format!(
                    "connecting to {to} failed: the attempt was stopped"
                )))
            })
        };
        match tokio::time::timeout_at(deadline, opened).await {
            Ok(result) => result,
            Err(_) => Err(TransportError::NoAnswer(format!(
                "the connection to {to} was still being opened when the attempt's time ran out"
            ))),
        }
    }

    pub(crate) async fn send(
        &self,
        to: &NodeInfo,
        request: Arc<Request>,
        deadline: Instant,
    ) -> Result<Reply, TransportError> {
        let Some(version) = wire::common(&self.config.versions, &to.wire_versions()) else {
            return Err(TransportError::WireVersion(format!(
                "{to} speaks wire versions {:?}, this node {:?}",
                to.wire_versions(),
                self.config.versions
            )));
        };
        let mut conn = self.connection(to, version, deadline).await?;
        // Waiting here is waiting before the request is queued on the connection: it has not left.
        let _place = loop {
            match conn.in_flight.take(deadline).await {
                Ok(place) => break place,
                Err(NoPlace::Full) => {
                    return Err(TransportError::Queued(format!(
                        "{} requests were in flight to {to} and none ended in time",
                        self.config.max_in_flight
                    )));
                }
                // Closed for idling just now: a new connection, as for the first call.
                Err(NoPlace::Closed) => {
                    self.evict(to, &conn);
                    conn = self.connection(to, version, deadline).await?;
                }
            }
        };
        // The connection's task ends the request at its deadline (`calling.rs`).
        let result = match &conn.client {
            WireClient::V2(calls) => calls.call(v2::RequestFrame(request), deadline).await,
            WireClient::V1(calls) => {
                let frame = v1::RequestFrame { wire: 1, request };
                calls.call(frame, deadline).await
            }
        };
        match result {
            Ok(reply) => Ok(reply),
            Err(Ended::Timeout) => Err(TransportError::Timeout),
            // It waited here, behind what the connection was still writing: it never left, and
            // says nothing of the provider, which may be blamed for nothing.
            Err(Ended::Unwritten) => Err(TransportError::Queued(format!(
                "the attempt's time ran out before the connection to {to} could take the \
                 request (it was still writing what was ahead of it)"
            ))),
            Err(Ended::NotSent(why)) => {
                self.evict(to, &conn);
                Err(TransportError::NotSent(format!("{to}: {why}")))
            }
            Err(Ended::Lost(why)) => {
                self.evict(to, &conn);
                Err(TransportError::Lost(format!("{to}: {why}")))
            }
            Err(Ended::Busy(why)) => Err(TransportError::Busy(format!(
                "{to} refused the request: {why}"
            ))),
        }
    }
}

impl TcpConnector {
    /// Sends `request` on a connection of its own (never pooled) to `addr`, whose node is not
    /// known yet, and closes it. Returns the name of the node there (its certificate's under
    /// TLS, its welcome's in plaintext) and its reply. Returns by `deadline`.
    pub(crate) async fn ask_unnamed(
        &self,
        addr: SocketAddr,
        request: Arc<Request>,
        deadline: Instant,
    ) -> Result<(String, Reply), TransportError> {
        let to = NodeInfo::new("(being described)", addr, 0)
            .with_wire(Some(self.config.versions.clone()));
        let version = *self.config.versions.end();
        let opening = deadline.min(Instant::now() + self.config.connect_timeout);
        let (name, conn) =
            match tokio::time::timeout_at(opening, connect_as(&self.config, &to, version, false))
                .await
            {
                Ok(opened) => opened?,
                Err(_) => {
                    return Err(TransportError::NotSent(format!(
                        "connecting to {addr} took too long"
                    )));
                }
            };
        let WireClient::V2(calls) = &conn.client else {
            conn.dispatch.abort();
            return Err(TransportError::WireVersion(format!(
                "{addr} speaks wire 1, which has no describe request"
            )));
        };
        let result = calls.call(v2::RequestFrame(request), deadline).await;
        conn.dispatch.abort();
        match result {
            Ok(reply) => Ok((name, reply)),
            Err(Ended::Timeout) => Err(TransportError::Timeout),
            Err(Ended::Unwritten) => Err(TransportError::Queued(format!(
                "the time ran out before the request could be written to {addr}"
            ))),
            Err(e) => Err(TransportError::Lost(format!("{addr}: {e:?}"))),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// One connection attempt: TCP, the handshake (wire 2 and later), the connection's task. Puts its
/// outcome in the pool (the connection, or no entry so that the next call tries again), then
/// tells it to the calls that wait for it (`outcome`). A panic in the attempt is its error.
async fn open(
    config: ConnectConfig,
    to: NodeInfo,
    version: u32,
    pool: Arc<Mutex<Pool>>,
    id: u64,
    outcome: watch::Sender<Option<Opened>>,
) {
    let attempt = tokio::time::timeout(config.connect_timeout, connect(&config, &to, version));
    let result = match CatchUnwind::new(AssertUnwindSafe(attempt)).await {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err(TransportError::NoAnswer(format!(
            "connecting to {to} took longer than the connect timeout ({:?})",
            config.connect_timeout
        ))),
        Err(panic) => Err(TransportError::NotSent(format!(
            "connecting to {to} failed: it panicked: {}",
            crate::server::panic_message(&*panic)
        ))),
    };
    settle(&pool, &to, id, &result);
    outcome.send_replace(Some(result));
}

/// The pool after attempt `id` to `to` ended with `result`, unless another has replaced it.
fn settle(pool: &Mutex<Pool>, to: &NodeInfo, id: u64, result: &Opened) {
    let mut pool = lock(pool);
    if matches!(pool.get(keyed(to)), Some(Slot::Connecting(current, _)) if *current == id) {
        match result {
            Ok(conn) => {
                // Connections that have closed (peers gone after a deploy, a node's earlier
                // generation), under any key, are dropped here, so the pool does not grow with
                // history.
                pool.retain(|_, slot| !matches!(slot, Slot::Open(c) if !c.is_open()));
                pool.insert(Peer::of(to), Slot::Open(conn.clone()));
            }
            Err(_) => {
                pool.remove(keyed(to));
            }
        }
    }
}

async fn connect(
    config: &ConnectConfig,
    to: &NodeInfo,
    version: u32,
) -> Result<Connection, TransportError> {
    connect_as(config, to, version, true)
        .await
        .map(|(_, conn)| conn)
}

/// A connection to `to`, and the name of the node there: its certificate's under TLS, its
/// welcome's in plaintext. `named`: whether `to.name` is the node expected there (a registry
/// entry's; another is refused) or a placeholder (a peer being described, named here).
async fn connect_as(
    config: &ConnectConfig,
    to: &NodeInfo,
    version: u32,
    named: bool,
) -> Result<(String, Connection), TransportError> {
    let stream = crate::net::beneath_tls(dial(to).await?);
    let Some(tls) = &config.tls else {
        return opened(config, to, version, stream, named).await;
    };
    let stream = TlsConnector::from(tls.client.clone())
        .connect(tls::server_name(&to.name, to.addr), stream)
        .await
        .map_err(|e| match tls_refusal(&e) {
            Some(why) => TransportError::Untrusted(format!(
                "the TLS handshake with {to} failed: {why} (a node started insecure() speaks no TLS; \
                 one of another cluster's CA is refused)"
            )),
            // A reset or a close is not a verdict on trust: the provider may be busy.
            None => TransportError::NotSent(format!("the TLS handshake with {to} broke off: {e}")),
        })?;
    // The chain was checked in the handshake; who it names is checked here, against the
    // registry entry this call chose.
    let names = tls
        .peer_of(stream.get_ref().1.peer_certificates())
        .map_err(|why| TransportError::Untrusted(format!("{to}: {why}")))?;
    if !named {
        // The certificate names the node: its welcome must say the same name.
        let to = NodeInfo {
            name: names,
            ..to.clone()
        };
        return opened(config, &to, version, stream, true).await;
    }
    if names != to.name {
        // Once per address per interval: every call to that entry meets it.
        static WARNED: std::sync::LazyLock<RateLimited> =
            std::sync::LazyLock::new(RateLimited::default);
        WARNED.note(to.addr.ip(), |left_out| {
            tracing::warn!(
                "the registry says node `{}` is at {}, but the certificate there names node `{names}`: not calling it ({left_out} more such lines left out)",
                to.name,
                to.addr
            )
        });
        return Err(TransportError::WrongPeer(format!(
            "{} presented the certificate of node `{names}`, not of `{}`",
            to.addr, to.name
        )));
    }
    opened(config, to, version, stream, true).await
}

/// A TCP connection to `to`, with the options of every connection of the call path.
async fn dial(to: &NodeInfo) -> Result<TcpStream, TransportError> {
    let stream = TcpStream::connect(to.addr)
        .await
        .map_err(|e| TransportError::NotSent(format!("cannot connect to {to}: {e}")))?;
    let _ = stream.set_nodelay(true);
    // A peer gone without a word is then found by the kernel, not by the next call on it.
    crate::net::keep_alive(&stream);
    Ok(stream)
}

/// A connection past TLS (or plaintext, on an insecure node): the handshake (wire 2 and
/// later), then the connection's task.
async fn opened<S>(
    config: &ConnectConfig,
    to: &NodeInfo,
    version: u32,
    mut stream: S,
    named: bool,
) -> Result<(String, Connection), TransportError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut idle = config.idle_timeout;
    let mut heartbeats = false;
    let mut name = to.name.clone();
    if !named && version < 2 {
        return Err(TransportError::WireVersion(format!(
            "{} speaks wire 1, whose connections do not say which node they reach",
            to.addr
        )));
    }
    if version >= 2 {
        let hello = Hello {
            versions: (2.max(*config.versions.start()), *config.versions.end()),
            features: handshake::FEATURES
                .iter()
                .map(|f| (*f).to_owned())
                .collect(),
            node: config.node.to_string(),
            max_frame: config.max_frame as u64,
        };
        let welcome = handshake::offer(&mut stream, &hello).await.map_err(|e| {
            let detail = format!("the handshake with {to} failed: {e}");
            // A secure provider checks the caller's certificate after the client's side of
            // the TLS handshake is done: its refusal (a TLS alert) arrives here.
            match tls_refusal(&e) {
                Some(_) => TransportError::Untrusted(format!(
                    "{detail} (it refused this node's certificate)"
                )),
                None => TransportError::NotSent(detail),
            }
        })?;
        if let Some(why) = welcome.refusal {
            return Err(if welcome.needs_tls {
                TransportError::Untrusted(why)
            } else if welcome.busy {
                TransportError::Busy(format!("{to} refused a connection: {why}"))
            } else {
                TransportError::WireVersion(why)
            });
        }
        if !config.versions.contains(&welcome.version) || welcome.version < 2 {
            return Err(TransportError::WireVersion(format!(
                "{to} agreed to wire version {}, which this node did not offer",
                welcome.version
            )));
        }
        heartbeats = welcome.features.iter().any(|f| f == super::HEARTBEAT);
        if welcome.idle_timeout_ms > 0 {
            // Not below a second, whatever the provider says: a close every few microseconds
            // would be a reconnect per call.
            let theirs = Duration::from_millis(welcome.idle_timeout_ms).max(MIN_IDLE);
            idle = idle.min(theirs);
        }
        // The address is the registry's; the name is the peer's own. They differ when the
        // entry is stale (another node took the port): the request goes elsewhere.
        if !named {
            name.clone_from(&welcome.node);
        } else if welcome.node != to.name {
            return Err(TransportError::NotSent(format!(
                "{} is node `{}`, not `{}`: the registry entry is stale",
                to.addr, welcome.node, to.name
            )));
        }
    }
    let in_flight = Arc::new(InFlightLimit::new(config.max_in_flight));
    let idle = Idle {
        after: idle * 3 / 4,
        in_flight: in_flight.clone(),
    };
    let (client, dispatch) = if version >= 2 {
        let (calls, mut dispatch) = Calls::new(CallerFrames::new(
            stream,
            config.max_frame,
            config.frame_timeout,
        ));
        if heartbeats {
            dispatch = dispatch.listening_for_heartbeats(super::heartbeat::SILENCE);
        }
        (WireClient::V2(calls), spawn_dispatch(to, dispatch, idle))
    } else {
        let (calls, dispatch) = Calls::new(CallerFrames::new(
            stream,
            config.max_frame,
            config.frame_timeout,
        ));
        (WireClient::V1(calls), spawn_dispatch(to, dispatch, idle))
    };
    Ok((
        name,
        Connection(Arc::new(Parts {
            client,
            dispatch,
            in_flight,
        })),
    ))
}

/// When a pooled connection is closed for idling.
struct Idle {
    after: Duration,
    in_flight: Arc<InFlightLimit>,
}

impl Idle {
    /// Returns once the connection has been closed for idling.
    async fn closed(self) {
        loop {
            // Not before a fraction of the timeout: a connection busy all along is checked
            // again after that, not in a loop.
            let due =
                (self.in_flight.last_active() + self.after).max(Instant::now() + self.after / 8);
            tokio::time::sleep_until(due).await;
            if self.in_flight.close_if_idle(self.after) {
                return;
            }
        }
    }
}

/// The TLS verdict inside an I/O error (a certificate refused, an alert received), if that is
/// what it is; `None` for a reset or a close, which says nothing about trust.
fn tls_refusal(e: &std::io::Error) -> Option<&rustls::Error> {
    e.get_ref()?.downcast_ref::<rustls::Error>()
}

fn spawn_dispatch<F, E>(to: &NodeInfo, dispatch: F, idle: Idle) -> tokio::task::AbortHandle
where
    F: std::future::Future<Output = Result<(), E>> + Send + 'static,
    E: std::fmt::Display,
{
    let to = to.clone();
    crate::background::spawn(async move {
        tokio::select! {
            ended = dispatch => if let Err(e) = ended {
                tracing::debug!("the connection to {to} closed: {e}");
            },
            () = idle.closed() => tracing::debug!("closed the idle connection to {to}"),
        }
    })
    .abort_handle()
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    #[test]
    fn a_pooled_peer_is_found_by_its_entry_and_by_no_other() {
        let addr: SocketAddr = "127.0.0.1:7000".parse().unwrap();
        let real = NodeInfo::new("search-1", addr, 3).with_wire(Some(2..=2));
        let mut pool = FastMap::<Peer, u32>::default();
        pool.insert(Peer::of(&real), 1);
        // What `Borrow` requires: a key and its lookup hash alike.
        let hasher = pool.hasher();
        assert_eq!(
            hasher.hash_one(Peer::of(&real)),
            hasher.hash_one(keyed(&real))
        );
        // Only the address, name and generation count, not what else the entry says.
        assert_eq!(pool.get(keyed(&real.clone().with_wire(None))), Some(&1));
        let forged = NodeInfo::new("search-9", addr, 3);
        let restarted = NodeInfo::new("search-1", addr, 4);
        let moved = NodeInfo::new("search-1", "127.0.0.1:7001".parse().unwrap(), 3);
        for other in [forged, restarted, moved] {
            assert_eq!(pool.get(keyed(&other)), None, "{other:?}");
        }
    }

    #[cfg(not(feature = "simulation"))]
    #[tokio::test]
    async fn a_dialled_connection_has_keepalive_and_no_nagle() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let to = NodeInfo::new("search-1", listener.local_addr().unwrap(), 1);
        let stream = dial(&to).await.unwrap();
        assert!(socket2::SockRef::from(&stream).keepalive().unwrap());
        assert!(stream.nodelay().unwrap());
    }
}
