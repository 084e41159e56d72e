//! Function routes: `POST /api/SERVICE/FUNCTION` with JSON, a typed call through the cluster's
//! call path. Real nodes on loopback with mutual TLS (one CA), the gateway a member of its own
//! (`gateway-1`), HTTP callers with API keys.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use cluster::registry::{Registry, ServiceEntry};
use cluster::{Callers, MemoryRegistry, Node};
use cluster_discovery::gateway::{EdgeCallers, FunctionRoute, Gateway, RunningGateway};
use http_body_util::BodyExt as _;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::support::client;

const SHOP_KEY: &str = "shop-key-0123456789abcdef";
const OPS_KEY: &str = "ops-key-0123456789abcdef0";

#[derive(Debug, Clone, Serialize, Deserialize, thiserror::Error)]
pub(crate) enum StockError {
    #[error("out of stock, {left} left")]
    OutOfStock { left: u32 },
    #[error("unknown item")]
    UnknownItem,
}

/// A certificate for `name` from the test binary's CA.
fn identity(name: &str) -> cluster::Identity {
    static CA: std::sync::OnceLock<cluster::Authority> = std::sync::OnceLock::new();
    CA.get_or_init(|| cluster::Authority::new("test").expect("a CA"))
        .issue(name)
        .expect("an identity")
}

#[cluster::service(name = "inventory", version = "1.0.0", timeout = "5s")]
pub(crate) trait Inventory {
    #[call(idempotent)]
    async fn reserve(&self, item: String, count: u32) -> Result<u32, StockError>;
    /// Answers after `ms` milliseconds.
    #[call(idempotent)]
    async fn slow(&self, ms: u64) -> u64;
    /// Who called: the caller's node name, and the edge caller and tenant in its metadata.
    #[call(idempotent)]
    async fn who(&self) -> (Option<String>, Option<String>, Option<String>);
}

#[cluster::service(name = "shop", version = "1.0.0", timeout = "5s")]
pub(crate) trait Shop {
    /// Reserves through `inventory`: a call inside a handler.
    async fn order(&self, item: String, count: u32) -> Result<String, String>;
}

/// Short timeouts, so that a retry comes soon on real time.
#[cluster::service(
    name = "bank",
    version = "1.0.0",
    timeout = "3s",
    retry(after = "20ms", budget = "10s", factor = 1.0, jitter = false)
)]
pub(crate) trait Bank {
    #[call(at_most_once)]
    async fn deposit(&self, id: u64) -> u64;
}

#[derive(Default)]
struct Stock {
    left: std::sync::Mutex<u32>,
    calls: AtomicUsize,
}

impl Inventory for Arc<Stock> {
    async fn reserve(&self, item: String, count: u32) -> Result<u32, StockError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if item != "apple" {
            return Err(StockError::UnknownItem);
        }
        let mut left = self.left.lock().unwrap();
        if count > *left {
            return Err(StockError::OutOfStock { left: *left });
        }
        *left -= count;
        Ok(*left)
    }

    async fn slow(&self, ms: u64) -> u64 {
        self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        ms
    }

    async fn who(&self) -> (Option<String>, Option<String>, Option<String>) {
        let context = cluster::context().expect("in a handler");
        let meta = context.metadata();
        (
            context.caller().map(str::to_owned),
            meta.get("edge-caller").map(str::to_owned),
            meta.get("tenant").map(str::to_owned),
        )
    }
}

struct Front(InventoryClient);

impl Shop for Front {
    async fn order(&self, item: String, count: u32) -> Result<String, String> {
        match self.0.reserve(item.clone(), count).await {
            Ok(left) => Ok(format!("{count} {item} ordered, {left} left")),
            Err(e) => Err(e.to_string()),
        }
    }
}

#[derive(Default)]
struct Vault {
    started: Notify,
    ran: std::sync::Mutex<Vec<u64>>,
}

impl Bank for Arc<Vault> {
    async fn deposit(&self, id: u64) -> u64 {
        self.started.notify_one();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut ran = self.ran.lock().unwrap();
        ran.push(id);
        ran.len() as u64
    }
}

