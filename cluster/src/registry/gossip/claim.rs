//! One live process per name: a starting node claims its name, and says it is up only once no
//! live generation of that name answers (`docs/security.md`).
//!
//! 1. Wait (at most five rounds) to hear from a seed: a node alone has no one to ask.
//! 2. Read every other generation of the name that says it is up ([`state::holders`]), newest
//!    first, at most [`MAX_HOLDERS`] of them: anyone holding the gossip key can forge holders,
//!    and each one costs a probe.
//! 3. For five rounds, probe each holder that looks live (heartbeats can be replayed) on its
//!    RPC port, up to [`PROBES`] times (a slow accept is not a crash). The deadline is checked
//!    before every probe, so forged holders cost at most the five rounds and one probe (1 s).
//!    On a node with an identity a probe is a mutual TLS handshake, and answers only if the
//!    certificate presented names this node: a member that forges an "up" holder pointing at
//!    any open port (its own, another node's) cannot keep the name from its owner. On an
//!    `insecure()` node a probe is a TCP connect, which anyone who can gossip can fake.
//! 4. A holder that answers: the name is taken. None: this node takes the name over.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use chitchat::ChitchatId;
use tokio::time::Instant;

use super::{GossipRegistry, Running, state};
use crate::registry::RegistryError;
use crate::security::tls::{self, Tls};

/// Holders probed at most, newest generations first. A crashed generation stays up in gossip
/// until it is purged (`purge_after`), so a name restarted a few times has a few.
pub(super) const MAX_HOLDERS: usize = 8;
/// Probes of one holder that looks live and does not answer.
pub(super) const PROBES: usize = 3;
/// The longest one probe waits for a connection.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

impl GossipRegistry {
    /// Claims the node's name: once it has heard from a seed, a node whose name another
    /// generation holds waits a few rounds for that holder's heartbeats. A holder that beats is
    /// alive: the name is taken, and this node never says it is up, so no peer routes to it.
    /// One that stays silent crashed: this node takes over at once, as a restart should.
    pub(super) async fn claim(&self, running: &Running) -> Result<(), RegistryError> {
        let config = &self.inner.config;
        let round = config.gossip_interval;
        let rounds = round.saturating_mul(5);
        // Capped: with long rounds the first exchange still comes back in a round trip.
        let poll = (round / 4).clamp(Duration::from_millis(1), Duration::from_millis(20));
        let own = running.handle.chitchat_id().clone();
        if !config.seeds.is_empty() {
            // A first exchange with a seed is one round trip; a cluster whose seeds are all
            // down is not waited for long.
            let give_up = later(rounds);
            while running.chitchat.lock().await.node_states().len() < 2 {
                if Instant::now() >= give_up {
                    // Alone: the first node of a cluster, or seeds that are down, or seeds that
                    // seal with a key this node does not hold (a stale gossip.key).
                    tracing::warn!(
                        "node `{}` heard from none of its seeds {:?} within {rounds:?}: are they up, and do they hold one of this node's gossip keys ({})?",
                        own.node_id,
                        config.seeds,
                        config.keyring.as_ref().map_or_else(
                            || "plaintext".to_owned(),
                            |k| k
                                .keys()
                                .iter()
                                .map(ToString::to_string)
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    );
                    break;
                }
                tokio::time::sleep(poll).await;
            }
        }
        let mut holders = state::holders(&*running.chitchat.lock().await, &own);
        if !holders.is_empty() {
            holders.sort_by_key(|(id, _)| std::cmp::Reverse(id.generation_id));
            if holders.len() > MAX_HOLDERS {
                tracing::warn!(
                    "node `{}`: {} other generations say they are up; probing the newest {MAX_HOLDERS}",
                    own.node_id,
                    holders.len()
                );
                holders.truncate(MAX_HOLDERS);
            }
            // One at this node's own address is this node's port, not a live holder's.
            let probed: Vec<_> = holders
                .iter()
                .filter(|(_, addr)| *addr != running.own.addr)
                .cloned()
                .collect();
            let live = |candidates: Vec<(ChitchatId, SocketAddr)>| async move {
                let cc = running.chitchat.lock().await;
                candidates
                    .into_iter()
                    .filter(|(id, _)| cc.live_nodes().any(|n| n == id))
                    .collect()
            };
            let tls = self.inner.tls.get().cloned();
            let name = own.node_id.clone();
            let answers = |addr, wait| holds(addr, wait, name.clone(), tls.clone());
            let found = probe_holders(probed, later(rounds), poll, live, answers).await;
            if let Some((id, addr)) = found {
                tracing::error!(
                    "node `{}` is already up at {addr} (generation {}): not starting a second one",
                    own.node_id,
                    id.generation_id
                );
                return Err(RegistryError::NameTaken {
                    name: own.node_id.to_string(),
                    holder: addr,
                });
            }
            for (id, addr) in &holders {
                tracing::info!(
                    "node `{}` of generation {} (at {addr}) is gone: taking its name over",
                    own.node_id,
                    id.generation_id
                );
            }
        }
        self.change(|me| {
            state::mark_up(me);
            Ok(())
        })
        .await
    }
}

/// `now + wait`, or far ahead if that overflows.
fn later(wait: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(wait)
        .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365))
}

