//! What a member can do to another node's name: one that holds the gossip key and a valid
//! certificate of its own (`docs/security.md`, "A compromised member").

use std::sync::Arc;

use cluster::registry::{GossipConfig, GossipRegistry};
use cluster::{Node, Registry};

use crate::forge::{bare_listener, forge_holders};
use crate::support::{
    Engine, Mode, SearchClient, SearchServer, gossip_node, identity, keyring, until,
};

/// A secure node named `name` seeded with `seeds`, listening on `listen` if given.
async fn start(
    name: &str,
    seeds: &[std::net::SocketAddr],
    listen: Option<std::net::SocketAddr>,
) -> Result<(Node, GossipRegistry), cluster::StartError> {
    let registry = GossipRegistry::new(
        GossipConfig::new()
            .keyring(keyring())
            .seeds(seeds.iter().map(ToString::to_string)),
    );
    let mut builder = Node::builder()
        .identity(identity(name))
        .registry(registry.clone());
    if let Some(listen) = listen {
        builder = builder.listen(listen);
    }
    Ok((builder.start().await?, registry))
}

#[tokio::test]
async fn a_forged_up_holder_of_a_name_does_not_keep_the_name_from_its_owner() {
    let (web, web_registry) = gossip_node("web-1", &[]).await;
    let seeds = [web_registry.gossip_addr().expect("gossiping")];
    // A member's own port answers TLS with the member's certificate; a bare listener accepts
    // TCP and nothing else.
    let (mallory, _) = gossip_node("mallory-1", &seeds).await;
    let (bare_addr, accepting) = bare_listener().await;
    let beats = forge_holders(
        &web_registry,
        keyring(),
        "search-1",
        &[mallory.addr(), bare_addr],
    )
    .await;

    // The real search-1 starts: neither forged holder presents its certificate.
    let (owner, _) = start("search-1", &seeds, None)
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

/// Forged holders whose addresses reach the owner's own port: the same port under another
/// address (IPv4-mapped IPv6), and a forwarder of the member's. The owner accepts nothing
/// until it has claimed its name, so its own port cannot answer the probe as the holder.
#[tokio::test]
async fn a_forged_holder_that_reaches_the_owners_own_port_does_not_count() {
    let (web, web_registry) = gossip_node("web-1", &[]).await;
    let seeds = [web_registry.gossip_addr().expect("gossiping")];
    let own = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let forwarder = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let forwarder_addr = forwarder.local_addr().unwrap();
    let forwarding = tokio::spawn(async move {
        while let Ok((mut inbound, _)) = forwarder.accept().await {
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(own).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    let alias =
        std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST.to_ipv6_mapped(), own.port()));
    let beats = forge_holders(
        &web_registry,
        keyring(),
        "search-1",
        &[alias, forwarder_addr],
    )
    .await;
    let (owner, _) = start("search-1", &seeds, Some(own))
        .await
        .expect("the owner starts: what answers at those addresses is itself");
    assert_eq!(owner.addr(), own);
    for beat in beats {
        beat.abort();
    }
    forwarding.abort();
    owner.shutdown().await;
    web.shutdown().await;
}