async fn node(registry: &MemoryRegistry, name: &str) -> Node {
    Node::builder()
        .name(name)
        .identity(identity(name))
        .registry(registry.clone())
        .start()
        .await
        .expect("node starts")
}

/// Inventory (admitting only the gateway and the shop), the shop, the bank, and a gateway with
/// two edge callers: `shop` (inventory and shop) and `ops` (everything).
struct Setup {
    _nodes: Vec<Node>,
    registry: MemoryRegistry,
    stock: Arc<Stock>,
    vault: Arc<Vault>,
    bank: Node,
    gateway: RunningGateway,
    http: Client<HttpConnector, Body>,
}

async fn setup() -> Setup {
    let registry = MemoryRegistry::new();
    let stock = Arc::new(Stock {
        left: std::sync::Mutex::new(10),
        ..Stock::default()
    });
    let inventory = node(&registry, "inventory-1").await;
    let _ = inventory
        .serve(Callers::only(["gateway-1", "shop-*"]).may_call(InventoryServer::new(stock.clone())))
        .await
        .unwrap();
    let shop = node(&registry, "shop-1").await;
    let _ = shop
        .serve(ShopServer::new(Front(InventoryClient::new(&shop))))
        .await
        .unwrap();
    let bank = node(&registry, "bank-1").await;
    let vault = Arc::new(Vault::default());
    let _ = bank.serve(BankServer::new(vault.clone())).await.unwrap();
    let gateway_node = node(&registry, "gateway-1").await;
    let edge = EdgeCallers::new()
        .key("shop", SHOP_KEY, ["inventory.*", "shop.*"])
        .key("ops", OPS_KEY, ["*"]);
    let gateway = Gateway::new()
        .functions(
            "/api/*",
            FunctionRoute::new(&gateway_node, edge).body_read_timeout(Duration::from_millis(500)),
        )
        .workers(1)
        .start(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    Setup {
        _nodes: vec![inventory, shop, gateway_node],
        registry,
        stock,
        vault,
        bank,
        gateway,
        http: client(),
    }
}

struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    json: Value,
    text: String,
}

impl Setup {
    async fn post(&self, path: &str, key: &str, body: &str, headers: &[(&str, &str)]) -> Answer {
        let mut req = Request::post(format!("{}{path}", self.gateway.url()))
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {key}"));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.send(req.body(Body::from(body.to_owned())).unwrap())
            .await
    }

    async fn send(&self, req: Request<Body>) -> Answer {
        let res = self.http.request(req).await.unwrap();
        let status = res.status();
        let headers = res.headers().clone();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        Answer {
            status,
            headers,
            json: serde_json::from_str(&text).unwrap_or(Value::Null),
            text,
        }
    }

