//! Not upstream's: gossip in digest parts (`parts.rs`), between nodes of one version and of two.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::watch;

use crate::message::{ChitchatEnvelope, ChitchatMessage, ProtocolVersion};
use crate::server::spawn_chitchat;
use crate::transport::ChannelTransport;
use crate::digest::Digest;
use crate::{Chitchat, ChitchatConfig, ChitchatId, FailureDetectorConfig, Heartbeat, Version};

fn config(port: u16, version: ProtocolVersion, budget: usize) -> ChitchatConfig {
    let mut config = ChitchatConfig::for_test(port);
    config.chitchat_id = ChitchatId::new(
        format!("orders-{port}-7f9c4d"),
        1_700_000_000_000_000_000 + u64::from(port),
        ([10, 0, u8::try_from(port / 256 % 256).unwrap(), (port % 256) as u8], port).into(),
    );
    config.listen_addr = config.chitchat_id.gossip_advertise_addr;
    config.protocol_version = version;
    config.datagram_budget = budget;
    config.failure_detector_config = FailureDetectorConfig {
        initial_interval: Duration::from_millis(100),
        ..FailureDetectorConfig::default()
    };
    config
}

fn node(port: u16, budget: usize) -> Chitchat {
    let seeds = watch::channel(Default::default()).1;
    let mut cc = Chitchat::with_chitchat_id_and_seeds(
        config(port, ProtocolVersion::V2, budget),
        seeds,
        vec![("rpc".to_owned(), format!("10.0.0.1:{port}"))],
    );
    cc.self_node_state().set("svc:orders", "x".repeat(40));
    cc
}

