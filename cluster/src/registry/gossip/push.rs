//! Pushing this node's own changes at once, instead of waiting for gossip rounds to carry them.
//!
//! 1. A change (`GossipRegistry::change`: the node's start, a registration, its withdrawal)
//!    wakes the pusher; changes made while it pushes are pushed together, at most once per
//!    [`spacing`], so a node that registers ten services does not push ten times.
//! 2. A push is a gossip round with each of at most `GossipConfig::push_fanout` peers ([`targets`]):
//!    the live ones first, then every other node it knows of (a node that has just started
//!    knows its peers only second-hand, from its seed, and counts none of them live yet), then
//!    its seeds while it knows no live peer. Each peer hears the news from this node itself,
//!    which makes this node live there at once (`vendor/chitchat/README.md`).
//! 3. Peers past the fanout hear it by gossip, a round or two later: a push costs a digest of
//!    every node each way, so pushing to all of a thousand nodes on every change would cost the
//!    cluster a million exchanges when all of them start.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use chitchat::Chitchat;
use tokio::sync::Notify;

use super::Running;

/// Peers pushed to at once, before a millisecond's pause.
const BURST: usize = 16;

/// The least time between two pushes, after the last one has gone out (a push to 128 peers
/// takes 8 ms, paced): changes within it go out together. Short, because a node that starts
/// and then registers waits this long to be seen with its services.
pub(super) fn spacing(gossip_interval: Duration) -> Duration {
    (gossip_interval / 40).max(Duration::from_millis(1))
}

/// Pushes on every wake-up of `wake`, until `running` is gone (the pusher holds it weakly, as
/// `Running` holds the pusher).
pub(super) async fn push_changes(
    running: Weak<Running>,
    wake: Arc<Notify>,
    fanout: usize,
    spacing: Duration,
) {
    loop {
        wake.notified().await;
        let Some(running) = running.upgrade() else {
            return;
        };
        let peers = targets(&*running.chitchat.lock().await, fanout);
        let handle = &running.handle;
        for (i, peer) in peers.into_iter().enumerate() {
            // Paced: every peer answers with a digest of every node, and a hundred answers at
            // once overflow a receive buffer that is not large enough.
            if i > 0 && i % BURST == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let _ = handle.gossip(peer);
        }
        drop(running);
        tokio::time::sleep(spacing).await;
    }
}

/// At most `fanout` gossip addresses to push to: live peers first, then the other nodes known,
/// then the seeds while no peer is live; each group in random order, so that the peers past the
/// fanout differ from push to push.
pub(super) fn targets(cc: &Chitchat, fanout: usize) -> Vec<SocketAddr> {
    let own = cc.self_chitchat_id();
    let mut live: Vec<SocketAddr> = cc
        .live_nodes()
        .filter(|id| *id != own)
        .map(|id| id.gossip_advertise_addr)
        .collect();
    let mut others: Vec<SocketAddr> = cc
        .node_states()
        .keys()
        .filter(|id| *id != own)
        .map(|id| id.gossip_advertise_addr)
        .collect();
    let mut seeds: Vec<SocketAddr> = if live.is_empty() {
        cc.seed_nodes().into_iter().collect()
    } else {
        Vec::new()
    };
    fastrand::shuffle(&mut live);
    fastrand::shuffle(&mut others);
    fastrand::shuffle(&mut seeds);
    let mut seen = HashSet::from([own.gossip_advertise_addr]);
    live.into_iter()
        .chain(others)
        .chain(seeds)
        .filter(|addr| seen.insert(*addr))
        .take(fanout)
        .collect()
}
