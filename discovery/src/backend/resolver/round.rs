//! One refresh round: resolve every name (a failure keeps its last answer), turn the endpoints
//! into addresses, ask each address to describe itself (a bounded number at once, each within
//! the probe timeout), fold the answers into what each endpoint last said, publish.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;

use cluster::{DescribeError, Described};
use futures::StreamExt;
use tokio::time::Instant;

use super::{Inner, Peer, lock};
use crate::resolve::Endpoint;

/// At most one WARN of each kind per this long: a resolver that fails every round, or an
/// endpoint that never answers, does not flood the log.
const WARN_EVERY: Duration = Duration::from_secs(30);

impl Inner {
    pub(super) async fn refresh(&self) {
        let _one = self.refreshing.lock().await;
        if self.stopped.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let Some(describer) = lock(&self.describer).clone() else {
            return;
        };
        let addrs = self.addresses().await;
        let limit = self.config.max_concurrent_probes.max(1);
        let timeout = self.config.probe_timeout;
        let answers: Vec<(SocketAddr, Result<Described, DescribeError>)> =
            futures::stream::iter(addrs.clone())
                .map(move |addr| {
                    let describer = describer.clone();
                    async move { (addr, describer.describe(addr, timeout).await) }
                })
                .buffer_unordered(limit)
                .collect()
                .await;
        if answers
            .iter()
            .any(|(_, a)| matches!(a, Err(DescribeError::Stopped)))
        {
            // The node is gone or stopping: what it last read stays, and nothing more is
            // asked (the refresh task ends).
            self.stop();
            return;
        }
        self.fold(&addrs, answers);
        self.publish();
    }

    /// Every endpoint of every name, as addresses: the resolver's answer, or its last one when
    /// it fails; at most `max_endpoints` of them.
    async fn addresses(&self) -> BTreeSet<SocketAddr> {
        let limit = self.config.max_concurrent_probes.max(1);
        // Owned, not borrowed from `self`: the refresh task's future must be `Send` for every
        // lifetime, which a stream of borrowing closures is not.
        let resolver = self.resolver.clone();
        let resolved: Vec<(String, _)> = futures::stream::iter(self.config.services.clone())
            .map(move |name| {
                let resolver = resolver.clone();
                async move {
                    let found = resolver.resolve(&name).await;
                    (name, found)
                }
            })
            .buffer_unordered(limit)
            .collect()
            .await;
        let mut endpoints = BTreeSet::new();
        {
            let mut answers = lock(&self.answers);
            for (name, result) in resolved {
                match result {
                    Ok(found) => {
                        answers.insert(name.clone(), found);
                    }
                    Err(e) => self.warned.warn("resolve", || {
                        tracing::warn!(
                            "resolving `{name}` failed ({e}): keeping its last answer ({} endpoints)",
                            answers.get(&name).map_or(0, Vec::len)
                        )
                    }),
                }
                endpoints.extend(answers.get(&name).into_iter().flatten().cloned());
            }
        }
        let mut addrs = BTreeSet::new();
        for endpoint in endpoints {
            addrs.extend(self.socket_addrs(&endpoint).await);
        }
        if addrs.len() > self.config.max_endpoints {
            self.warned.warn("too many", || {
                tracing::warn!(
                    "the resolver names {} endpoints; asking the first {} (ResolverRegistryConfig::max_endpoints)",
                    addrs.len(),
                    self.config.max_endpoints
                )
            });
            addrs = addrs.into_iter().take(self.config.max_endpoints).collect();
        }
        addrs
    }

    /// An endpoint's addresses: its IP, or what its host name resolves to, within the probe
    /// timeout.
    async fn socket_addrs(&self, endpoint: &Endpoint) -> Vec<SocketAddr> {
        if let Ok(ip) = endpoint.host.parse::<IpAddr>() {
            return vec![SocketAddr::new(ip, endpoint.port)];
        }
        let lookup = tokio::net::lookup_host((endpoint.host.as_str(), endpoint.port));
        match tokio::time::timeout(self.config.probe_timeout, lookup).await {
            Ok(Ok(found)) => found.collect(),
            Ok(Err(e)) => {
                self.warned.warn("host", || {
                    tracing::warn!("the host of endpoint {endpoint} does not resolve: {e}")
                });
                Vec::new()
            }
            Err(_) => Vec::new(),
        }
    }

    /// What each endpoint said this round: an answer replaces the last one; a failure, or an
    /// endpoint no longer named, counts one more, and `drop_after` of them drop it.
    fn fold(
        &self,
        asked: &BTreeSet<SocketAddr>,
        answers: Vec<(SocketAddr, Result<Described, DescribeError>)>,
    ) {
        let mut peers = lock(&self.peers);
        for (addr, answer) in answers {
            let peer = peers.entry(addr).or_default();
            match answer {
                Ok(described) => {
                    *peer = Peer {
                        described: Some(described),
                        failures: 0,
                    };
                }
                Err(e) => {
                    peer.failures = peer.failures.saturating_add(1);
                    if peer.described.is_some() && peer.failures >= self.config.drop_after {
                        tracing::info!(
                            "{addr} failed {} probes in a row ({e}): calls stop going there",
                            peer.failures
                        );
                        peer.described = None;
                    } else if peer.described.is_none() {
                        self.warned.warn("probe", || {
                            tracing::warn!("endpoint {addr} cannot be described: {e}")
                        });
                    }
                }
            }
        }
        for (addr, peer) in peers.iter_mut() {
            if !asked.contains(addr) {
                peer.failures = peer.failures.saturating_add(1);
                if peer.failures >= self.config.drop_after {
                    peer.described = None;
                }
            }
        }
        // Endpoints neither named nor known are forgotten: the map holds at most what the
        // resolver named in the last `drop_after` rounds.
        peers.retain(|addr, peer| asked.contains(addr) || peer.described.is_some());
    }
}

/// When each kind of WARN was last logged.
#[derive(Debug, Default)]
pub(super) struct Warned {
    last: Mutex<Vec<(&'static str, Instant)>>,
}

impl Warned {
    /// Runs `log` unless a WARN of this kind was logged within [`WARN_EVERY`].
    fn warn(&self, kind: &'static str, log: impl FnOnce()) {
        let now = Instant::now();
        {
            let mut last = lock(&self.last);
            match last.iter_mut().find(|(k, _)| *k == kind) {
                Some((_, at)) if now.duration_since(*at) < WARN_EVERY => return,
                Some((_, at)) => *at = now,
                None => last.push((kind, now)),
            }
        }
        log();
    }
}
