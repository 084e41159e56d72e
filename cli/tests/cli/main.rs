//! `cluster` end to end: the binary, as an operator runs it, against real nodes (mutual TLS,
//! sealed gossip on loopback, OS-assigned ports) started in this test process from
//! certificates that `cluster init` and `cluster issue` wrote.

mod dashboard;
mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use support::{Cluster, Run};

/// One line of an order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Line {
    sku: String,
    qty: u32,
}

/// How soon an order goes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Priority {
    /// Whenever.
    Normal,
    /// By a date.
    Rush {
        /// The date.
        by: String,
    },
}

/// An order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Order {
    customer: String,
    lines: Vec<Line>,
    priority: Priority,
    note: Option<String>,
}

/// What `place` answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Placed {
    id: u64,
    items: u32,
    rush: bool,
}

/// Why a reservation is refused: an error enum of several variants, as a shop writes it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Stock {
    /// No such SKU.
    UnknownSku(String),
    /// Too few left.
    OutOfStock {
        /// The SKU.
        sku: String,
        /// How many are left.
        left: u32,
    },
}

/// The service the tests call from the shell.
#[cluster::service(
    name = "orders",
    version = "2.1.0",
    timeout = "3s",
    retry(after = "20ms", budget = "5s")
)]
pub trait Orders {
    /// Places an order; refuses one without lines.
    #[call(timeout = "1s")]
    async fn place(&self, order: Order) -> Result<Placed, String>;
    /// How many orders were placed.
    #[call(idempotent)]
    async fn count(&self) -> u64;
    /// The stock of `sku`, summed over the stores given.
    #[call(idempotent)]
    async fn stock(&self, sku: String, by_store: BTreeMap<u16, i32>) -> i64;
    /// Answers after `ms` milliseconds.
    #[call(idempotent)]
    async fn slow(&self, ms: u64) -> u64;
    /// The trace the handler runs in, as `traceparent`.
    #[call(idempotent)]
    async fn traced(&self) -> Option<String>;
    /// Reserves `n` of `sku`; only `pear` is known, and 3 are left.
    async fn reserve(&self, sku: String, n: u32) -> Result<u32, Stock>;
    /// Both numbers plus one: 128-bit integers both ways.
    #[call(idempotent)]
    async fn wide(&self, u: u128, i: i128) -> (u128, i128);
}

/// The provider, shared by both nodes: counts what it placed.
#[derive(Default)]
pub struct Shop {
    placed: AtomicU64,
    slow_started: AtomicU64,
}

