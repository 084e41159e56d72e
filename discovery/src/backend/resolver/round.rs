//! One refresh round, within one deadline (`round_timeout`, by default the refresh period):
//! resolve every name (a failure keeps its last answer), keep at most `max_endpoints`
//! endpoints, look their host names up (a bounded number at once), ask each address to
//! describe itself (as many at once, each within the probe timeout, the least recently asked
//! first), fold the answers into what each endpoint last said (each held to the bounds of
//! `bounds.rs`; at most `max_endpoints` kept), publish.
//!
//! What the deadline cuts waits for the next round: a name not resolved keeps its last answer;
//! an endpoint not asked, or not answered yet, keeps its state (no failure counted), and those
//! not asked are asked first next time, so many unreachable endpoints do not starve the
//! others; a host name not looked up names no address this round (as one that does not
//! resolve).

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cluster::{DescribeError, Described};
use futures::StreamExt;
use tokio::time::Instant;

use super::bounds::Answer;
use super::{Inner, lock};
use crate::resolve::Endpoint;

/// At most one WARN of each kind per this long: a resolver that fails every round, or an
/// endpoint that never answers, does not flood the log.
const WARN_EVERY: Duration = Duration::from_secs(30);

impl Inner {
    pub(super) async fn refresh(&self) {
        let mut round = self.refreshing.lock().await;
        if self.stopped.load(Ordering::SeqCst) {
            return;
        }
        let Some(describer) = lock(&self.describer).clone() else {
            return;
        };
        *round += 1;
        let deadline = Instant::now() + self.config.round_deadline();
        let named = self.addresses(deadline).await;
        let order = self.least_recently_asked_first(&named);
        let limit = self.config.max_concurrent_probes.max(1);
        let timeout = self.config.probe_timeout;
        // Larger answers would be refused (`bounds.rs`): the peer is told, and sends none.
        let max_answer = self.config.max_answer_bytes();
        // How many probes began: `buffer_unordered` begins them in order, so those are the
        // first of `order`, asked this round even if the deadline cuts them.
        let began = Arc::new(AtomicUsize::new(0));
        let answers: Vec<(SocketAddr, Result<Described, DescribeError>)> =
            futures::stream::iter(order.clone())
                .map(|addr| {
                    let describer = describer.clone();
                    let began = began.clone();
                    async move {
                        began.fetch_add(1, Ordering::Relaxed);
                        let answer = describer.describe_within(addr, timeout, max_answer).await;
                        (addr, answer)
                    }
                })
                .buffer_unordered(limit)
                // A probe still running at the deadline is dropped (its connection with it).
                .take_until(tokio::time::sleep_until(deadline))
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
        if answers.len() < named.len() {
            self.warned.warn("deadline", || {
                tracing::warn!(
                    "the round's deadline ({:?}, ResolverRegistryConfig::round_timeout) came with {} of {} endpoints asked: the others are asked first next round",
                    self.config.round_deadline(),
                    answers.len(),
                    named.len()
                )
            });
        }
        let began = began.load(Ordering::Relaxed).min(order.len());
        self.fold(&named, &order[..began], answers, *round);
        self.publish();
    }

