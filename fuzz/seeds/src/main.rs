//! Writes the seed corpus of every fuzz target into `fuzz/corpus/<target>/`: real frames,
//! datagrams and documents, made by the code that writes them in a running cluster. Run
//! `cargo run --manifest-path fuzz/Cargo.toml -p cluster-fuzz-seeds` after a change to a
//! format; the files it writes are committed.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chitchat::transport::{BoxFuture, ChannelTransport, RecvOutcome, SendOutcome, Socket, Transport};
use chitchat::{ChitchatConfig, ChitchatEnvelope, ChitchatId, FailureDetectorConfig};
use cluster::fuzzing;
use cluster::service::encode;
use cluster_discovery::model::{Applications, Instance, Status, json, xml};

#[path = "../../src/echo.rs"]
#[allow(dead_code)]
mod echo;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpus")
}

/// Replaces `target`'s seeds with `seeds`, named `<name>-<n>`.
fn write(target: &str, name: &str, seeds: impl IntoIterator<Item = Vec<u8>>) {
    let dir = corpus().join(target);
    std::fs::create_dir_all(&dir).expect("the corpus folder is writable");
    for (n, seed) in seeds.into_iter().enumerate() {
        std::fs::write(dir.join(format!("{name}-{n}")), seed).expect("a seed is written");
    }
}

fn clear(target: &str) {
    let _ = std::fs::remove_dir_all(corpus().join(target));
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    for target in [
        "wire_v2_request",
        "wire_v2_reply",
        "wire_v1",
        "handshake",
        "service_args",
        "gossip_open",
        "gossip_envelope",
        "gossip_state",
        "eureka_json",
        "eureka_xml",
    ] {
        clear(target);
    }
    write("wire_v2_request", "request", fuzzing::seed_v2_requests());
    write("wire_v2_reply", "reply", fuzzing::seed_v2_replies());
    write("wire_v1", "frame", fuzzing::seed_v1());
    write("handshake", "message", fuzzing::seed_handshake());
    write("service_args", "call", service_args());
    write("gossip_state", "node", [fuzzing::seed_gossip_state()]);
    let datagrams = gossip_datagrams().await;
    let plain: Vec<&[u8]> = datagrams.iter().map(Vec::as_slice).collect();
    write("gossip_open", "sealed", fuzzing::seed_sealed(&plain));
    write("gossip_envelope", "datagram", datagrams);
    let (instances, apps) = eureka();
    write(
        "eureka_json",
        "instance",
        instances.iter().map(json::write_instance),
    );
    write("eureka_json", "apps", [json::write_applications(&apps)]);
    write("eureka_json", "client", eureka_json_clients());
    write(
        "eureka_xml",
        "instance",
        instances.iter().map(xml::write_instance),
    );
    write("eureka_xml", "apps", [xml::write_applications(&apps)]);
    write("eureka_xml", "client", eureka_xml_clients());
    println!("seeds written under {}", corpus().display());
}

/// One call of each function of the echo service: its index, then its encoded arguments.
fn service_args() -> Vec<Vec<u8>> {
    let hit = echo::Hit {
        id: 7,
        title: "rust".into(),
        tags: vec!["lang".into(), "systems".into()],
        score: Some(-3),
    };
    let shapes = vec![
        echo::Shape::Empty,
        echo::Shape::Named("n".into()),
        echo::Shape::Pair(1, -1),
        echo::Shape::Hits {
            hits: vec![hit.clone()],
            more: true,
        },
    ];
    let counts = BTreeMap::from([("a".to_owned(), 1i64), ("b".to_owned(), i64::MIN)]);
    let call = |index: u8, args: Vec<u8>| [vec![index], args].concat();
    vec![
        call(0, encode(&("hello",)).unwrap()),
        call(1, encode(&(vec![0u8, 1, 255], u64::MAX)).unwrap()),
        call(2, encode(&(hit.clone(),)).unwrap()),
        call(3, encode(&(Some(hit), shapes[3].clone())).unwrap()),
        call(3, encode(&(None::<echo::Hit>, shapes[1].clone())).unwrap()),
        call(4, encode(&(shapes, counts, true, 'λ')).unwrap()),
        call(5, encode(&()).unwrap()),
    ]
}

/// A transport that keeps the bytes of every envelope it sends.
struct Recording {
    inner: ChannelTransport,
    sent: Arc<Mutex<Vec<Vec<u8>>>>,
}

struct RecordingSocket {
    inner: Box<dyn Socket>,
    sent: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Transport for Recording {
    fn open(&self, listen: SocketAddr) -> BoxFuture<'_, anyhow::Result<Box<dyn Socket>>> {
        Box::pin(async move {
            Ok::<Box<dyn Socket>, anyhow::Error>(Box::new(RecordingSocket {
                inner: self.inner.open(listen).await?,
                sent: self.sent.clone(),
            }))
        })
    }
}

