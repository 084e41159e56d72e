//! What one describe answer may bring into the registry, and its entries kept across rounds.
//!
//! The frame limit (8 MiB) bounds an answer's bytes, not what it costs once decoded, cloned
//! into entries and compared every round: one provider declaring 150,000 functions fits in a
//! frame. So an answer is also held to a number of services, a number of functions per service
//! and an encoded size per description (compact JSON, as the gossip backend's
//! `max_entry_bytes` measures it); one over any of them is refused whole. An answer equal to
//! the one kept is not checked or converted again: its entries (the same `Arc`s) are reused,
//! so a steady state publishes the same entries and the local copy finds no change cheaply.

use std::fmt;
use std::sync::Arc;

use cluster::Described;
use cluster::ServiceDescription;
use cluster::registry::{NodeInfo, ServiceEntry};

use super::ResolverRegistryConfig;

/// What an endpoint said, accepted: as it said it (to compare the next answer with) and as
/// the entries published for it.
#[derive(Debug)]
pub(super) struct Answer {
    pub(super) node: NodeInfo,
    pub(super) draining: bool,
    failing: Vec<String>,
    services: Vec<Arc<ServiceDescription>>,
    pub(super) entries: Vec<Arc<ServiceEntry>>,
}

impl Answer {
    /// Keeps `described` in `kept`: nothing is done when it says what `kept` says (nothing
    /// checked, cloned or allocated: the same entries are published); else it is checked
    /// against the bounds and converted. Over a bound, `kept` is left as it was.
    pub(super) fn accept(
        kept: &mut Option<Answer>,
        described: Described,
        config: &ResolverRegistryConfig,
    ) -> Result<(), Exceeded> {
        if kept.as_ref().is_some_and(|k| k.is(&described)) {
            return Ok(());
        }
        check(&described, config)?;
        let services: Vec<Arc<ServiceDescription>> =
            described.services.into_iter().map(Arc::new).collect();
        let entries = services
            .iter()
            .map(|s| {
                let failing = described.failing.contains(&s.name);
                let entry = ServiceEntry::new(described.node.clone(), s.clone());
                Arc::new(entry.with_failing(failing))
            })
            .collect();
        *kept = Some(Answer {
            node: described.node,
            draining: described.draining,
            failing: described.failing,
            services,
            entries,
        });
        Ok(())
    }

    /// Whether `described` says what this answer said. Stops at the first difference: an
    /// oversized answer differs from a kept (bounded) one in its lengths.
    fn is(&self, described: &Described) -> bool {
        self.node == described.node
            && self.draining == described.draining
            && self.failing == described.failing
            && self.services.len() == described.services.len()
            && self
                .services
                .iter()
                .zip(&described.services)
                .all(|(kept, new)| **kept == *new)
    }
}

/// The bound an answer is over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Exceeded {
    Services {
        count: usize,
        limit: usize,
    },
    Functions {
        service: String,
        count: usize,
        limit: usize,
    },
    Bytes {
        service: String,
        size: usize,
        limit: usize,
    },
}

impl fmt::Display for Exceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exceeded::Services { count, limit } => {
                write!(f, "{count} services, over max_services_per_node ({limit})")
            }
            Exceeded::Functions {
                service,
                count,
                limit,
            } => write!(
                f,
                "service `{service}` has {count} functions, over max_functions_per_service ({limit})"
            ),
            Exceeded::Bytes {
                service,
                size,
                limit,
            } => write!(
                f,
                "service `{service}` is {size} bytes encoded (or more), over max_description_bytes ({limit})"
            ),
        }
    }
}

/// The counts first (no encoding: an answer of 150,000 functions is refused by a length),
/// then each description's encoded size, counted without being kept.
fn check(described: &Described, config: &ResolverRegistryConfig) -> Result<(), Exceeded> {
    let services = &described.services;
    if services.len() > config.max_services_per_node {
        return Err(Exceeded::Services {
            count: services.len(),
            limit: config.max_services_per_node,
        });
    }
    if let Some(s) = services
        .iter()
        .find(|s| s.functions.len() > config.max_functions_per_service)
    {
        return Err(Exceeded::Functions {
            service: s.name.clone(),
            count: s.functions.len(),
            limit: config.max_functions_per_service,
        });
    }
    for s in services {
        let size = encoded_size(s, config.max_description_bytes);
        if size > config.max_description_bytes {
            return Err(Exceeded::Bytes {
                service: s.name.clone(),
                size,
                limit: config.max_description_bytes,
            });
        }
    }
    Ok(())
}