    /// Every endpoint of every name, as addresses: the resolver's answer, or its last one when
    /// it fails or is not in by `deadline`; at most `max_endpoints` of them, capped before any
    /// host name is looked up.
    async fn addresses(&self, deadline: Instant) -> BTreeSet<SocketAddr> {
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
            .take_until(tokio::time::sleep_until(deadline))
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
            }
            // Every name's answer: this round's, or the last one (failed, or cut by the
            // deadline).
            for name in &self.config.services {
                endpoints.extend(answers.get(name).into_iter().flatten().cloned());
            }
        }
        let max = self.config.max_endpoints;
        let named = endpoints.len();
        // Capped before looking up: each lookup may take up to the probe timeout.
        let endpoints: Vec<Endpoint> = endpoints.into_iter().take(max).collect();
        let timeout = self.config.probe_timeout;
        let looked_up: Vec<Result<Vec<SocketAddr>, (Endpoint, std::io::Error)>> =
            futures::stream::iter(endpoints)
                .map(move |endpoint| socket_addrs(endpoint, timeout))
                .buffer_unordered(limit)
                .take_until(tokio::time::sleep_until(deadline))
                .collect()
                .await;
        let mut addrs = BTreeSet::new();
        for found in looked_up {
            match found {
                Ok(found) => addrs.extend(found),
                Err((endpoint, e)) => self.warned.warn("host", || {
                    tracing::warn!("the host of endpoint {endpoint} does not resolve: {e}")
                }),
            }
        }
        if named > max || addrs.len() > max {
            self.warned.warn("too many", || {
                tracing::warn!(
                    "the resolver names {named} endpoints ({} addresses); asking and keeping at most {max} (ResolverRegistryConfig::max_endpoints)",
                    addrs.len(),
                )
            });
            addrs = addrs.into_iter().take(max).collect();
        }
        addrs
    }

    /// `named`, those asked longest ago (or never) first: the endpoints a deadline left unasked
    /// last round are asked before the others this one.
    fn least_recently_asked_first(&self, named: &BTreeSet<SocketAddr>) -> Vec<SocketAddr> {
        let peers = lock(&self.peers);
        let mut order: Vec<(u64, SocketAddr)> = named
            .iter()
            .map(|addr| (peers.get(addr).map_or(0, |p| p.asked), *addr))
            .collect();
        order.sort_unstable();
        order.into_iter().map(|(_, addr)| addr).collect()
    }

    /// What each endpoint said this round: an answer within the bounds replaces the last one;
    /// a failure, an answer over a bound, or an endpoint no longer named, counts one more, and
    /// `drop_after` of them drop it. A named endpoint the deadline left unasked is unchanged.
    /// At most `max_endpoints` are kept: those named longest ago go first.
    fn fold(
        &self,
        named: &BTreeSet<SocketAddr>,
        began: &[SocketAddr],
        answers: Vec<(SocketAddr, Result<Described, DescribeError>)>,
        round: u64,
    ) {
        let mut peers = lock(&self.peers);
        for addr in began {
            peers.entry(*addr).or_default().asked = round;
        }
        for (addr, answer) in answers {
            let peer = peers.entry(addr).or_default();
            let failed = match answer {
                Ok(described) => match Answer::accept(&mut peer.answer, described, &self.config) {
                    Ok(()) => None,
                    Err(over) => {
                        self.warned.warn("bound", || {
                            tracing::warn!(
                                "endpoint {addr} answers with {over}: refused, as a failed probe (ResolverRegistryConfig)"
                            )
                        });
                        Some(over.to_string())
                    }
                },
                Err(e) => {
                    if peer.answer.is_none() {
                        self.warned.warn("probe", || {
                            tracing::warn!("endpoint {addr} cannot be described: {e}")
                        });
                    }
                    Some(e.to_string())
                }
            };
            let Some(why) = failed else {
                peer.failures = 0;
                continue;
            };
            peer.failures = peer.failures.saturating_add(1);
            if peer.answer.is_some() && peer.failures >= self.config.drop_after {
                tracing::info!(
                    "{addr} failed {} probes in a row ({why}): calls stop going there",
                    peer.failures
                );
                peer.answer = None;
            }
        }
        for (addr, peer) in peers.iter_mut() {
            if !named.contains(addr) {
                peer.failures = peer.failures.saturating_add(1);
                if peer.failures >= self.config.drop_after {
                    peer.answer = None;
                }
            }
        }
        // Endpoints neither named nor known are forgotten: the map holds at most what the
        // resolver named in the last `drop_after` rounds.
        peers.retain(|addr, peer| named.contains(addr) || peer.answer.is_some());
        // And at most `max_endpoints` of those: the named ones (no more than that) stay, the
        // others go, those missing from the most answers first. Else a resolver naming other
        // endpoints each round would have `max_endpoints × drop_after` kept.
        let excess = peers.len().saturating_sub(self.config.max_endpoints);
        if excess > 0 {
            let mut unnamed: Vec<(u32, SocketAddr)> = peers
                .iter()
                .filter(|(addr, _)| !named.contains(addr))
                .map(|(addr, peer)| (peer.failures, *addr))
                .collect();
            unnamed.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            for (_, addr) in unnamed.into_iter().take(excess) {
                peers.remove(&addr);
            }
        }
    }
}

/// An endpoint's addresses: its IP, or what its host name resolves to, within the probe
/// timeout (none past it).
async fn socket_addrs(
    endpoint: Endpoint,
    timeout: Duration,
) -> Result<Vec<SocketAddr>, (Endpoint, std::io::Error)> {
    if let Ok(ip) = endpoint.host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, endpoint.port)]);
    }
    let host = endpoint.host.clone();
    let lookup = tokio::net::lookup_host((host.as_str(), endpoint.port));
    match tokio::time::timeout(timeout, lookup).await {
        Ok(Ok(found)) => Ok(found.collect()),
        Ok(Err(e)) => Err((endpoint, e)),
        Err(_) => Ok(Vec::new()),
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