impl Socket for RecordingSocket {
    fn local_addr(&self) -> anyhow::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn send(
        &mut self,
        to: SocketAddr,
        envelope: ChitchatEnvelope,
    ) -> BoxFuture<'_, anyhow::Result<SendOutcome>> {
        Box::pin(async move {
            self.sent.lock().unwrap().push(envelope.serialize_to_vec());
            self.inner.send(to, envelope).await
        })
    }

    fn recv(&mut self) -> BoxFuture<'_, anyhow::Result<RecvOutcome>> {
        Box::pin(async move {
            self.inner.recv().await
        })
    }
}

/// The datagrams of chitchat nodes (two of V2, one of each earlier protocol version) gossiping real
/// registry state for a moment: SYN, SYN-ACK and ACK, each kind once per version.
async fn gossip_datagrams() -> Vec<Vec<u8>> {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let transport = Recording {
        inner: ChannelTransport::with_mtu(65_507),
        sent: sent.clone(),
    };
    let state = String::from_utf8(fuzzing::seed_gossip_state()).unwrap();
    let keys: Vec<(String, String)> = state
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let addr = |port| SocketAddr::from(([127, 0, 0, 1], port));
    let config = |name: &str, port, seed: u16, version| ChitchatConfig {
        chitchat_id: ChitchatId::new(name.to_owned(), 2, addr(port)),
        cluster_id: "fuzz".into(),
        gossip_interval: Duration::from_millis(20),
        listen_addr: addr(port),
        seed_nodes: vec![addr(seed).to_string()],
        failure_detector_config: FailureDetectorConfig::default(),
        marked_for_deletion_grace_period: Duration::from_secs(3600),
        catchup_callback: None,
        extra_liveness_predicate: None,
        protocol_version: version,
        // Small, so that the V2 nodes' digests come in parts.
        datagram_budget: 300,
    };
    let a = chitchat::spawn_chitchat(
        config("search-1", 7281, 7282, chitchat::ProtocolVersion::V0),
        keys.clone(),
        &transport,
    )
    .await
    .unwrap();
    let b = chitchat::spawn_chitchat(
        config("web-1", 7282, 7281, chitchat::ProtocolVersion::V1),
        keys.clone(),
        &transport,
    )
    .await
    .unwrap();
    let c = chitchat::spawn_chitchat(
        config("orders-1", 7283, 7284, chitchat::ProtocolVersion::V2),
        keys.clone(),
        &transport,
    )
    .await
    .unwrap();
    let d = chitchat::spawn_chitchat(
        config("orders-2", 7284, 7283, chitchat::ProtocolVersion::V2),
        keys,
        &transport,
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // News once the V2 nodes know each other speak V2: an ACK in V2 that carries it.
    c.with_chitchat(|cc| cc.self_node_state().set("rev", "2")).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for node in [a, b, c, d] {
        let _ = node.shutdown().await;
    }
    let sent = sent.lock().unwrap().clone();
    // One of each (version, kind): the header's third and fourth bytes.
    let mut seen = std::collections::BTreeSet::new();
    let mut kept: Vec<Vec<u8>> = sent
        .into_iter()
        .filter(|d| seen.insert((d[2], d[3])))
        .collect();
    kept.sort();
    kept
}

/// Instances as this server writes them, and a registry document holding them.
fn eureka() -> (Vec<Instance>, Applications) {
    let mut down = Instance::new("orders", "10.0.0.2", 8081)
        .with_id("orders-2")
        .meta("zone_name", "a<b&c")
        .lease(5, 15);
    down.status = Status::Down;
    down.overridden_status = Status::OutOfService;
    let instances = vec![
        Instance::new("search", "10.0.0.1", 7000)
            .with_id("search-1")
            .meta("cluster.node", "search-1"),
        down,
    ];
    let apps = Applications::group("3", "UP_1_DOWN_1_", instances.clone());
    (instances, apps)
}

/// Registrations as real Eureka clients send them (from the readers' own tests).
fn eureka_json_clients() -> Vec<Vec<u8>> {
    vec![
        br#"{"instance":{"app":"js-demo","instanceId":"js-demo-1","hostName":"127.0.0.1","ipAddr":"127.0.0.1","statusPageUrl":"http://127.0.0.1:3000/info","port":{"$":3000,"@enabled":true},"vipAddress":"js-demo","dataCenterInfo":{"@class":"com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo","name":"MyOwn"},"metadata":{"team":"y","@class":"java.util.HashMap"},"status":"UP"}}"#.to_vec(),
        br#"{"instance":{"app":"W","hostName":"h","ipAddr":"1.2.3.4","appGroupName":null,"overriddenstatus":"OUT_OF_SERVICE","port":8082,"isCoordinatingDiscoveryServer":"false","lastDirtyTimestamp":1630906182808,"lastUpdatedTimestamp":"1630906180645","leaseInfo":{"durationInSecs":"6"}}}"#.to_vec(),
    ]
}

fn eureka_xml_clients() -> Vec<Vec<u8>> {
    vec![br#"<?xml version="1.0"?><instance><instanceId>x-1</instanceId><hostName>h</hostName><app>x</app><ipAddr>1.1.1.1</ipAddr><port enabled="true">81</port><metadata><a__b>1</a__b></metadata></instance>"#.to_vec()]
}
