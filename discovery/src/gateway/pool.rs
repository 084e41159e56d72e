//! Each worker's connections to instances (`serve.rs`): HTTP/1.1 over TCP, kept alive and used
//! again, never shared with another worker.
//!
//! 1. A request takes the newest idle connection to its instance (the one least likely to have
//!    been closed by the instance meanwhile); those the instance closed, idle longer than
//!    `IDLE`, or not ready at once (still sending a body the instance answered before reading)
//!    are dropped on the way. None: a new one, within `connect_timeout`.
//! 2. hyper hands a request back when it was not written (the connection was found closed
//!    first): it goes out on the next connection, as it never reached the instance.
//! 3. The connection goes back to the pool when the response's body has been read to its end
//!    ([`Lease::release`], by `body.rs`), if the instance has fewer than `max_idle` idle
//!    ones. A body the client did not read whole closes its connection (it cannot carry
//!    another response). An upgraded connection is the tunnel's, never back in the pool.
//!
//! This is what hyper-util's pooled client does, without its cost per request on this path:
//! a task spawned to wait for each connection to be ready again, the pool's lock and SipHash,
//! the absolute URI taken apart again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::body::Bytes;
use axum::http::header::{HeaderValue, InvalidHeaderValue};
use axum::http::{Request, Response};
use futures::FutureExt as _;
use hyper::body::Incoming;
use hyper::client::conn::http1::{Builder, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::resolve::Endpoint;

/// How long a connection may stay idle in the pool: 90 s (hyper-util's default; nginx's
/// upstreams close theirs after 60 s, so most are closed by the instance first).
const IDLE: Duration = Duration::from_secs(90);

/// How often idle connections of every instance are looked over ([`Pool::sweep`]).
pub(crate) const SWEEP: Duration = Duration::from_secs(10);

/// Why an attempt failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// No connection could be made, or the new one closed before the request was written:
    /// the instance did not see the request.
    Connect(std::io::Error),
    /// The gateway itself is out of file descriptors or memory: no fault of the instance's.
    Local(std::io::Error),
    /// The connection failed after the request may have been written. `reused`: it had
    /// carried a request before, so the instance may just have closed it for being idle
    /// (the race every keep-alive pool has).
    Broke { error: hyper::Error, reused: bool },
}

impl Failure {
    pub(crate) fn error(&self) -> &(dyn std::error::Error + 'static) {
        match self {
            Self::Connect(e) | Self::Local(e) => e,
            Self::Broke { error, .. } => error,
        }
    }
}

