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
//!    Each push goes out again 50 and 150 ms later, and to the peers learned of meanwhile 650 ms
//!    later ([`FOLLOW_UPS`]): a datagram lost to one peer is sent again, and a node that has
//!    just started reaches the peers it learns of as its seeds' answers come in, before their
//!    rounds would have told them second-hand. A newer change starts over.
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

/// When a change is pushed, counted from the one before: at once to every target, 50 and 150 ms
/// later to every target again, then to the targets not pushed to yet. A peer whose one datagram was
/// lost, or that a node just started did not know of yet (its seeds' answers come in parts, or
/// are lost), would hear the news second-hand only and not count this node live until its
/// heartbeats had gone round: simulated at 100-130 nodes with 1 % of packets lost, a join
/// reached every node in 412 ms at the median and 925 ms at worst, pushed once
/// (`vendor/chitchat/src/sim.rs`, `docs/benchmarks.md`). Sent to every target twice, four
/// joins in 84 (3 seeds) still took 111-691 ms: a peer had missed both; thrice, none over 100 ms.
const FOLLOW_UPS: [Duration; 4] = [
    Duration::ZERO,
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(500),
];
/// The pushes that go to every target, not only to new ones.
const AGAIN: usize = 3;

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
        'change: loop {
            let mut pushed = HashSet::new();
            for (n, wait) in FOLLOW_UPS.into_iter().enumerate() {
                if !wait.is_zero() {
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        // A newer change: pushed to every peer again, from the start.
                        () = wake.notified() => {
                            tokio::time::sleep(spacing).await;
                            continue 'change;
                        }
                    }
                }
                let Some(held) = running.upgrade() else {
                    return;
                };
                let peers = targets(&*held.chitchat.lock().await, fanout);
                let mut sent = 0;
                for peer in peers {
                    // The first three pushes go to every target; later ones to those not pushed
                    // to yet.
                    if !pushed.insert(peer) && n >= AGAIN {
                        continue;
                    }
                    // Paced: every peer answers with a digest of every node, and a hundred
                    // answers at once overflow a receive buffer that is not large enough.
                    if sent > 0 && sent % BURST == 0 {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    let _ = held.handle.gossip(peer);
                    sent += 1;
                }
            }
            break;
        }
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