/// The first of `holders` that looks live (`live` keeps those that do) and answers a probe
/// started before `give_up`, each probed at most [`PROBES`] times, each probe given
/// [`PROBE_TIMEOUT`]: the whole takes at most `give_up` and one probe.
pub(super) async fn probe_holders<L, LF, A, AF>(
    holders: Vec<(ChitchatId, SocketAddr)>,
    give_up: Instant,
    poll: Duration,
    live: L,
    answers: A,
) -> Option<(ChitchatId, SocketAddr)>
where
    L: Fn(Vec<(ChitchatId, SocketAddr)>) -> LF,
    LF: Future<Output = Vec<(ChitchatId, SocketAddr)>>,
    A: Fn(SocketAddr, Duration) -> AF,
    AF: Future<Output = bool>,
{
    let mut probes = vec![0; holders.len()];
    while Instant::now() < give_up {
        let due: Vec<_> = holders
            .iter()
            .zip(&probes)
            .filter(|(_, n)| **n < PROBES)
            .map(|(h, _)| h.clone())
            .collect();
        if due.is_empty() {
            return None;
        }
        for (id, addr) in live(due).await {
            if Instant::now() >= give_up {
                return None;
            }
            if answers(addr, PROBE_TIMEOUT).await {
                return Some((id, addr));
            }
            if let Some(at) = holders.iter().position(|(h, _)| *h == id) {
                probes[at] += 1;
            }
        }
        tokio::time::sleep(poll).await;
    }
    None
}