/// An error of the gateway's own resources, not of the instance's.
fn local(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Idle connections by instance, newest last. foldhash, seeded per map: looked up twice per
/// request (as the core's `fast_map.rs`).
type Idle = HashMap<Endpoint, Vec<(SendRequest<Body>, Instant)>, foldhash::fast::RandomState>;

/// The most `Host` values a pool keeps ([`Pool::host`]): past it, they are all written anew.
const MAX_HOSTS: usize = 1024;

pub(crate) struct Pool {
    idle: Mutex<Idle>,
    /// Each instance's `host:port`, as a `Host` header: written once, not for every request.
    hosts: Mutex<HashMap<Endpoint, HeaderValue, foldhash::fast::RandomState>>,
    max_idle: usize,
    connect_timeout: Duration,
    /// The most an instance's connection buffers while reading (hyper's read buffer): its
    /// response head must fit. Left at hyper's ~400 KiB, a client that does not read a large
    /// response pinned that much of the gateway's memory per connection until `write_timeout`.
    max_buf: usize,
}

/// A connection in use by one request, until its response's body has been read.
pub(crate) struct Lease {
    sender: SendRequest<Body>,
    to: Endpoint,
    pool: Arc<Pool>,
}

impl Lease {
    /// The response was read whole: the connection can carry another request.
    pub(crate) fn release(self) {
        self.pool.put(self.to, self.sender);
    }
}

impl Pool {
    /// `max_buf` is floored at hyper's least, 8 KiB.
    pub(crate) fn new(max_idle: usize, connect_timeout: Duration, max_buf: usize) -> Arc<Self> {
        Arc::new(Self {
            idle: Mutex::default(),
            hosts: Mutex::default(),
            max_idle,
            connect_timeout,
            max_buf: max_buf.max(8192),
        })
    }

    /// Sends `req` (origin-form URI, `Host` set) to `to`.
    pub(crate) async fn send(
        self: &Arc<Self>,
        to: &Endpoint,
        mut req: Request<Body>,
    ) -> Result<(Response<Incoming>, Lease), Failure> {
        loop {
            let (mut sender, reused) = match self.take(to) {
                // Ready at once, or not taken: one that is not is still busy (its request's
                // body still going out after the instance answered) and would hold this
                // request up.
                Some(mut pooled) => match pooled.ready().now_or_never() {
                    Some(Ok(())) => (pooled, true),
                    Some(Err(_)) | None => continue,
                },
                None => (self.connect(to).await?, false),
            };
            match sender.try_send_request(req).await {
                Ok(response) => return Ok((response, self.lease(sender, to))),
                Err(mut e) => match e.take_message() {
                    // Not written: a kept-alive connection found closed; the next takes it.
                    Some(back) if reused => req = back,
                    // Not written on a new connection: the instance did not see it.
                    Some(_) => return Err(Failure::Connect(std::io::Error::other(e.into_error()))),
                    None => {
                        return Err(Failure::Broke {
                            error: e.into_error(),
                            reused,
                        });
                    }
                },
            }
        }
    }

    fn lease(self: &Arc<Self>, sender: SendRequest<Body>, to: &Endpoint) -> Lease {
        Lease {
            sender,
            to: to.clone(),
            pool: self.clone(),
        }
    }

    async fn connect(&self, to: &Endpoint) -> Result<SendRequest<Body>, Failure> {
        let connect = TcpStream::connect((to.host.as_str(), to.port));
        let tcp = match tokio::time::timeout(self.connect_timeout, connect).await {
            Ok(Ok(tcp)) => tcp,
            Ok(Err(e)) if local(&e) => return Err(Failure::Local(e)),
            Ok(Err(e)) => return Err(Failure::Connect(e)),
            Err(_) => {
                return Err(Failure::Connect(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no connection within {:?}", self.connect_timeout),
                )));
            }
        };
        let _ = tcp.set_nodelay(true);
        let (sender, connection) = Builder::new()
            .max_buf_size(self.max_buf)
            .handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| Failure::Connect(std::io::Error::other(e)))?;
        // Driven by a task of the worker's own, until the connection closes; an upgrade (101)
        // hands the socket to the tunnel.
        tokio::spawn(async move {
            if let Err(e) = connection.with_upgrades().await {
                tracing::debug!("a connection to an instance ended: {e}");
            }
        });
        Ok(sender)
    }

    /// The newest idle connection to `to` that is still open and young enough.
    fn take(&self, to: &Endpoint) -> Option<SendRequest<Body>> {
        let mut idle = self.lock();
        let now = Instant::now();
        let list = idle.get_mut(to)?;
        while let Some((sender, since)) = list.pop() {
            if !sender.is_closed() && now.duration_since(since) < IDLE {
                return Some(sender);
            }
        }
        None
    }

    /// Drops the idle connections the instances closed or that idled past `IDLE`, and the
    /// instances left without any: every `SWEEP`, by a task of the worker's (`serve.rs`), so
    /// that a worker without traffic closes its idle connections too.
    pub(crate) fn sweep(&self) {
        let now = Instant::now();
        self.lock().retain(|_, list| {
            list.retain(|(s, since)| !s.is_closed() && now.duration_since(*since) < IDLE);
            !list.is_empty()
        });
    }

    fn put(&self, to: Endpoint, sender: SendRequest<Body>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.lock();
        let now = Instant::now();
        let list = idle.entry(to).or_default();
        if list.len() < self.max_idle {
            list.push((sender, now));
        }
    }

    /// `to` as a `Host` header's value (`host:port`, an IPv6 address in brackets).
    pub(crate) fn host(&self, to: &Endpoint) -> Result<HeaderValue, InvalidHeaderValue> {
        let mut hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(host) = hosts.get(to) {
            return Ok(host.clone());
        }
        let host = HeaderValue::from_maybe_shared(Bytes::from(to.to_string()))?;
        if hosts.len() >= MAX_HOSTS {
            hosts.clear();
        }
        hosts.insert(to.clone(), host.clone());
        Ok(host)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Idle> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}
