//! tarpc over TCP: one listener per node, one multiplexed connection per peer, re-established
//! after failure.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use tarpc::server::{BaseChannel, Channel};
use tarpc::tokio_serde::formats::Bincode;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::wire::{Shared, Wire, WireClient};
use super::{Reply, Request, TransportError};
use crate::server::Dispatcher;

#[derive(Clone)]
struct WireServer(Arc<Dispatcher>);

impl Wire for WireServer {
    // Not an `async fn`: that would keep its arguments (the context, the request) in every
    // request's task beside the handler's future for as long as the call runs.
    fn call(self, ctx: tarpc::context::Context, request: Shared) -> impl Future<Output = Reply> {
        // tarpc carries the deadline as a relative duration, rebuilt against this node's clock.
        let left = ctx
            .deadline
            .saturating_duration_since(std::time::Instant::now());
        let deadline = Instant::now() + left;
        async move {
            let dispatcher = self.0;
            dispatcher
                .handle(Arc::unwrap_or_clone(request.0), deadline)
                .await
        }
    }
}

/// Listens on `addr` until `stop` turns true; then closes the listener and every connection,
/// which aborts the handlers still running.
pub(crate) async fn serve(
    addr: SocketAddr,
    dispatcher: Arc<Dispatcher>,
    max_frame: usize,
    mut stop: watch::Receiver<bool>,
) -> io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let mut listener = tarpc::serde_transport::tcp::listen(addr, Bincode::default).await?;
    listener.config_mut().max_frame_length(max_frame);
    let local = listener.local_addr();
    let server = WireServer(dispatcher);
    let task = tokio::spawn(async move {
        let mut connections = JoinSet::new();
        let mut pause = false;
        loop {
            if std::mem::take(&mut pause) {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            tokio::select! {
                _ = stop.wait_for(|stopped| *stopped) => break,
                accepted = listener.next() => match accepted {
                    Some(Ok(transport)) => {
                        // Replies are small frames written one by one: without this, Nagle's
                        // algorithm holds each behind the client's delayed ACK.
                        let _ = transport.get_ref().set_nodelay(true);
                        let server = server.clone();
                        connections.spawn(async move {
                            BaseChannel::with_defaults(transport)
                                .execute(server.serve())
                                .for_each(|call| async { tokio::spawn(call); })
                                .await;
                        });
                    }
                    // A failed accept (a peer that reset at once, too many open files) costs
                    // that connection, not the listener; a pause keeps a persistent cause
                    // (out of file handles) from spinning the loop.
                    Some(Err(e)) => {
                        tracing::warn!("accepting a connection on {local} failed: {e}");
                        pause = true;
                    }
                    None => break,
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        // Dropping the set aborts every connection task: sockets close and tarpc aborts the
        // handlers still in flight on them.
    });
    Ok((local, task))
}

/// The client side: a pool of one tarpc connection per peer.
pub(crate) struct TcpConnector {
    pool: Mutex<HashMap<SocketAddr, Connection>>,
    max_frame: usize,
}

/// One pooled connection: the tarpc client, and its dispatch task, whose end means the
/// connection is closed.
#[derive(Clone)]
struct Connection {
    client: WireClient,
    dispatch: tokio::task::AbortHandle,
}

impl Connection {
    fn is_open(&self) -> bool {
        !self.dispatch.is_finished()
    }
}

impl TcpConnector {
    pub(crate) fn new(max_frame: usize) -> Self {
        Self {
            pool: Mutex::default(),
            max_frame,
        }
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, HashMap<SocketAddr, Connection>> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Removes `conn` from the pool, unless another call has replaced it already.
    fn evict(&self, to: SocketAddr, conn: &Connection) {
        let mut pool = self.pool();
        if pool
            .get(&to)
            .is_some_and(|c| c.dispatch.id() == conn.dispatch.id())
        {
            pool.remove(&to);
        }
    }

    /// Closes every pooled connection (the node is stopping).
    pub(crate) fn close(&self) {
        for (_, conn) in self.pool().drain() {
            conn.dispatch.abort();
        }
    }

    async fn connect(
        &self,
        to: SocketAddr,
        deadline: Instant,
    ) -> Result<Connection, TransportError> {
        let mut connect = tarpc::serde_transport::tcp::connect(to, Bincode::default);
        connect.config_mut().max_frame_length(self.max_frame);
        let transport = match tokio::time::timeout_at(deadline, connect).await {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => {
                return Err(TransportError::NotSent(format!(
                    "cannot connect to {to}: {e}"
                )));
            }
            Err(_) => {
                return Err(TransportError::NotSent(format!(
                    "connecting to {to} timed out"
                )));
            }
        };
        let _ = transport.get_ref().set_nodelay(true);
        let tarpc::client::NewClient { client, dispatch } =
            WireClient::new(tarpc::client::Config::default(), transport);
        let dispatch = tokio::spawn(async move {
            if let Err(e) = dispatch.await {
                tracing::debug!("the connection to {to} closed: {e}");
            }
        })
        .abort_handle();
        let conn = Connection { client, dispatch };
        // Two calls racing to a new peer both connect; the first one pooled is kept and the
        // other connection closes when its last call ends. Connections that have closed (peers
        // gone after a deploy) are dropped from the pool here, so it does not grow with history.
        let mut pool = self.pool();
        pool.retain(|_, c| c.is_open());
        Ok(pool.entry(to).or_insert(conn).clone())
    }

    pub(crate) async fn send(
        &self,
        to: SocketAddr,
        request: Arc<Request>,
        deadline: Instant,
    ) -> Result<Reply, TransportError> {
        let pooled = self.pool().get(&to).cloned();
        let conn = match pooled {
            Some(conn) if conn.is_open() => conn,
            // Closed before this request was handed to it: the request has not left. A new
            // connection takes it, within the same attempt.
            Some(closed) => {
                self.evict(to, &closed);
                self.connect(to, deadline).await?
            }
            None => self.connect(to, deadline).await?,
        };
        let mut ctx = tarpc::context::current();
        ctx.deadline =
            std::time::Instant::now() + deadline.saturating_duration_since(Instant::now());
        let call = conn.client.call(ctx, Shared(Arc::clone(&request)));
        let result = match tokio::time::timeout_at(deadline, call).await {
            Ok(r) => r,
            Err(_) => return Err(TransportError::Timeout),
        };
        use tarpc::client::RpcError as E;
        match result {
            Ok(reply) => Ok(reply),
            // tarpc says `Shutdown` both when a request could not be queued and when the
            // connection closed with the request in flight. It was open when the request was
            // handed over, so the request may have reached the provider.
            Err(E::Shutdown) => {
                self.evict(to, &conn);
                Err(TransportError::Lost(format!(
                    "the connection to {to} closed with the request in flight"
                )))
            }
            Err(E::Send(e)) => Err(TransportError::NotSent(format!("cannot send to {to}: {e}"))),
            Err(E::Channel(e)) => {
                self.evict(to, &conn);
                Err(TransportError::Lost(format!(
                    "the connection to {to} broke: {e}"
                )))
            }
            Err(E::DeadlineExceeded) => Err(TransportError::Timeout),
            // tarpc's own refusals (throttling) happen before the handler runs.
            Err(E::Server(e)) => Err(TransportError::NotSent(format!(
                "{to} refused the request: {}",
                e.detail
            ))),
        }
    }
}