/// Every datagram of one exchange, `a` asking `b`, through the wire format: their sizes.
fn exchange(a: &mut Chitchat, b: &mut Chitchat, sizes: &mut Vec<(&'static str, usize, bool)>) {
    let (a_addr, b_addr) = (
        a.self_chitchat_id().gossip_advertise_addr,
        b.self_chitchat_id().gossip_advertise_addr,
    );
    let version = ProtocolVersion::V2;
    let mut wire = |message: ChitchatMessage| {
        let bytes = ChitchatEnvelope { version, message }.serialize_to_vec();
        let envelope = ChitchatEnvelope::deserialize(&mut &bytes[..]).unwrap();
        (envelope.message, bytes.len())
    };
    for syn in a.create_syn_messages(version) {
        let (syn, len) = wire(syn);
        sizes.push(("syn", len, true));
        let Some(syn_ack) = b.process_message_from(Some(a_addr), version, syn) else {
            continue;
        };
        let empty = matches!(&syn_ack, ChitchatMessage::SynAck { delta, .. } if delta.node_deltas.is_empty());
        let (syn_ack, len) = wire(syn_ack);
        sizes.push(("syn-ack", len, empty));
        if let Some(ack) = a.process_message_from(Some(b_addr), version, syn_ack) {
            let (ack, len) = wire(ack);
            sizes.push(("ack", len, false));
            b.process_message_from(Some(a_addr), version, ack);
        }
    }
}

fn pair(nodes: &mut [Chitchat], i: usize, j: usize) -> (&mut Chitchat, &mut Chitchat) {
    if i < j {
        let (left, right) = nodes.split_at_mut(j);
        (&mut left[i], &mut right[0])
    } else {
        let (left, right) = nodes.split_at_mut(i);
        (&mut right[0], &mut left[j])
    }
}

fn versions(cc: &Chitchat) -> BTreeMap<ChitchatId, Version> {
    cc.node_states()
        .iter()
        .map(|(id, state)| (id.clone(), state.max_version()))
        .collect()
}

#[tokio::test]
async fn sixty_nodes_converge_and_a_quiet_cluster_sends_nothing_past_the_budget() {
    tokio::time::pause();
    let budget = 600;
    let mut nodes: Vec<Chitchat> = (0..60).map(|i| node(7_000 + i, budget)).collect();
    let n = nodes.len();
    let mut sizes = Vec::new();
    let mut rounds = 0;
    // Each round, node i asks nodes i+1, i+7 and i+19 (a ring and two chords).
    loop {
        rounds += 1;
        sizes.clear();
        for i in 0..n {
            for step in [1, 7, 19] {
                let (a, b) = pair(&mut nodes, i, (i + step) % n);
                exchange(a, b, &mut sizes);
            }
        }
        tokio::time::advance(Duration::from_millis(100)).await;
        let first = versions(&nodes[0]);
        if first.len() == n && nodes.iter().all(|cc| versions(cc) == first) {
            break;
        }
        assert!(rounds < 20, "not converged after {rounds} rounds");
    }
    // One more round with nothing new: every SYN and every SYN-ACK fits the budget, no ACK goes
    // out, and a digest took several parts.
    sizes.clear();
    for i in 0..n {
        let (a, b) = pair(&mut nodes, i, (i + 1) % n);
        exchange(a, b, &mut sizes);
    }
    let syns = sizes.iter().filter(|(kind, ..)| *kind == "syn").count();
    assert!(syns >= 3 * n, "{syns} SYNs for {n} exchanges: the digest is in parts");
    assert!(sizes.iter().all(|(kind, ..)| *kind != "ack"), "no empty ACK is sent");
    for (kind, len, quiet) in &sizes {
        if *quiet {
            assert!(*len <= budget, "a {kind} of {len} bytes, over the budget of {budget}");
        }
    }
    for cc in &mut nodes {
        cc.update_nodes_liveness();
        let live: HashSet<_> = cc.live_nodes().collect();
        assert_eq!(live.len(), n, "every node live at {:?}", cc.self_chitchat_id());
    }
}

#[tokio::test]
async fn nodes_of_v0_and_of_v2_gossip_with_each_other() {
    let transport = ChannelTransport::default();
    let ports: Vec<u16> = (41_001..=41_007).collect();
    let ids: Vec<ChitchatId> = ports
        .iter()
        .map(|port| config(*port, ProtocolVersion::V0, 300).chitchat_id)
        .collect();
    let mut handles = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        // Nodes 0 and 3 are of an earlier release: they speak V0 and drop V2. Node 0, everyone's
        // seed, never starts an exchange: it hears only what V2 nodes ask it in V0.
        let version = if i % 3 == 0 { ProtocolVersion::V0 } else { ProtocolVersion::V2 };
        let mut config = config(*port, version, 300);
        config.gossip_interval = Duration::from_millis(if i == 0 { 3_600_000 } else { 50 });
        if i > 0 {
            config.seed_nodes = vec![ids[0].gossip_advertise_addr.to_string()];
        }
        // Every node holds a key, as every `cluster` node does: a state with none says
        // nothing of its release (`version_for`).
        let keys = vec![("rpc".to_string(), format!("10.0.0.{i}:7281"))];
        handles.push(spawn_chitchat(config, keys, &transport).await.unwrap());
    }
    let everyone: HashSet<ChitchatId> = ids.iter().cloned().collect();
    tokio::time::timeout(Duration::from_secs(30), async {
        for handle in &handles {
            let mut live = handle.chitchat().lock().await.live_nodes_watcher();
            live.wait_for(|nodes| nodes.keys().cloned().collect::<HashSet<_>>() == everyone)
                .await
                .unwrap();
        }
    })
    .await
    .expect("every node sees every other, across versions");
    let asks = |from: usize, to: usize| {
        let chitchat = handles[from].chitchat();
        let addr = ids[to].gossip_advertise_addr;
        async move { chitchat.lock().await.version_for(addr) }
    };
    assert_eq!(asks(1, 2).await, ProtocolVersion::V2, "V2 nodes speak V2 to each other");
    assert_eq!(asks(1, 3).await, ProtocolVersion::V0, "and V0 to a node of V0");
    assert_eq!(asks(3, 1).await, ProtocolVersion::V0, "which speaks only V0");
    for handle in handles {
        handle.shutdown().await.unwrap();
    }
}