/// Whether the node `name` answers at `addr` within `wait`: with `tls`, a mutual TLS handshake
/// whose certificate names it; without (an `insecure()` node), anything accepting TCP there.
async fn holds(addr: SocketAddr, wait: Duration, name: Arc<str>, tls: Option<Arc<Tls>>) -> bool {
    let probe = async {
        let stream = crate::net::TcpStream::connect(addr).await.ok()?;
        let Some(tls) = tls else {
            return Some(true);
        };
        let stream = tokio_rustls::TlsConnector::from(tls.client.clone())
            .connect(tls::server_name(&name, addr), stream)
            .await
            .ok()?;
        let presented = tls.peer_of(stream.get_ref().1.peer_certificates());
        if presented.as_deref() != Ok(&*name) {
            // A forged holder: gossip says `name` is up there, and something else answers.
            tracing::warn!(
                "the registry says node `{name}` is up at {addr}, but what answers there is {}: not a holder of the name",
                presented.map_or_else(|why| why, |node| format!("node `{node}`"))
            );
            return Some(false);
        }
        Some(true)
    };
    matches!(tokio::time::timeout(wait, probe).await, Ok(Some(true)))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn holders(n: u16) -> Vec<(ChitchatId, SocketAddr)> {
        (0..n)
            .map(|i| {
                let addr = SocketAddr::from(([10, 0, 0, 1], 7000 + i));
                (ChitchatId::new("search-1", u64::from(i), addr), addr)
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn forged_holders_that_never_answer_cost_the_deadline_and_one_probe_at_most() {
        let probes = AtomicUsize::new(0);
        let start = Instant::now();
        let round = Duration::from_millis(200);
        let found = probe_holders(
            holders(100),
            start + 5 * round,
            round / 4,
            |due| async move { due },
            |_, wait| {
                probes.fetch_add(1, Ordering::Relaxed);
                // A black hole: the connection never comes, the probe takes all it may.
                async move {
                    tokio::time::sleep(wait).await;
                    false
                }
            },
        )
        .await;
        assert_eq!(found, None);
        // Without the deadline inside the loop: 100 holders × 1 s before it was looked at.
        assert!(
            start.elapsed() <= 5 * round + PROBE_TIMEOUT,
            "{:?}",
            start.elapsed()
        );
        assert_eq!(probes.load(Ordering::Relaxed), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_holder_that_answers_is_found_and_one_that_does_not_is_probed_three_times() {
        let probes = AtomicUsize::new(0);
        let start = Instant::now();
        let all = holders(2);
        let alive = all[1].1;
        let found = probe_holders(
            all.clone(),
            start + Duration::from_secs(60),
            Duration::from_millis(50),
            |due| async move { due },
            |addr, _| {
                let n = probes.fetch_add(1, Ordering::Relaxed);
                // The live holder answers on its third try (a slow accept).
                async move { addr == alive && n >= 4 }
            },
        )
        .await;
        assert_eq!(found, Some(all[1].clone()));
        let start = Instant::now();
        let found = probe_holders(
            all[..1].to_vec(),
            start + Duration::from_secs(60),
            Duration::from_millis(50),
            |due| async move { due },
            |_, _| async { false },
        )
        .await;
        assert_eq!(found, None);
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "gave up after three probes"
        );
    }

    /// A TLS listener that presents `node`'s certificate (of `authority`) to whoever connects.
    async fn tls_listener(authority: &crate::Authority, node: &str) -> SocketAddr {
        let tls = Tls::new(&authority.issue(node).unwrap()).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.server.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    if let Ok(mut stream) = acceptor.accept(stream).await {
                        let _ = tokio::io::AsyncReadExt::read(&mut stream, &mut [0u8; 1]).await;
                    }
                });
            }
        });
        addr
    }

    /// The probe itself, on real sockets: with signed gossip a member cannot forge an up holder
    /// of another's name at all, so the registry tests of forged holders stop before it.
    #[tokio::test]
    async fn only_a_certificate_naming_the_node_proves_a_holder() {
        let authority = crate::Authority::new("probe").unwrap();
        let prober = Arc::new(Tls::new(&authority.issue("search-2").unwrap()).unwrap());
        let owner = tls_listener(&authority, "search-1").await;
        let member = tls_listener(&authority, "mallory-1").await;
        let stranger = tls_listener(&crate::Authority::new("probe").unwrap(), "search-1").await;
        let bare = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let bare_addr = bare.local_addr().unwrap();
        let wait = Duration::from_secs(5);
        let name: Arc<str> = Arc::from("search-1");
        let probe = |addr| holds(addr, wait, name.clone(), Some(prober.clone()));
        assert!(probe(owner).await, "the owner's certificate names it");
        assert!(
            !probe(member).await,
            "another member's certificate does not"
        );
        assert!(
            !probe(stranger).await,
            "nor one of another CA that names it"
        );
        // A listener that accepts TCP and never speaks: the probe ends at its deadline.
        assert!(
            !holds(
                bare_addr,
                Duration::from_millis(300),
                name.clone(),
                Some(prober.clone())
            )
            .await
        );
        // Without TLS (an `insecure()` registry), any listener counts.
        assert!(holds(bare_addr, wait, name, None).await);
    }
}
