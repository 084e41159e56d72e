//! The live dashboard (`admin/dashboard/`): what it shows of a cluster, escaped, behind the
//! endpoint's mutual TLS; and, in a real browser (Debian's chromium, headless: `.ci/run`
//! installs it), that it renders as text what a hostile member named as markup.

use std::net::SocketAddr;
use std::sync::Arc;

use cluster::registry::{NodeInfo, Registry, ServiceEntry};
use cluster::{CallOptions, MemoryRegistry, Node, ServiceDescription};

use crate::scrape;
use crate::support::{Engine, Mode, SearchClient, SearchServer, identity};

/// A member of the cluster that names itself and its service as markup.
const EVIL_NODE: &str = "evil<img src=x onerror=alert(1)>";
const EVIL_SERVICE: &str = "<script>alert('owned')</script>";

/// Two nodes serving and calling `search`, and a hostile entry in their registry.
async fn cluster(metrics: impl Fn(cluster::NodeBuilder) -> cluster::NodeBuilder) -> (Node, Node) {
    let registry = MemoryRegistry::new();
    let start = |name: &'static str| {
        let builder = Node::builder()
            .identity(identity(name))
            .registry(registry.clone());
        metrics(builder).start()
    };
    let provider = start("search-1").await.expect("starts");
    let engine = Arc::new(Engine::new("search-1", Mode::Answer));
    std::mem::forget(
        provider
            .serve(SearchServer::new(engine.clone()))
            .await
            .unwrap(),
    );
    let caller = start("web-1").await.expect("starts");
    let evil = NodeInfo::new(EVIL_NODE, SocketAddr::from(([127, 0, 0, 1], 9)), 1);
    registry.join(evil.clone()).await.unwrap();
    let description = ServiceDescription::new(
        EVIL_SERVICE,
        cluster::Version::new(6, 6, 6),
        None,
        CallOptions::new(),
        vec![],
    );
    registry
        .register(ServiceEntry::new(evil, Arc::new(description)))
        .await
        .unwrap();
    let search = SearchClient::new(&caller);
    for query in ["a", "b", "c"] {
        search.search(query.into()).await.unwrap();
    }
    engine.set_mode(Mode::Fail);
    search.search("d".into()).await.unwrap_err();
    (provider, caller)
}

#[tokio::test]
async fn the_dashboard_shows_nodes_services_rates_and_events_all_escaped() {
    let (provider, caller) = cluster(|b| b.metrics(SocketAddr::from(([127, 0, 0, 1], 0)))).await;
    let addr = caller.metrics_addr().unwrap();
    let member = scrape::client_config(Some("ops"));
    let (status, page) = scrape::tls_get(addr, "web-1", member, "/").await.unwrap();
    assert_eq!(status, 200, "{page}");
    assert!(page.starts_with("<!doctype html>"), "{page}");
    for shown in [
        "as node <b>web-1</b>",
        "<h2>Nodes (3)</h2>",
        "search-1",
        "search@2.1.0",
        "web-1 (this node)",
        "<h2>Services (2)</h2>",
        // The caller's calls of search: four ended, one of them (a quarter) failed.
        "<td>search</td><td>search</td><td class=\"n\">",
        "25.0 %",
        // And how long they took, estimated from the latency histogram.
        "<th>p50 / p99</th>",
        " ms</td>",
        // Functions nobody called are not listed.
        "<h2>Recent events",
        "service up",
    ] {
        assert!(page.contains(shown), "`{shown}` in {page}");
    }
    // Everything a member wrote is text, never markup.
    assert!(!page.contains("<td>reindex</td>"), "{page}");
    assert!(!page.contains("<script>"), "{page}");
    assert!(!page.contains("<img"), "{page}");
    assert!(
        page.contains("&lt;script&gt;alert(&#39;owned&#39;)&lt;/script&gt;"),
        "{page}"
    );
    assert!(
        page.contains("evil&lt;img src=x onerror=alert(1)&gt;"),
        "{page}"
    );

    // The endpoint's authentication holds for the page as for the metrics.
    let anonymous = scrape::client_config(None);
    assert!(
        scrape::tls_get(addr, "web-1", anonymous, "/")
            .await
            .is_err()
    );
    assert!(scrape::plain(addr).await.is_err());
    caller.shutdown().await;
    provider.shutdown().await;
}

/// Chromium, as `.ci/run` installs it (Debian's package).
fn chromium() -> Option<std::path::PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|dir| dir.join(name))
                    .find(|path| path.is_file())
            })
        })
}

/// Runs headless chromium on `url` with `args`; its stdout.
async fn browse(args: &[&str], url: &str) -> String {
    let chromium = chromium().expect("chromium on the PATH (.ci/run installs Debian's)");
    let profile = std::env::temp_dir().join(format!("cluster-chromium-{}", std::process::id()));
    let out = tokio::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .kill_on_drop(true)
        .output()
        .await
        .expect("chromium runs");
    let _ = std::fs::remove_dir_all(&profile);
    assert!(
        out.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

// A real browser: `cargo test -p cluster --test metrics -- --ignored browser` (`.ci/run` does,
// after installing Debian's chromium). Plaintext, asked for by name: a browser would need the
// operator's client certificate installed to pass the endpoint's mutual TLS, which the test
// above checks. `UPDATE_SCREENSHOT=1` writes docs/dashboard.png.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs chromium: .ci/run installs it and runs this"]
async fn browser_a_headless_chromium_renders_the_dashboard_and_runs_nothing_a_member_wrote() {
    let (provider, caller) =
        cluster(|b| b.metrics_insecure(SocketAddr::from(([127, 0, 0, 1], 0)))).await;
    let url = format!("http://{}/", caller.metrics_addr().unwrap());
    // The DOM after the browser parsed the page (and would have run any script).
    let dom = browse(&["--dump-dom"], &url).await;
    assert!(dom.contains("<h2>Nodes (3)</h2>"), "{dom}");
    assert!(
        dom.contains("&lt;script&gt;alert('owned')&lt;/script&gt;"),
        "{dom}"
    );
    assert!(
        !dom.contains("<script"),
        "a script element in the DOM: {dom}"
    );
    assert!(!dom.contains("<img"), "an image element in the DOM: {dom}");
    // A screenshot, as a person sees the page.
    let shot = match std::env::var_os("UPDATE_SCREENSHOT") {
        Some(_) => {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/dashboard.png")
        }
        None => std::env::temp_dir().join(format!("cluster-dashboard-{}.png", std::process::id())),
    };
    browse(
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1280,720",
        ],
        &url,
    )
    .await;
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
    if std::env::var_os("UPDATE_SCREENSHOT").is_none() {
        let _ = std::fs::remove_file(&shot);
    }
    caller.shutdown().await;
    provider.shutdown().await;
}
