//! What a call through the gateway's function routes costs against the same call made with
//! the typed client: one provider on a mutual-TLS node, one call in flight at a time, each
//! round the typed calls first (from a node of their own), then the HTTP calls (JSON, an API
//! key, hyper's keep-alive client) to a gateway whose node calls the same provider. All in
//! this process on loopback, so the figures are the code's, not a network's. Method and
//! figures: `docs/benchmarks.md`, "Typed functions through the gateway".
//!
//! ```sh
//! cargo bench -p cluster-discovery --bench functions             # 5 rounds of 5,000 each
//! cargo bench -p cluster-discovery --bench functions -- --smoke  # seconds, for CI
//! # instructions per call: one side only, N calls after the warm-up, under callgrind; run
//! # for 1,000 and 3,000 calls and divide the difference of the totals by 2,000
//! valgrind --tool=callgrind target/release/deps/functions-<hash> --profile gateway --calls 1000
//! ```

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use cluster::{Authority, MemoryRegistry, Node};
use cluster_discovery::gateway::{EdgeCallers, FunctionRoute, Gateway};
use http_body_util::BodyExt as _;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

const KEY: &str = "bench-key-0123456789abcdef";

/// Echoes its argument.
#[cluster::service(name = "echo", version = "1.0.0", timeout = "5s")]
pub trait Echo {
    /// `text`, back.
    #[call(idempotent)]
    async fn echo(&self, text: String) -> String;
}

struct Echoer;

impl Echo for Echoer {
    async fn echo(&self, text: String) -> String {
        text
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let smoke = args.iter().any(|a| a == "--smoke");
    let (rounds, mut calls) = if smoke { (1, 50) } else { (5, 5_000) };
    if let Some(n) = value("--calls").and_then(|n| n.parse().ok()) {
        calls = n;
    }
    let profile = value("--profile");
    let authority = Authority::new("bench").expect("a CA");
    let registry = MemoryRegistry::new();
    let node = async |name: &str| {
        Node::builder()
            .name(name)
            .identity(authority.issue(name).expect("an identity"))
            .registry(registry.clone())
            .start()
            .await
            .expect("node starts")
    };
    let provider = node("echo-1").await;
    let _ = provider
        .serve(EchoServer::new(Echoer))
        .await
        .expect("serves");
    let caller = node("caller-1").await;
    let gateway_node = node("gateway-1").await;
    let gateway = Gateway::new()
        .functions(
            "/api/*",
            FunctionRoute::new(
                &gateway_node,
                EdgeCallers::new().key("bench", KEY, ["echo.*"]),
            ),
        )
        .workers(1)
        .start(([127, 0, 0, 1], 0).into())
        .await
        .expect("gateway starts");
    let typed = EchoClient::new(&caller);
    let http = Client::builder(TokioExecutor::new())
        .build(hyper_util::client::legacy::connect::HttpConnector::new());
    let url = format!("{}/api/echo/echo", gateway.url());
    let text = "a 32-byte string, as an id might".to_owned();
    let body = serde_json::to_vec(&[&text]).expect("JSON");
    let expected = serde_json::to_vec(&text).expect("JSON");

    // Warm both paths: connections open, routes found, descriptions kept.
    for _ in 0..100 {
        typed.echo(text.clone()).await.expect("answers");
    }
    let post = || {
        Request::post(&url)
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {KEY}"))
            .body(Body::from(body.clone()))
            .expect("a request")
    };
    for _ in 0..100 {
        let r = http.request(post()).await.expect("answers");
        r.into_body().collect().await.expect("a body");
    }

    // One side only, for an instruction count (the warm-up and start-up cancel out between two
    // runs of different lengths).
    match profile.as_deref() {
        Some("typed") => {
            for _ in 0..calls {
                typed.echo(text.clone()).await.expect("answers");
            }
        }
        Some("gateway") => {
            for _ in 0..calls {
                let r = http.request(post()).await.expect("answers");
                r.into_body().collect().await.expect("a body");
            }
        }
        Some(other) => panic!("--profile is typed or gateway, not {other}"),
        None => {
            println!(
                "{calls} calls per path per round, one in flight, 32-byte string argument and result"
            );
            println!("round  typed µs/call  gateway µs/call  ratio");
            let mut ratios = Vec::new();
            for round in 1..=rounds {
                let started = Instant::now();
                for _ in 0..calls {
                    let answer = typed.echo(text.clone()).await.expect("answers");
                    assert_eq!(answer.len(), text.len());
                }
                let direct = per_call(started.elapsed(), calls);
                let started = Instant::now();
                for _ in 0..calls {
                    let r = http.request(post()).await.expect("answers");
                    assert!(r.status().is_success(), "{}", r.status());
                    let answer = r.into_body().collect().await.expect("a body").to_bytes();
                    assert_eq!(answer.as_ref(), expected.as_slice());
                }
                let through = per_call(started.elapsed(), calls);
                let ratio = through / direct;
                ratios.push(ratio);
                println!("{round:>5}  {direct:>13.1}  {through:>15.1}  {ratio:>5.2}");
            }
            ratios.sort_by(f64::total_cmp);
            println!("median ratio {:.2}", ratios[ratios.len() / 2]);
        }
    }
    gateway.shutdown().await;
    for node in [gateway_node, caller, provider] {
        node.shutdown().await;
    }
}

fn per_call(elapsed: Duration, calls: usize) -> f64 {
    elapsed.as_secs_f64() * 1e6 / calls as f64
}