/// The description's length as compact JSON, or a figure past `limit` once it is known to be
/// over (the encoding stops there).
fn encoded_size(description: &ServiceDescription, limit: usize) -> usize {
    let mut counter = Counter { size: 0, limit };
    match serde_json::to_writer(&mut counter, description) {
        Ok(()) => counter.size,
        // Either the counter stopped it (over the limit), or it does not encode at all: a
        // description that cannot be measured is not taken either.
        Err(_) => counter.size.max(limit.saturating_add(1)),
    }
}

/// Counts bytes, and fails past `limit` so that an oversized description is not encoded whole.
struct Counter {
    size: usize,
    limit: usize,
}

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.size = self.size.saturating_add(buf.len());
        if self.size > self.limit {
            return Err(std::io::Error::other("over the limit"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use cluster::{CallOptions, FunctionDescription};

    use super::*;

    fn described(functions: usize, signature_bytes: usize) -> Described {
        let functions = (0..functions)
            .map(|i| {
                let signature = format!("f{i}({})", "u".repeat(signature_bytes));
                FunctionDescription::new(&format!("f{i}"), &signature, true, CallOptions::default())
            })
            .collect();
        let service = ServiceDescription::new(
            "greet",
            cluster::service::version(1, 0, 0, "", ""),
            None,
            CallOptions::default(),
            functions,
        );
        let node = NodeInfo::new("greet-a", SocketAddr::from(([127, 0, 0, 1], 7000)), 1);
        // `Described` is non-exhaustive and has no constructor: built as a node's answer is.
        let answer = serde_json::json!({ "node": node, "services": [service] });
        serde_json::from_value(answer).expect("an answer")
    }

    #[test]
    fn an_unchanged_answer_keeps_its_entries_and_a_changed_one_is_new() {
        let config = ResolverRegistryConfig::default();
        let mut kept = None;
        Answer::accept(&mut kept, described(3, 1), &config).expect("within the bounds");
        let first = kept.as_ref().expect("kept").entries[0].clone();
        Answer::accept(&mut kept, described(3, 1), &config).expect("within the bounds");
        assert!(Arc::ptr_eq(
            &first,
            &kept.as_ref().expect("kept").entries[0]
        ));
        Answer::accept(&mut kept, described(4, 1), &config).expect("within the bounds");
        assert!(!Arc::ptr_eq(
            &first,
            &kept.as_ref().expect("kept").entries[0]
        ));
    }

    #[test]
    fn each_bound_refuses_and_leaves_what_was_kept() {
        let config = ResolverRegistryConfig::default()
            .max_services_per_node(1)
            .max_functions_per_service(10)
            .max_description_bytes(1024);
        let mut kept = None;
        Answer::accept(&mut kept, described(2, 1), &config).expect("within the bounds");
        let over = Answer::accept(&mut kept, described(11, 1), &config);
        assert!(
            matches!(
                over,
                Err(Exceeded::Functions {
                    count: 11,
                    limit: 10,
                    ..
                })
            ),
            "{over:?}"
        );
        let over = Answer::accept(&mut kept, described(2, 2048), &config);
        assert!(
            matches!(over, Err(Exceeded::Bytes { size, limit: 1024, .. }) if size > 1024),
            "{over:?}"
        );
        let mut two = described(1, 1);
        two.services.push(two.services[0].clone());
        let over = Answer::accept(&mut kept, two, &config);
        assert_eq!(over, Err(Exceeded::Services { count: 2, limit: 1 }));
        assert_eq!(
            kept.expect("kept").entries[0].description.functions.len(),
            2
        );
    }

    #[test]
    fn the_size_is_the_gossip_backends_and_counting_stops_past_the_limit() {
        let service = &described(5, 10).services[0];
        let json = serde_json::to_string(service).expect("encodes");
        assert_eq!(encoded_size(service, usize::MAX), json.len());
        let past = encoded_size(service, 100);
        assert!(past > 100 && past < json.len(), "{past} of {}", json.len());
    }
}
