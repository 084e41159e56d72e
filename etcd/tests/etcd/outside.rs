//! Writes from outside the cluster, by anyone with access to etcd: a node's keys deleted or
//! its lease revoked (it writes them again), garbage under the prefix (skipped, nothing else
//! lost), and more keys than one page of a read.

use std::time::Duration;

use cluster::Node;
use etcd_client::{Client, GetOptions};

use crate::support::{Engine, Mode, SearchServer, etcd, identity, providers, registry_at, seen};

const SEC: Duration = Duration::from_secs(1);

async fn etcdctl() -> Client {
    let endpoint = format!("http://{}", etcd().borrow().client);
    Client::connect([endpoint], None).await.unwrap()
}

async fn provider(name: &str) -> Node {
    let node = Node::builder()
        .identity(identity(name))
        .registry(registry_at("/o"))
        .start()
        .await
        .unwrap();
    let _r = node
        .serve(SearchServer::new(std::sync::Arc::new(Engine::new(
            name,
            Mode::Answer,
        ))))
        .await
        .unwrap();
    node
}

async fn observer() -> Node {
    Node::builder()
        .identity(identity("observer"))
        .registry(registry_at("/o"))
        .start()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_keys_were_deleted_or_lease_revoked_from_outside_writes_them_again() {
    let _p = provider("search-1").await;
    let watcher = observer().await;
    seen(&watcher, 10 * SEC, |n| providers(n) == 1)
        .await
        .unwrap();
    let mut ctl = etcdctl().await;

    // Deleted: gone from lookups, then back within a renewal (a third of the 2 s TTL).
    ctl.delete(
        "/o/test/",
        Some(etcd_client::DeleteOptions::new().with_prefix()),
    )
    .await
    .unwrap();
    seen(&watcher, 10 * SEC, |n| providers(n) == 0)
        .await
        .unwrap();
    seen(&watcher, 10 * SEC, |n| providers(n) == 1)
        .await
        .expect("written again");

    // Overwritten with what does not read: as good as deleted, and written again.
    ctl.put("/o/test/nodes/search-1", "{garbage", None)
        .await
        .unwrap();
    seen(&watcher, 10 * SEC, |n| providers(n) == 0)
        .await
        .unwrap();
    seen(&watcher, 10 * SEC, |n| providers(n) == 1)
        .await
        .expect("written again");

    // Revoked: every key goes; the node is granted a new lease and registers again.
    let node_key = ctl.get("/o/test/nodes/search-1", None).await.unwrap();
    let lease = node_key.kvs()[0].lease();
    ctl.lease_revoke(lease).await.unwrap();
    seen(&watcher, 10 * SEC, |n| providers(n) == 0)
        .await
        .unwrap();
    seen(&watcher, 10 * SEC, |n| providers(n) == 1)
        .await
        .expect("registered again");
    let again = ctl.get("/o/test/nodes/search-1", None).await.unwrap();
    assert_ne!(again.kvs()[0].lease(), lease, "on a new lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_under_the_prefix_is_skipped_and_loses_nothing_else() {
    let _p = provider("search-1").await;
    let mut ctl = etcdctl().await;
    // Not JSON; an entry under another node's key; a node value naming another node; a key
    // outside the layout; a value of 1.2 MB.
    let real = ctl
        .get("/o/test/services/search-1/search", None)
        .await
        .unwrap();
    let entry = real.kvs()[0].value().to_vec();
    ctl.put("/o/test/services/evil/search", entry.clone(), None)
        .await
        .unwrap();
    ctl.put("/o/test/nodes/evil", "{not json", None)
        .await
        .unwrap();
    ctl.put("/o/test/services/search-1/other", entry, None)
        .await
        .unwrap();
    ctl.put("/o/test/elsewhere/x", "1", None).await.unwrap();
    ctl.put("/o/test/nodes/huge", vec![b' '; 1_200_000], None)
        .await
        .unwrap();
    // A later node reads all of it in its first read; the running one through its watch.
    let watcher = observer().await;
    seen(&watcher, 10 * SEC, |n| providers(n) == 1)
        .await
        .unwrap();
    assert_eq!(
        watcher
            .registry()
            .nodes()
            .iter()
            .map(|n| n.name.clone())
            .collect::<Vec<_>>(),
        ["observer", "search-1"]
    );
    assert!(watcher.registry().lookup("other").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_of_more_keys_than_a_page_is_read_whole() {
    let mut ctl = etcdctl().await;
    let node = |i: usize| {
        format!(
            r#"{{"name":"n{i}","addr":"127.0.0.1:{}","generation":1}}"#,
            1000 + i
        )
    };
    for i in 0..2500 {
        ctl.put(format!("/o/test/nodes/n{i}"), node(i), None)
            .await
            .unwrap();
    }
    let watcher = observer().await;
    assert_eq!(watcher.registry().nodes().len(), 2501);
    let keys = ctl
        .get(
            "/o/test/",
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await
        .unwrap();
    assert_eq!(keys.count(), 2501);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_restored_from_an_older_snapshot_is_read_again_whole() {
    let old = provider("search-old").await;
    let watcher = observer().await;
    seen(&watcher, 10 * SEC, |n| providers(n) == 1)
        .await
        .unwrap();
    let backup = etcd().borrow_mut().backup();
    // After the snapshot: the old provider leaves, a new one comes, many writes pass.
    old.shutdown().await;
    let _new = provider("search-new").await;
    let mut ctl = etcdctl().await;
    for i in 0..50 {
        ctl.put(format!("/elsewhere/{i}"), "x", None).await.unwrap();
    }
    seen(&watcher, 10 * SEC, |n| providers(n) == 1)
        .await
        .unwrap();
    // Back to the snapshot: the old one listed (its lease runs out: it is gone), the new one
    // unknown (it registers again on a new lease), and a third registers: all of it at
    // revisions below the ones the watcher has seen. It must see each change.
    etcd().borrow_mut().restore(&backup);
    let _third = provider("search-third").await;
    let names = |n: &Node| {
        let mut v: Vec<String> = n
            .registry()
            .lookup("search")
            .iter()
            .map(|e| e.node.name.clone())
            .collect();
        v.sort();
        v
    };
    let converged = seen(&watcher, 15 * SEC, |n| {
        names(n) == ["search-new", "search-third"]
    })
    .await;
    assert!(converged.is_ok(), "the watcher holds {:?}", names(&watcher));
}