/// A node not known yet is asked in the least version the live nodes known here speak: V0 while
/// none is known (a node's first words to its seeds) or one of them speaks V0, V2 once every one
/// speaks V2, so that a new node's first pushes do not draw whole digests in one datagram.
#[tokio::test]
async fn a_node_not_known_yet_is_asked_in_the_version_the_live_nodes_speak() {
    let unknown: SocketAddr = "10.9.9.9:7280".parse().unwrap();
    let (mut a, mut b) = (node(42_001, 1_188), node(42_002, 1_188));
    assert_eq!(a.version_for(unknown), ProtocolVersion::V0, "no node known yet");
    let mut sizes = Vec::new();
    exchange(&mut a, &mut b, &mut sizes);
    exchange(&mut b, &mut a, &mut sizes);
    a.update_nodes_liveness();
    assert_eq!(a.live_nodes().count(), 2);
    assert_eq!(a.version_for(unknown), ProtocolVersion::V2, "every live node speaks V2");
    // A node whose digest entry was relayed here, but none of its keys yet.
    let relayed = ChitchatId::new("relayed", 1, "10.9.9.10:7280".parse().unwrap());
    let mut digest = Digest::default();
    digest.add_node(relayed.clone(), Heartbeat(7), 0, 3);
    let b_addr = b.self_chitchat_id().gossip_advertise_addr;
    let syn = ChitchatMessage::Syn {
        cluster_id: a.cluster_id().to_string(),
        digest,
    };
    a.process_message_from(Some(b_addr), ProtocolVersion::V2, syn);
    assert!(a.node_state(&relayed).is_some());
    assert_eq!(
        a.version_for(relayed.gossip_advertise_addr),
        ProtocolVersion::V2,
        "a node known by its digest entry alone is asked as the live nodes speak"
    );
    // A node of an earlier release: its state says no version.
    let seeds = watch::channel(Default::default()).1;
    let mut old = Chitchat::with_chitchat_id_and_seeds(
        config(42_003, ProtocolVersion::V0, 1_188),
        seeds,
        vec![("rpc".to_string(), "10.0.0.3:7281".to_string())],
    );
    exchange(&mut old, &mut a, &mut sizes);
    a.update_nodes_liveness();
    assert_eq!(a.live_nodes().count(), 3);
    assert_eq!(a.version_for(unknown), ProtocolVersion::V0, "one live node speaks V0");
}

/// A node heard from itself is live at once, even when its heartbeat was relayed here first
/// (a new node's push races the rounds that pass its state on): left to its next heartbeat, a
/// join took 300-600 ms to reach every node in one case of six at 100 nodes (`sim.rs`).
#[tokio::test]
async fn a_node_heard_from_itself_is_live_though_its_heartbeat_was_relayed_first() {
    let (mut a, mut b, mut c) = (node(43_001, 1_188), node(43_002, 1_188), node(43_003, 1_188));
    let c_id = c.self_chitchat_id().clone();
    // c's push to a, on its way while c's exchange with b and b's with a pass its state on.
    let push = c.create_syn_messages(ProtocolVersion::V2);
    let mut sizes = Vec::new();
    exchange(&mut c, &mut b, &mut sizes);
    exchange(&mut b, &mut a, &mut sizes);
    a.update_nodes_liveness();
    assert!(a.node_state(&c_id).is_some(), "c's state was relayed to a");
    assert!(!a.live_nodes().any(|id| *id == c_id), "relayed only: not live yet");
    for syn in push {
        a.process_message_from(Some(c_id.gossip_advertise_addr), ProtocolVersion::V2, syn);
    }
    a.update_nodes_liveness();
    assert!(a.live_nodes().any(|id| *id == c_id), "heard from c itself: live");
}
