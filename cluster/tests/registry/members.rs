//! What a member can do to another node's name: one that holds the gossip key and a valid
//! certificate of its own (`docs/security.md`, "A compromised member").

use std::sync::Arc;
use std::time::Duration;

use cluster::registry::{GossipConfig, GossipRegistry};
use cluster::{Node, Registry};

use crate::forge::{Id, Ops, Peer, digest_len, syn};
use crate::support::{
    Engine, Mode, SearchClient, SearchServer, gossip_node, identity, keyring, until,
};

/// Keeps `id` alive at the peer's node: a heartbeat every 20 ms, as long as the task runs.
fn beat(peer: Arc<Peer>, id: Id) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for heartbeat in 2.. {
            peer.send(&syn(&[(id.clone(), heartbeat)])).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
}

#[tokio::test]
async fn a_forged_up_holder_of_a_name_does_not_keep_the_name_from_its_owner() {
    let (web, web_registry) = gossip_node("web-1", &[]).await;
    let seeds = [web_registry.gossip_addr().expect("gossiping")];
    // A member's own port answers TLS with the member's certificate; a bare listener accepts
    // TCP and nothing else.
    let (mallory, _) = gossip_node("mallory-1", &seeds).await;
    let bare = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bare_addr = bare.local_addr().unwrap();
    let accepting = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = bare.accept().await {
            held.push(stream);
        }
    });

    // The member forges two live generations of `search-1` that say they are up, one at each.
    let peer = Arc::new(Peer::member_of(&web_registry, keyring()).await);
    let mut beats = Vec::new();
    for (generation, at) in [(7, mallory.addr()), (8, bare_addr)] {
        let id = Id::new("search-1", generation, peer.addr());
        assert!(peer.syn_ack(&syn(&[(id.clone(), 1)])).await.is_some());
        let ops = Ops::default()
            .node(&id)
            .set("rpc", &at.to_string(), 1)
            .set("status", "up", 2);
        peer.send(&ops.ack()).await;
        beats.push(beat(peer.clone(), id));
    }
    // web-1 holds both: its digest lists itself, mallory-1 and the two.
    let give_up = tokio::time::Instant::now() + Duration::from_secs(10);
    while web_registry.nodes().iter().all(|n| n.name != "search-1")
        || digest_len(&peer.syn_ack(&syn(&[])).await.expect("web-1 answers")) < 4
    {
        assert!(
            tokio::time::Instant::now() < give_up,
            "web-1 never took the forged holders"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The real search-1 starts: neither forged holder presents its certificate.
    let registry = GossipRegistry::new(
        GossipConfig::new()
            .keyring(keyring())
            .seeds(seeds.iter().map(ToString::to_string)),
    );
    let owner = Node::builder()
        .identity(identity("search-1"))
        .registry(registry.clone())
        .start()
        .await
        .expect("the owner of the name starts though forged holders say they are up");
    let engine = Arc::new(Engine::new("search-1", Mode::Answer));
    let _served = owner.serve(SearchServer::new(engine)).await.unwrap();
    until("web-1 sees the owner's service", || {
        web_registry.lookup("search").len() == 1
    })
    .await;
    let hits = SearchClient::new(&web).search("q".into()).await.unwrap();
    assert_eq!(hits[0].title, "q from search-1");

    for beat in beats {
        beat.abort();
    }
    accepting.abort();
    owner.shutdown().await;
    mallory.shutdown().await;
    web.shutdown().await;
}