impl Orders for &'static Shop {
    async fn place(&self, order: Order) -> Result<Placed, String> {
        if order.lines.is_empty() {
            return Err(format!("the order of {} has no lines", order.customer));
        }
        let id = self.placed.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(Placed {
            id,
            items: order.lines.iter().map(|l| l.qty).sum(),
            rush: matches!(order.priority, Priority::Rush { .. }),
        })
    }

    async fn count(&self) -> u64 {
        self.placed.load(Ordering::SeqCst)
    }

    async fn stock(&self, _sku: String, by_store: BTreeMap<u16, i32>) -> i64 {
        by_store.values().map(|&n| i64::from(n)).sum()
    }

    async fn traced(&self) -> Option<String> {
        cluster::context()?.trace().map(|t| t.to_header())
    }

    async fn reserve(&self, sku: String, n: u32) -> Result<u32, Stock> {
        match (sku.as_str(), n) {
            ("pear", 0..=3) => Ok(3 - n),
            ("pear", _) => Err(Stock::OutOfStock { sku, left: 3 }),
            _ => Err(Stock::UnknownSku(sku)),
        }
    }

    async fn wide(&self, u: u128, i: i128) -> (u128, i128) {
        (u.wrapping_add(1), i.wrapping_add(1))
    }

    async fn slow(&self, ms: u64) -> u64 {
        self.slow_started.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        ms
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn nodes_services_and_describe_show_the_registry() {
    let cluster = Cluster::start().await;
    let nodes = cluster.cli(&["--json", "nodes"]).await.json();
    let names: Vec<&str> = nodes
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ops", "shop-a", "shop-b"]);
    assert_eq!(nodes[0]["this"], true);
    assert_eq!(nodes[0]["services"], json!([]));
    assert_eq!(nodes[1]["services"], json!(["orders"]));
    assert_eq!(nodes[1]["state"], "live");
    assert_eq!(nodes[1]["addr"], cluster.addr_of_a().to_string());
    // Generations are past 2^53: text, so that JavaScript and jq keep every digit.
    assert!(
        nodes[1]["generation"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .is_ok()
    );

    let text = cluster.cli(&["services"]).await.ok();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("SERVICE  VERSION  NODE"), "{text}");
    assert!(lines[1].starts_with("orders   2.1.0    shop-a"), "{text}");
    assert!(
        lines[1].ends_with("ok      place count stock slow traced reserve wide"),
        "{text}"
    );
    let only_b = cluster
        .cli(&["--json", "services", "--node", "shop-b"])
        .await
        .json();
    assert_eq!(only_b.as_array().unwrap().len(), 1);
    assert_eq!(only_b[0]["node"], "shop-b");
    let no_node = cluster.cli(&["services", "--node", "shop-z"]).await;
    assert_eq!(no_node.code, 2, "{no_node:?}");

    let described = cluster.cli(&["describe", "orders", "--json"]).await.json();
    let version = &described["versions"][0];
    assert_eq!(version["version"], "2.1.0");
    assert_eq!(version["providers"].as_array().unwrap().len(), 2);
    let place = &version["functions"][0];
    assert_eq!(place["signature"], "place(Order) -> Result<Placed, String>");
    assert_eq!(place["idempotent"], false);
    assert_eq!(
        place["args"],
        json!([
            "{customer: str, lines: [{sku: str, qty: u32}], priority: enum{Normal, Rush{by: str}}, note?: option<str>}"
        ])
    );
    // Each option with its layer: the function's timeout, the service's budget and pause.
    let options = &place["options"];
    assert_eq!(
        options["timeout"],
        json!({"value": 1000, "text": "1s", "from": "function"})
    );
    assert_eq!(
        options["retry_budget"],
        json!({"value": 5000, "text": "5s", "from": "service"})
    );
    assert_eq!(
        options["retry_after"],
        json!({"value": 20, "text": "20ms", "from": "service"})
    );
    assert_eq!(
        options["hedge_max"],
        json!({"value": 0, "text": "0", "from": "default"})
    );
    assert_eq!(options["hedge_after"]["text"], "off");
    assert_eq!(version["functions"][1]["idempotent"], true);
    let text = cluster.cli(&["describe", "orders"]).await.ok();
    assert!(
        text.starts_with("orders 2.1.0 (wire 2)\n  providers:\n    shop-a "),
        "{text}"
    );
    assert!(
        text.contains("\n  place(Order) -> Result<Placed, String>  [not idempotent: retried only when it cannot have run]\n"),
        "{text}"
    );

    let unknown = cluster.cli(&["describe", "payments"]).await;
    assert_eq!(unknown.code, 1, "not there now: a failure, not a misuse");
    assert!(
        unknown
            .stderr
            .contains("no service `payments` in the registry; it holds: orders"),
        "{}",
        unknown.stderr
    );
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn call_sends_json_by_the_shape_and_prints_the_answer() {
    let cluster = Cluster::start().await;
    let order = json!([{
        "customer": "ada",
        "lines": [{"sku": "a-1", "qty": 2}, {"sku": "b-2", "qty": 3}],
        "priority": {"Rush": {"by": "friday"}}
    }]);
    let placed = cluster
        .cli(&["call", "orders.place", &order.to_string(), "--json"])
        .await
        .json();
    assert_eq!(
        placed,
        json!({"answer": {"id": 1, "items": 5, "rush": true}})
    );

    // Map keys that are not strings, written as their JSON text.
    let stock = cluster
        .cli(&["call", "orders.stock", r#"["a-1", {"1": 4, "2": -1}]"#])
        .await
        .ok();
    assert_eq!(stock.trim(), "3");

    // The provider's own Err: exit 1, the error and the report, as JSON.
    let refused = cluster
        .cli(&[
            "call",
            "orders.place",
            r#"[{"customer": "bob", "lines": [], "priority": "Normal"}]"#,
            "--json",
        ])
        .await;
    assert_eq!(refused.code, 1, "{refused:?}");
    let refused: Value = serde_json::from_str(&refused.stdout).unwrap();
    assert_eq!(refused["error"]["kind"], "app");
    assert_eq!(refused["error"]["value"], "the order of bob has no lines");
    // Every key, whatever the kind: a script reads them without asking first.
    for key in ["reason", "detail", "message", "may_have_run", "transient"] {
        assert!(refused["error"].get(key).is_some(), "{key} in {refused}");
    }
    assert_eq!(refused["report"]["call"], "orders.place/1");
    assert_eq!(refused["report"]["attempts"].as_array().unwrap().len(), 1);
    let said = cluster
        .cli(&[
            "call",
            "orders.place",
            r#"[{"customer": "bob", "lines": [], "priority": "Normal"}]"#,
        ])
        .await;
    assert_eq!(said.code, 1);
    assert!(
        said.stderr
            .contains("returned an error: the order of bob has no lines\n"),
        "{}",
        said.stderr
    );

    // An error enum of several variants: its shape is traced, so its Err exits 1 too, and
    // the error is the variant as JSON.
    let reserved = cluster
        .cli(&["call", "orders.reserve", r#"["pear", 2]"#])
        .await;
    assert_eq!(
        (reserved.code, reserved.stdout.trim()),
        (0, "1"),
        "{reserved:?}"
    );
    let unknown = cluster
        .cli(&["call", "orders.reserve", r#"["plum", 1]"#, "--json"])
        .await;
    assert_eq!(unknown.code, 1, "{unknown:?}");
    let unknown: Value = serde_json::from_str(&unknown.stdout).unwrap();
    assert_eq!(unknown["error"]["value"], json!({"UnknownSku": "plum"}));
    let out = cluster
        .cli(&["call", "orders.reserve", r#"["pear", 9]"#])
        .await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr
            .contains(r#"returned an error: {"OutOfStock":{"left":3,"sku":"pear"}}"#),
        "{}",
        out.stderr
    );

    // A slip in the service's name: the nearest registered one is suggested.
    let typo = cluster.cli(&["call", "ordres.count", "[]"]).await;
    assert_eq!(typo.code, 1, "{typo:?}");
    assert!(
        typo.stderr
            .contains(r#"no service `ordres` in the registry; did you mean "orders"?"#),
        "{}",
        typo.stderr
    );

    // 128-bit integers: numbers within 64 bits, strings of digits past them, both ways.
    let max = u128::MAX - 1;
    let wide = cluster
        .cli(&[
            "call",
            "orders.wide",
            &format!(r#"["{max}", "{}"]"#, i128::MIN),
        ])
        .await
        .ok();
    assert_eq!(
        wide.split_whitespace().collect::<String>(),
        format!(r#"["{}","{}"]"#, u128::MAX, i128::MIN + 1)
    );
    let small = cluster.cli(&["call", "orders.wide", "[7, -7]"]).await.ok();
    assert_eq!(small.split_whitespace().collect::<String>(), "[8,-6]");

    // Arguments that do not fit the shape: exit 2, said with the path, and nothing sent.
    let before = cluster.placed();
    let wrong = cluster
        .cli(&[
            "call",
            "orders.place",
            r#"[{"customer": "eve", "lines": [{"sku": "x", "qty": -1}], "priority": "Normal"}]"#,
        ])
        .await;
    assert_eq!(wrong.code, 2, "{wrong:?}");
    assert!(
        wrong
            .stderr
            .contains("argument 1.lines[0].qty: -1 is not a u32"),
        "{}",
        wrong.stderr
    );
    assert!(
        wrong
            .stderr
            .contains("orders.place: place(Order) -> Result<Placed, String>"),
        "{}",
        wrong.stderr
    );
    let typo = cluster
        .cli(&[
            "call",
            "orders.place",
            r#"[{"customer": "eve", "lines": [], "priority": "Normal", "notes": "x"}]"#,
        ])
        .await;
    assert_eq!(typo.code, 2);
    assert!(
        typo.stderr
            .contains("no field `notes`; the fields are customer, lines, priority, note"),
        "{}",
        typo.stderr
    );
    assert_eq!(cluster.placed(), before, "a refused argument list was sent");

    let no_function = cluster.cli(&["call", "orders.cancel", "[]"]).await;
    assert_eq!(no_function.code, 2);
    assert!(
        no_function.stderr.contains(
            "`orders` 2.1.0 has no function `cancel`; it has: place, count, stock, slow, traced"
        ),
        "{}",
        no_function.stderr
    );
    let no_version = cluster
        .cli(&["call", "orders.count", "--version", "^3"])
        .await;
    assert_eq!(no_version.code, 2);
    assert!(
        no_version
            .stderr
            .contains("no provider of `orders` in a version within ^3: the registry has 2.1.0"),
        "{}",
        no_version.stderr
    );
    let not_json = cluster.cli(&["call", "orders.count", "[1,"]).await;
    assert_eq!(not_json.code, 2);
    assert!(
        not_json.stderr.contains("the arguments are not JSON"),
        "{}",
        not_json.stderr
    );

    // A trace: continued from the header given, or a new one whose id is printed.
    let given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let traced = cluster
        .cli(&["call", "orders.traced", "--traceparent", given, "--json"])
        .await
        .json();
    let seen = traced["answer"].as_str().expect("the handler had a trace");
    assert!(
        seen.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
        "{seen}"
    );
    assert_eq!(traced["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    let started = cluster
        .cli(&["call", "orders.traced", "--trace", "--json"])
        .await
        .json();
    let id = started["trace_id"].as_str().unwrap();
    assert_eq!(id.len(), 32);
    assert!(
        started["answer"].as_str().unwrap().contains(id),
        "{started}"
    );
    let untraced = cluster
        .cli(&["call", "orders.traced", "--json"])
        .await
        .json();
    assert_eq!(
        untraced,
        json!({"answer": null}),
        "nothing traced, nothing sent"
    );

    // Arguments from stdin; the report of a call that succeeded.
    let counted = cluster
        .cli_with_stdin(&["call", "orders.count", "-", "--json", "--report"], "[]")
        .await
        .json();
    assert_eq!(counted["answer"], 1);
    assert_eq!(counted["report"]["attempts"][0]["kind"], "first");
    assert_eq!(counted["report"]["attempts"][0]["answered"], true);
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_times_out_fails_with_its_typed_error_and_report() {
    let cluster = Cluster::start().await;
    // Idempotent: each attempt that times out is retried, until the call's own budget ends.
    let run = cluster
        .cli(&[
            "--json",
            "call",
            "orders.slow",
            "[5000]",
            "--timeout",
            "100ms",
            "--budget",
            "350ms",
        ])
        .await;
    assert_eq!(run.code, 1, "{run:?}");
    let failed: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(failed["error"]["kind"], "rpc", "{failed}");
    assert_eq!(failed["error"]["reason"], "timeout", "{failed}");
    assert_eq!(failed["error"]["may_have_run"], true, "{failed}");
    assert_eq!(failed["error"]["value"], Value::Null, "{failed}");
    let attempts = failed["report"]["attempts"].as_array().unwrap();
    assert!(attempts.len() >= 2, "{failed}");
    assert_eq!(attempts[1]["kind"], "retry", "{failed}");
    assert_eq!(
        failed["report"]["budget"],
        json!({"ms": 350.0, "from": "this call"})
    );
    // The text form: the error's own message, which carries the report.
    let text = cluster
        .cli(&[
            "call",
            "orders.slow",
            "[5000]",
            "--timeout",
            "100ms",
            "--no-retry",
        ])
        .await;
    assert_eq!(text.code, 1);
    assert!(text.stderr.contains("orders.slow/1"), "{}", text.stderr);
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn watch_prints_each_change_as_it_happens() {
    let mut cluster = Cluster::start().await;
    let mut watch = cluster.spawn(&["--json", "watch"]);
    let first = watch.line().await;
    assert_eq!(first["event"], "watching", "{first}");
    assert_eq!(first["services"], 2);
    // A provider leaves cleanly: its service goes, then its node.
    cluster.stop_b().await;
    let down = watch.line().await;
    assert_eq!(down["event"], "service_down", "{down}");
    assert_eq!(
        (down["service"].as_str(), down["node"].as_str()),
        (Some("orders"), Some("shop-b"))
    );
    let gone = watch.line().await;
    assert_eq!(gone["event"], "node_down", "{gone}");
    assert_eq!(gone["node"], "shop-b");
    assert_eq!(
        watch.stop().await,
        Some(0),
        "watch did not end cleanly on SIGTERM"
    );
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn who_may_join_and_misuse() {
    let cluster = Cluster::start().await;
    // The same name as a live `cluster` process: refused, with the way out.
    let mut watch = cluster.spawn(&["--json", "watch"]);
    watch.line().await;
    let twice = cluster.cli(&["nodes"]).await;
    assert_eq!(twice.code, 1, "{twice:?}");
    assert!(
        twice
            .stderr
            .contains("the name `ops` is in use by a live process"),
        "{}",
        twice.stderr
    );
    watch.stop().await;

    // A certificate and gossip key of another cluster: no node answers.
    let stranger = cluster.cli_as_stranger(&["--wait", "2s", "nodes"]).await;
    assert_eq!(stranger.code, 1, "{stranger:?}");
    assert!(
        stranger.stderr.contains("no node answered within 2s"),
        "{}",
        stranger.stderr
    );

    let no_seed = Run::of(&mut support::command(&[
        "nodes",
        "--insecure",
        "--cluster-id",
        "x",
    ]))
    .await;
    assert_eq!(no_seed.code, 2, "{no_seed:?}");
    assert!(no_seed.stderr.contains("no seed"), "{}", no_seed.stderr);
    let no_identity = Run::of(&mut support::command(&["nodes", "--seed", "127.0.0.1:1"])).await;
    assert_eq!(no_identity.code, 2);
    assert!(
        no_identity.stderr.contains("no identity"),
        "{}",
        no_identity.stderr
    );
    let bad_duration = Run::of(&mut support::command(&["call", "a.b", "--timeout", "5"])).await;
    assert_eq!(bad_duration.code, 2);
    assert!(
        bad_duration.stderr.contains("`5` has no unit"),
        "{}",
        bad_duration.stderr
    );
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reader_that_goes_away_or_a_ctrl_c_ends_the_command_cleanly() {
    let cluster = Cluster::start().await;
    // `cluster describe orders | head -1`: stdout closed early is no panic.
    let mut describe = cluster.spawn(&["describe", "orders"]);
    let first = describe.raw_line().await;
    assert_eq!(first, "orders 2.1.0 (wire 2)");
    describe.close_stdout();
    assert_eq!(describe.wait().await, Some(0));

    // SIGTERM in the middle of a call: it stops, the node leaves cleanly, exit 130.
    let slow = cluster.spawn(&["call", "orders.slow", "[10000]"]);
    let mut changes = cluster.registry_changes();
    cluster.until_slow_started().await;
    let stopped = slow.stop().await;
    assert_eq!(stopped, Some(130));
    // A clean leave: out of the seed's copy at once, not after failure detection.
    tokio::time::timeout(Duration::from_secs(1), cluster.until_nodes(2, &mut changes))
        .await
        .expect("the interrupted command left cleanly");
    cluster.stop().await;
}

#[test]
fn issue_refuses_to_replace_a_certificate_unless_forced() {
    let dir = std::env::temp_dir().join(format!("cluster-cli-issue-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    cluster_cli::secrets::init(&dir, "t").unwrap();
    cluster_cli::secrets::issue(&dir, "n-1", 1, false).unwrap();
    let key = std::fs::read(dir.join("n-1.key")).unwrap();
    let again = cluster_cli::secrets::issue(&dir, "n-1", 1, false).unwrap_err();
    assert!(
        again.to_string().contains("give --force to renew"),
        "{again}"
    );
    assert_eq!(
        std::fs::read(dir.join("n-1.key")).unwrap(),
        key,
        "the key was kept"
    );
    cluster_cli::secrets::issue(&dir, "n-1", 1, true).unwrap();
    assert_ne!(std::fs::read(dir.join("n-1.key")).unwrap(), key, "renewed");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// What a hostile member serves: `description`, and nothing that runs.
struct Hostile(&'static cluster::ServiceDescription);

impl cluster::Provide for Hostile {
    fn description(&self) -> &'static cluster::ServiceDescription {
        self.0
    }

    fn dispatch(&self, function: usize, _: &[u8]) -> cluster::DispatchFuture {
        Box::pin(async move { Err(cluster::DispatchError::UnknownFunction(function)) })
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn what_a_hostile_member_registers_cannot_take_the_terminal_or_the_operators_calls() {
    let cluster = Cluster::start().await;
    // A service named with a terminal's escape sequences and a line of a forged table.
    let forged = "svc\u{1b}[2J\u{1b}]0;title\u{7}\nshop-z  127.0.0.1:1  1  2-2  live";
    let escapes: &'static _ = Box::leak(Box::new(cluster::ServiceDescription::new(
        forged,
        cluster::Version::new(1, 0, 0),
        None,
        cluster::CallOptions::new(),
        vec![],
    )));
    let _evil = cluster.member("evil", Hostile(escapes)).await;
    let text = cluster.cli(&["services"]).await.ok();
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "{text:?}"
    );
    assert!(
        text.contains(r"svc\u{1b}[2J\u{1b}]0;title\u{7}\nshop-z"),
        "{text}"
    );
    assert_eq!(text.lines().count(), 4, "no forged row: {text}");
    let unknown = cluster.cli(&["describe", "nothing"]).await;
    assert!(!unknown.stderr.contains('\u{1b}'), "{:?}", unknown.stderr);

    // The same member registers `orders` 3.0.0, with the very functions of 2.1.0: a call
    // without --version is not silently its.
    let mut three = OrdersClient::description().clone();
    three.version = cluster::Version::new(3, 0, 0);
    let three: &'static _ = Box::leak(Box::new(three));
    let _evil_orders = cluster.member("evil-2", Hostile(three)).await;
    let refused = cluster.cli(&["call", "orders.count"]).await;
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(
        refused.stderr.contains(
            "providers of versions that cannot serve each other's clients (3.0.0, 2.1.0)"
        ),
        "{}",
        refused.stderr
    );
    let chosen = cluster
        .cli(&["call", "orders.count", "--version", "^2"])
        .await;
    assert_eq!(chosen.ok().trim(), "0");
    cluster.stop().await;
}
