//! Upstreams for the gateway's tests: plain hyper servers on loopback, each saying who it is
//! and what it saw, with paths that misbehave on purpose.
#![allow(dead_code, unreachable_pub)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{Request, Response, StatusCode};
use futures::StreamExt as _;
use http_body_util::BodyExt as _;
use hyper::body::{Frame, Incoming};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use cluster_discovery::resolve::Endpoint;

/// What an upstream counted.
#[derive(Debug, Default)]
pub struct Seen {
    /// Requests that reached it.
    pub hits: AtomicUsize,
    /// Connections it accepted.
    pub connections: AtomicUsize,
    /// Request body bytes it read.
    pub bytes: AtomicU64,
    /// Released `/hold` requests wait on this.
    pub release: Notify,
    /// Requests waiting in `/hold`.
    pub holding: AtomicUsize,
}

/// An upstream HTTP server on loopback.
pub struct Upstream {
    pub addr: SocketAddr,
    pub seen: Arc<Seen>,
    tasks: JoinSet<()>,
}

impl Upstream {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        let mut tasks = JoinSet::new();
        let s = seen.clone();
        tasks.spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                s.connections.fetch_add(1, Ordering::SeqCst);
                let s = s.clone();
                conns.spawn(async move {
                    let svc = hyper::service::service_fn(move |req| answer(req, addr, s.clone()));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), svc)
                        .with_upgrades()
                        .await;
                });
            }
        });
        Self { addr, seen, tasks }
    }

    pub fn endpoint(&self) -> Endpoint {
        Endpoint::new("127.0.0.1", self.addr.port())
    }

    pub fn hits(&self) -> usize {
        self.seen.hits.load(Ordering::SeqCst)
    }

    /// Killed: the listener closed (connections to it are refused from now on) and every
    /// open connection dropped.
    pub fn kill(&mut self) {
        // Aborting the accept task drops the listener and, with its JoinSet, every connection.
        self.tasks.abort_all();
    }
}

/// What each path does:
/// - `/hold`: waits until released, then answers;
/// - `/slow`: answers after 60 s (the gateway gives up first);
/// - `/break`: reads the request, then closes the connection without an answer;
/// - `/ws`: switches to `echo` and echoes bytes;
/// - anything else: `200` with the port, method, path and query, and the headers seen, one
///   `name: value` a line, after the body's length.
async fn answer(
    req: Request<Incoming>,
    me: SocketAddr,
    seen: Arc<Seen>,
) -> Result<Response<Body>, std::io::Error> {
    seen.hits.fetch_add(1, Ordering::SeqCst);
    match req.uri().path() {
        "/hold" => {
            seen.holding.fetch_add(1, Ordering::SeqCst);
            seen.release.notified().await;
        }
        "/slow" => tokio::time::sleep(Duration::from_secs(60)).await,
        // Answers at once, then reads the request's body (as Tomcat does after an early 401):
        // the connection stays busy sending it.
        "/early" => {
            let body = req.into_body();
            tokio::spawn(async move {
                let _ = body.collect().await;
            });
            return Ok(Response::new(Body::from("early\n")));
        }
        "/empty" => {
            return Ok(Response::builder()
                .status(StatusCode::NO_CONTENT)
                .body(Body::empty())
                .unwrap());
        }
        "/break" => {
            let _ = req.into_body().collect().await;
            return Err(std::io::Error::other("broken on purpose"));
        }
        "/ws" => {
            let mut req = req;
            let upgraded = hyper::upgrade::on(&mut req);
            tokio::spawn(async move {
                if let Ok(io) = upgraded.await {
                    let (mut r, mut w) = tokio::io::split(TokioIo::new(io));
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                }
            });
            return Ok(Response::builder()
                .status(StatusCode::SWITCHING_PROTOCOLS)
                .header("connection", "upgrade")
                .header("upgrade", "echo")
                .body(Body::empty())
                .unwrap());
        }
        _ => {}
    }
    let head = format!(
        "port={}\n{} {}\n",
        me.port(),
        req.method(),
        req.uri()
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
    );
    let headers: String = req
        .headers()
        .iter()
        .map(|(k, v)| format!("{k}: {}\n", v.to_str().unwrap_or("?")))
        .collect();
    // Counted as it streams in, so a test can see how far the body got.
    let mut body = req.into_body();
    let mut n = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(std::io::Error::other)?;
        if let Some(d) = frame.data_ref() {
            n += d.len() as u64;
            seen.bytes.fetch_add(d.len() as u64, Ordering::SeqCst);
        }
    }
    Ok(Response::new(Body::from(format!(
        "{head}body={n}\n{headers}"
    ))))
}

/// An HTTP client (hyper's, pooled), as the gateway's callers.
pub fn client() -> Client<HttpConnector, Body> {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

/// An answer, read whole.
pub struct Answer {
    pub status: StatusCode,
    pub text: String,
}

impl Answer {
    /// The value of a header the upstream reported it saw.
    pub fn seen(&self, name: &str) -> Option<&str> {
        self.text
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
    }

    pub fn port(&self) -> Option<u16> {
        self.text
            .lines()
            .next()?
            .strip_prefix("port=")?
            .parse()
            .ok()
    }
}

pub async fn send(c: &Client<HttpConnector, Body>, req: Request<Body>) -> Answer {
    let res = c.request(req).await.unwrap();
    let status = res.status();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        text: String::from_utf8_lossy(&body).into_owned(),
    }
}

pub async fn get(c: &Client<HttpConnector, Body>, url: String) -> Answer {
    send(c, Request::get(url).body(Body::empty()).unwrap()).await
}

pub async fn post(c: &Client<HttpConnector, Body>, url: String, body: &'static str) -> Answer {
    send(c, Request::post(url).body(Body::from(body)).unwrap()).await
}

/// A body streamed from a channel, and the sender feeding it.
pub fn channel_body() -> (futures::channel::mpsc::Sender<Bytes>, Body) {
    let (tx, rx) = futures::channel::mpsc::channel::<Bytes>(1);
    let stream = rx.map(|b| Ok::<_, Infallible>(Frame::data(b)));
    (tx, Body::new(http_body_util::StreamBody::new(stream)))
}

/// A port nobody listens on (bound, then closed).
pub async fn dead_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().port()
}

/// An instance that reads each request whole (head and `content-length` body), then closes
/// the connection without answering: it may have acted on the request.
pub struct Breaker {
    pub addr: SocketAddr,
    pub hits: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Breaker {
    pub async fn start() -> Self {
        use tokio::io::AsyncReadExt as _;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                let h = h.clone();
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    let mut buf = [0u8; 4096];
                    loop {
                        let Ok(n) = tcp.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        got.extend_from_slice(&buf[..n]);
                        let text = String::from_utf8_lossy(&got).to_lowercase();
                        if let Some(end) = text.find("\r\n\r\n") {
                            let length: usize = text
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .and_then(|v| v.trim().parse().ok())
                                .unwrap_or(0);
                            if got.len() >= end + 4 + length {
                                h.fetch_add(1, Ordering::SeqCst);
                                return; // dropped: closed without an answer
                            }
                        }
                    }
                });
            }
        });
        Self { addr, hits, task }
    }

    pub fn endpoint(&self) -> Endpoint {
        Endpoint::new("127.0.0.1", self.addr.port())
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for Breaker {
    fn drop(&mut self) {
        self.task.abort();
    }
}