    async fn stop(self) {
        self.gateway.shutdown().await;
        for node in self._nodes {
            node.shutdown().await;
        }
        self.bank.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_function_answers_its_value_its_err_and_a_nested_call() {
    let s = setup().await;
    let ok = s
        .post("/api/inventory/reserve", SHOP_KEY, r#"["apple", 3]"#, &[])
        .await;
    assert_eq!(
        (ok.status, &ok.json),
        (StatusCode::OK, &json!(7)),
        "{}",
        ok.text
    );
    let named = s
        .post(
            "/api/inventory/reserve",
            SHOP_KEY,
            r#"{"count": 1, "item": "apple"}"#,
            &[],
        )
        .await;
    assert_eq!(
        named.json,
        json!(6),
        "arguments by parameter name: {}",
        named.text
    );
    let id = ok.headers["x-cluster-request-id"].to_str().unwrap();
    assert_eq!(id.len(), 32, "{id}");

    let err = s
        .post("/api/inventory/reserve", SHOP_KEY, r#"["apple", 30]"#, &[])
        .await;
    assert_eq!(err.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", err.text);
    assert_eq!(err.json["error"]["variant"], "OutOfStock");
    assert_eq!(err.json["error"]["value"], json!({"left": 6}));
    let unit = s
        .post("/api/inventory/reserve", SHOP_KEY, r#"["pear", 1]"#, &[])
        .await;
    assert_eq!(
        unit.json["error"]["variant"], "UnknownItem",
        "{}",
        unit.text
    );

    let nested = s
        .post("/api/shop/order", SHOP_KEY, r#"["apple", 2]"#, &[])
        .await;
    assert_eq!(nested.status, StatusCode::OK, "{}", nested.text);
    assert_eq!(nested.json, json!("2 apple ordered, 4 left"));

    // The provider's allow-list sees the gateway's node; the handler sees the edge caller.
    let who = s
        .post(
            "/api/inventory/who",
            OPS_KEY,
            "[]",
            &[("x-cluster-meta-tenant", "acme")],
        )
        .await;
    assert_eq!(
        who.json,
        json!(["gateway-1", "ops", "acme"]),
        "{}",
        who.text
    );
    s.stop().await;
}

/// A path, a key, a body, headers, and the status expected.
type Case<'a> = (
    &'a str,
    &'a str,
    &'a str,
    &'a [(&'a str, &'a str)],
    StatusCode,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_requests_never_reach_a_handler() {
    let s = setup().await;
    let cases: &[Case] = &[
        (
            "/api/inventory/reserve",
            "not-a-key-of-anyone",
            r#"["apple", 1]"#,
            &[],
            StatusCode::UNAUTHORIZED,
        ),
        (
            "/api/bank/deposit",
            SHOP_KEY,
            "[1]",
            &[],
            StatusCode::FORBIDDEN,
        ),
        (
            "/api/inventory/reserve",
            SHOP_KEY,
            r#"["apple", "#,
            &[],
            StatusCode::BAD_REQUEST,
        ),
        (
            "/api/inventory/reserve",
            SHOP_KEY,
            r#"["apple", -1]"#,
            &[],
            StatusCode::BAD_REQUEST,
        ),
        (
            "/api/inventory/reserve",
            SHOP_KEY,
            r#"["apple"]"#,
            &[],
            StatusCode::BAD_REQUEST,
        ),
        (
            "/api/inventory/reserve",
            SHOP_KEY,
            r#"["apple", 1]"#,
            &[("grpc-timeout", "999999999H")],
            StatusCode::BAD_REQUEST,
        ),
        (
            "/api/inventory/reserve",
            SHOP_KEY,
            r#"["apple", 1]"#,
            &[("x-cluster-timeout", "soon")],
            StatusCode::BAD_REQUEST,
        ),
        (
            "/api/inventory/reserve",
            SHOP_KEY,
            r#"["apple", 1]"#,
            &[("x-cluster-meta-edge-caller", "ops")],
            StatusCode::BAD_REQUEST,
        ),
        (
            "/api/inventory/cancel",
            SHOP_KEY,
            "[]",
            &[],
            StatusCode::NOT_FOUND,
        ),
        ("/api/inventory", SHOP_KEY, "[]", &[], StatusCode::NOT_FOUND),
    ];
    for (path, key, body, headers, status) in cases {
        let a = s.post(path, key, body, headers).await;
        assert_eq!(a.status, *status, "{path} {body} {headers:?}: {}", a.text);
        assert!(a.json["error"]["message"].is_string(), "{}", a.text);
    }
    // A missing function is said without the service's other functions, which this caller
    // may not be allowed.
    let missing = s.post("/api/inventory/cancel", SHOP_KEY, "[]", &[]).await;
    assert!(
        !missing.text.contains("reserve"),
        "the other functions listed: {}",
        missing.text
    );
    // A body declared past the limit is refused before it is read: only the head is sent.
    let mut raw = tokio::net::TcpStream::connect(s.gateway.addr())
        .await
        .unwrap();
    let head = format!(
        "POST /api/inventory/reserve HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         x-api-key: {SHOP_KEY}\r\ncontent-length: {}\r\n\r\n",
        2 << 20
    );
    raw.write_all(head.as_bytes()).await.unwrap();
    let mut answer = [0; 12];
    raw.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"HTTP/1.1 413");
    // One that grows past it while streaming (chunked, no length declared) is refused too.
    let mut raw = tokio::net::TcpStream::connect(s.gateway.addr())
        .await
        .unwrap();
    let size = (1 << 20) + 1;
    let head = format!(
        "POST /api/inventory/reserve HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         x-api-key: {SHOP_KEY}\r\ntransfer-encoding: chunked\r\n\r\n{size:x}\r\n"
    );
    raw.write_all(head.as_bytes()).await.unwrap();
    raw.write_all(&vec![b' '; size]).await.unwrap();
    let mut answer = [0; 12];
    raw.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"HTTP/1.1 413");
    // A body that stops arriving is 408 once the route's body timeout has passed, and the
    // connection is closed: a client cannot hold a connection with half a body.
    let mut raw = tokio::net::TcpStream::connect(s.gateway.addr())
        .await
        .unwrap();
    let head = format!(
        "POST /api/inventory/reserve HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         x-api-key: {SHOP_KEY}\r\ncontent-length: 100\r\n\r\n["
    );
    raw.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), raw.read_to_end(&mut answer))
        .await
        .expect("answered and closed after the body timeout")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("did not arrive"), "{answer}");
    let text = Request::post(format!("{}/api/inventory/reserve", s.gateway.url()))
        .header("content-type", "text/plain")
        .header("x-api-key", SHOP_KEY)
        .body(Body::from(r#"["apple", 1]"#))
        .unwrap();
    assert_eq!(
        s.send(text).await.status,
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    let get = Request::get(format!("{}/api/inventory/reserve", s.gateway.url()))
        .header("x-api-key", SHOP_KEY)
        .body(Body::empty())
        .unwrap();
    assert_eq!(s.send(get).await.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(s.stock.calls.load(Ordering::SeqCst), 0, "no handler ran");
    assert!(s.vault.ran.lock().unwrap().is_empty(), "no deposit ran");

    // A service nobody provides: 503 at once, not after the budget.
    let started = Instant::now();
    let none = s.post("/api/nothing/here", OPS_KEY, "[]", &[]).await;
    assert_eq!(
        none.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        none.text
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_the_requested_budget_is_504() {
    let s = setup().await;
    let started = Instant::now();
    let late = s
        .post(
            "/api/inventory/slow",
            SHOP_KEY,
            "[3000]",
            &[("grpc-timeout", "200m")],
        )
        .await;
    assert_eq!(late.status, StatusCode::GATEWAY_TIMEOUT, "{}", late.text);
    assert_eq!(late.json["error"]["reason"], "timeout");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let soon = s
        .post(
            "/api/inventory/slow",
            SHOP_KEY,
            "[10]",
            &[("x-cluster-timeout", "2S")],
        )
        .await;
    assert_eq!((soon.status, &soon.json), (StatusCode::OK, &json!(10)));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_lists_what_the_caller_may_call_with_its_shapes() {
    let s = setup().await;
    let req = |key: &str| {
        Request::get(format!("{}/api/_describe", s.gateway.url()))
            .header("x-api-key", key)
            .body(Body::empty())
            .unwrap()
    };
    let shop = s.send(req(SHOP_KEY)).await;
    assert_eq!(shop.status, StatusCode::OK, "{}", shop.text);
    let names: Vec<&str> = shop.json["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["inventory", "shop"],
        "the shop may not call the bank"
    );
    let reserve = &shop.json["services"][0]["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "reserve")
        .unwrap()
        .clone();
    assert_eq!(reserve["path"], "/api/inventory/reserve");
    assert_eq!(reserve["args"], json!(["Str", {"Uint": 32}]), "{reserve}");
    assert_eq!(reserve["params"], json!(["item", "count"]), "{reserve}");
    assert_eq!(reserve["returns_result"], true);
    let ops = s.send(req(OPS_KEY)).await;
    assert_eq!(ops.json["services"].as_array().unwrap().len(), 3);
    assert_eq!(
        s.send(req("wrong-key-0123456789")).await.status,
        StatusCode::UNAUTHORIZED
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposit_retried_after_a_cut_connection_runs_once() {
    let s = setup().await;
    // The gateway reaches bank-1 only through a proxy that can cut its connections: an entry
    // under its name and generation at the proxy's address replaces the node's own (the
    // same generation: a retry of an at-most-once call is pinned to the process it may have
    // run on, by generation).
    let proxy = Cutter::start(s.bank.addr()).await;
    let mut entry = ServiceEntry::clone(&s.registry.lookup("bank")[0]);
    entry.node.addr = proxy.addr;
    s.registry.register(entry).await.unwrap();

    let call = {
        let url = format!("{}/api/bank/deposit", s.gateway.url());
        let http = s.http.clone();
        tokio::spawn(async move {
            let req = Request::post(url)
                .header("content-type", "application/json")
                .header("x-api-key", OPS_KEY)
                .body(Body::from("[42]"))
                .unwrap();
            let res = http.request(req).await.unwrap();
            let (status, call_id) = (
                res.status(),
                res.headers().get("x-cluster-call-id").cloned(),
            );
            let body = res.into_body().collect().await.unwrap().to_bytes();
            (status, call_id, String::from_utf8_lossy(&body).into_owned())
        })
    };
    // The deposit runs: the connection it came on breaks under it.
    s.vault.started.notified().await;
    proxy.cut().await;
    let (status, call_id, body) = call.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, "1");
    assert!(call_id.is_some(), "an at-most-once call has a call id");
    assert_eq!(*s.vault.ran.lock().unwrap(), [42], "the deposit ran once");
    assert!(
        proxy.accepted.load(Ordering::SeqCst) >= 2,
        "the retry came on a new connection"
    );
    s.stop().await;
}

#[tokio::test]
async fn a_function_route_that_admits_nobody_does_not_start() {
    let registry = MemoryRegistry::new();
    let n = node(&registry, "gateway-1").await;
    let refused = Gateway::new()
        .functions("/api/*", FunctionRoute::new(&n, EdgeCallers::new()))
        .start(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("open_to_anyone"), "{refused}");
    n.shutdown().await;
}

/// Forwards connections to `target`; [`Cutter::cut`] breaks every one open.
struct Cutter {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    links: Arc<tokio::sync::Mutex<JoinSet<()>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Cutter {
    async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let links = Arc::new(tokio::sync::Mutex::new(JoinSet::new()));
        let task = tokio::spawn({
            let (accepted, links) = (accepted.clone(), links.clone());
            async move {
                while let Ok((mut caller, _)) = listener.accept().await {
                    accepted.fetch_add(1, Ordering::SeqCst);
                    let Ok(mut provider) = tokio::net::TcpStream::connect(target).await else {
                        continue;
                    };
                    links.lock().await.spawn(async move {
                        let _ = tokio::io::copy_bidirectional(&mut caller, &mut provider).await;
                    });
                }
            }
        });
        Self {
            addr,
            accepted,
            links,
            task,
        }
    }

    /// Drops every connection open (both sockets closed).
    async fn cut(&self) {
        let mut links = self.links.lock().await;
        links.abort_all();
        while links.join_next().await.is_some() {}
    }
}

impl Drop for Cutter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_declares_a_function_route_with_its_keys_from_the_environment() {
    let s = setup().await;
    let text = r#"
        [node]
        name = "gateway-2"
        identity_dir = "/nowhere"
        eureka = ["http://127.0.0.1:1/eureka/"]

        [[functions]]
        path = "/calls/*"
        max_timeout_ms = 1000

        [[functions.keys]]
        name = "from-file"
        key_env = "CLUSTER_GATEWAY_TEST_KEY"
        allow = ["inventory.reserve", "shop.order"]
    "#;
    let config = cluster_discovery::gateway::GatewayConfig::from_toml(text).unwrap();
    assert!(config.gateway().is_err(), "function routes need the node");
    let node = node(&s.registry, "gateway-2").await;
    // Not set: refused at start rather than a route nobody can use.
    let unset = match config.gateway_with_env(&node, &|_| None) {
        Err(e) => cluster_discovery::gateway::error_chain(&e),
        Ok(_) => panic!("started without its key"),
    };
    assert!(unset.contains("CLUSTER_GATEWAY_TEST_KEY"), "{unset}");
    let env = |name: &str| {
        (name == "CLUSTER_GATEWAY_TEST_KEY").then(|| "file-key-0123456789abcdef".to_owned())
    };
    let gateway = config
        .gateway_with_env(&node, &env)
        .unwrap()
        .workers(1)
        .start(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let req = |path: &str| {
        Request::post(format!("{}{path}", gateway.url()))
            .header("content-type", "application/json")
            .header("x-api-key", "file-key-0123456789abcdef")
            .body(Body::from(r#"["apple", 1]"#))
            .unwrap()
    };
    let ok = s.send(req("/calls/shop/order")).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.text);
    assert_eq!(ok.json, json!("1 apple ordered, 9 left"));
    // inventory's own allow-list names gateway-1, not this gateway's node: the provider
    // refuses it, whatever the edge caller may do.
    let refused = s.send(req("/calls/inventory/reserve")).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.text);
    assert_eq!(refused.json["error"]["reason"], "unauthorized");
    let other = s.send(req("/calls/inventory/slow")).await;
    assert_eq!(other.status, StatusCode::FORBIDDEN, "{}", other.text);
    gateway.shutdown().await;
    node.shutdown().await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_names_the_edge_caller() {
    let s = setup().await;
    let (server_ca, server_cert, server_key) = crate::tls::test_pki();
    // The edge clients' CA: another than the cluster's, made as `cluster init` makes one.
    let edge_ca = cluster::Authority::new("edge").unwrap();
    let callers = EdgeCallers::new()
        .certificates([("billing-app".to_owned(), vec!["bank.*", "inventory.who"])]);
    let tls = cluster_discovery::server::ServerTls::from_pem_with_client_ca(
        server_cert.as_bytes(),
        server_key.as_bytes(),
        edge_ca.cert_pem().as_bytes(),
    )
    .unwrap();
    let gateway = Gateway::new()
        .functions("/api/*", FunctionRoute::new(&s._nodes[2], callers))
        .tls(tls)
        .workers(1)
        .start(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let client = |identity: Option<(String, String)>| {
        let mut b = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(server_ca.as_bytes()).unwrap());
        if let Some((cert, key)) = identity {
            b = b.identity(reqwest::Identity::from_pem(format!("{cert}{key}").as_bytes()).unwrap());
        }
        b.build().unwrap()
    };
    let call = async |client: &reqwest::Client, path: &str, body: &str| {
        client
            .post(format!("{}{path}", gateway.url()))
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
    };
    let billing = client(Some(edge_ca.issue_pem("billing-app", 1).unwrap()));
    let ok = call(&billing, "/api/bank/deposit", "[5]").await.unwrap();
    assert_eq!(ok.status().as_u16(), 200);
    assert_eq!(ok.text().await.unwrap(), "1");
    let who = call(&billing, "/api/inventory/who", "[]").await.unwrap();
    let who: Value = who.json().await.unwrap();
    assert_eq!(who[1], "billing-app", "{who}");
    let not_allowed = call(&billing, "/api/inventory/reserve", r#"["apple", 1]"#)
        .await
        .unwrap();
    assert_eq!(not_allowed.status().as_u16(), 403);

    let stranger = client(Some(edge_ca.issue_pem("stranger", 1).unwrap()));
    let unknown = call(&stranger, "/api/bank/deposit", "[6]").await.unwrap();
    assert_eq!(unknown.status().as_u16(), 401);
    let without = call(&client(None), "/api/bank/deposit", "[6]")
        .await
        .unwrap();
    assert_eq!(without.status().as_u16(), 401);
    // A certificate of another CA does not get through the handshake.
    let other_ca = cluster::Authority::new("edge").unwrap();
    let forged = client(Some(other_ca.issue_pem("billing-app", 1).unwrap()));
    assert!(call(&forged, "/api/bank/deposit", "[6]").await.is_err());
    assert_eq!(
        *s.vault.ran.lock().unwrap(),
        [5],
        "only the first deposit ran"
    );
    gateway.shutdown().await;
    s.stop().await;
}
