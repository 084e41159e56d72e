//! Where the registry lives in etcd's key space, and what each value holds.
//!
//! ```text
//! <prefix>/<cluster>/nodes/<node>            NodeInfo as JSON, on the node's lease
//! <prefix>/<cluster>/services/<node>/<name>  ServiceEntry as JSON, on the node's lease
//! ```
//!
//! A segment has `%` and `/` percent-encoded, so that no node name reaches into another's keys.
//! Values are JSON so that `etcdctl get --prefix /cluster` shows an operator what is there.

use cluster::registry::{NodeInfo, ServiceEntry};

/// The keys of one cluster.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    root: String,
}

/// What a key under the root names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Key {
    Node(String),
    Service { node: String, service: String },
}

impl Keys {
    pub(crate) fn new(prefix: &str, cluster: &str) -> Self {
        Self {
            root: format!("{prefix}/{}/", segment(cluster)),
        }
    }

    /// Every key of the cluster starts with this.
    pub(crate) fn root(&self) -> &str {
        &self.root
    }

    pub(crate) fn node(&self, node: &str) -> String {
        format!("{}nodes/{}", self.root, segment(node))
    }

    pub(crate) fn service(&self, node: &str, service: &str) -> String {
        format!(
            "{}services/{}/{}",
            self.root,
            segment(node),
            segment(service)
        )
    }

    /// The prefix of every service key of `node`.
    pub(crate) fn services_of(&self, node: &str) -> String {
        format!("{}services/{}/", self.root, segment(node))
    }

    /// What `key` names, or `None` for a key that is not the registry's.
    pub(crate) fn parse(&self, key: &[u8]) -> Option<Key> {
        let rest = std::str::from_utf8(key).ok()?.strip_prefix(&self.root)?;
        let parts: Vec<&str> = rest.split('/').collect();
        match parts.as_slice() {
            ["nodes", node] => Some(Key::Node(unsegment(node)?)),
            ["services", node, service] => Some(Key::Service {
                node: unsegment(node)?,
                service: unsegment(service)?,
            }),
            _ => None,
        }
    }
}

fn segment(name: &str) -> String {
    name.replace('%', "%25").replace('/', "%2F")
}

fn unsegment(text: &str) -> Option<String> {
    let name = text.replace("%2F", "/").replace("%25", "%");
    (!name.is_empty() && segment(&name) == text).then_some(name)
}

pub(crate) fn node_value(node: &NodeInfo) -> String {
    serde_json::to_string(node).expect("a NodeInfo serialises")
}

pub(crate) fn entry_value(entry: &ServiceEntry) -> String {
    serde_json::to_string(entry).expect("a ServiceEntry serialises")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_names_with_slashes_stay_in_their_segment() {
        let keys = Keys::new("/cluster", "prod");
        assert_eq!(keys.node("a"), "/cluster/prod/nodes/a");
        for (node, service) in [("a", "search"), ("a/b", "x%2Fy"), ("%", "/")] {
            let key = keys.service(node, service);
            assert_eq!(
                keys.parse(key.as_bytes()),
                Some(Key::Service {
                    node: node.to_owned(),
                    service: service.to_owned()
                }),
                "{key}"
            );
            assert_eq!(
                keys.parse(keys.node(node).as_bytes()),
                Some(Key::Node(node.to_owned()))
            );
        }
        // The services of `a` are not those of `a/b`.
        assert!(!keys.service("a/b", "s").starts_with(&keys.services_of("a")));
        for foreign in [
            "/cluster/prod/nodes/",
            "/cluster/prod/nodes/a/b",
            "/cluster/other/nodes/a",
            "/cluster/prod/services/a",
            "/cluster/prod/nodes/%2",
        ] {
            assert_eq!(keys.parse(foreign.as_bytes()), None, "{foreign}");
        }
        assert_eq!(keys.parse(&[0xff, 0xfe]), None);
    }
}
