//! The node's own metrics, read from what the node keeps anyway when they are rendered (and at
//! each upkeep): nothing on the gossip loop or the connection paths counts for them.

use metrics::{Counter, Gauge};

use super::{Sink, names};
use crate::registry::GossipTraffic;

/// What the node's state says now.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sampled {
    pub(crate) ejections: u64,
    pub(crate) connections_in: usize,
    pub(crate) connections_out: usize,
    pub(crate) registry_nodes: usize,
    pub(crate) registry_services: usize,
    pub(crate) registry_entries: usize,
    /// Node up, node down, service up, service down: since the copy was made.
    pub(crate) registry_events: [u64; 4],
    /// `None` unless the registry is a gossip one.
    pub(crate) gossip: Option<GossipTraffic>,
}

/// The node's own handles.
pub(crate) struct NodeMeters {
    ejections: Counter,
    connections: [Gauge; 2],
    registry: [Gauge; 3],
    events: [Counter; 4],
    gossip: [Counter; 4],
    forged: Counter,
    deferred: Counter,
}

impl NodeMeters {
    pub(crate) fn new(sink: &Sink) -> Self {
        let direction = |d| [("direction", d)];
        let kind = |k| [("kind", k)];
        Self {
            ejections: sink.counter(&names::EJECTIONS, &[]),
            connections: [
                sink.gauge(&names::CONNECTIONS, &direction("in")),
                sink.gauge(&names::CONNECTIONS, &direction("out")),
            ],
            registry: [
                sink.gauge(&names::REGISTRY_NODES, &[]),
                sink.gauge(&names::REGISTRY_SERVICES, &[]),
                sink.gauge(&names::REGISTRY_ENTRIES, &[]),
            ],
            events: [
                sink.counter(&names::REGISTRY_EVENTS, &kind("node_up")),
                sink.counter(&names::REGISTRY_EVENTS, &kind("node_down")),
                sink.counter(&names::REGISTRY_EVENTS, &kind("service_up")),
                sink.counter(&names::REGISTRY_EVENTS, &kind("service_down")),
            ],
            gossip: [
                sink.counter(&names::GOSSIP_BYTES, &direction("sent")),
                sink.counter(&names::GOSSIP_BYTES, &direction("received")),
                sink.counter(&names::GOSSIP_DATAGRAMS, &direction("sent")),
                sink.counter(&names::GOSSIP_DATAGRAMS, &direction("received")),
            ],
            forged: sink.counter(&names::GOSSIP_FORGED, &[]),
            deferred: sink.counter(&names::GOSSIP_DEFERRED, &[]),
        }
    }

    /// Writes what was sampled into the handles.
    pub(crate) fn write(&self, s: &Sampled) {
        self.ejections.absolute(s.ejections);
        self.connections[0].set(s.connections_in as f64);
        self.connections[1].set(s.connections_out as f64);
        self.registry[0].set(s.registry_nodes as f64);
        self.registry[1].set(s.registry_services as f64);
        self.registry[2].set(s.registry_entries as f64);
        for (counter, count) in self.events.iter().zip(s.registry_events) {
            counter.absolute(count);
        }
        if let Some(t) = s.gossip {
            let counts = [
                t.sent_bytes,
                t.received_bytes,
                t.sent_datagrams,
                t.received_datagrams,
            ];
            for (counter, count) in self.gossip.iter().zip(counts) {
                counter.absolute(count);
            }
            self.forged.absolute(t.forged_updates);
            self.deferred.absolute(t.deferred_updates);
        }
    }
}
