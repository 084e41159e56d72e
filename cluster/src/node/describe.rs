//! Asking a peer which node it is and what it serves (`server/describe.rs` answers): how a
//! registry backend with no registry server learns providers from the providers themselves.

use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::{Node, NodeInner};
use crate::server::describe::{FUNCTION, SERVICE};
use crate::service::{Encoded, decode};
use crate::transport::{Head, Reply, Request, TransportError};

pub use crate::server::describe::Described;

/// A peer could not be described.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DescribeError {
    /// Nothing answered in time, or the connection failed or was refused (TLS, wire version).
    Unreachable {
        /// Where it was asked.
        addr: SocketAddr,
        /// Why.
        why: String,
    },
    /// The peer answered something other than a description (a refusal, a reply too large for
    /// the frame limit, bytes that do not decode).
    BadAnswer {
        /// Where it was asked.
        addr: SocketAddr,
        /// Why.
        why: String,
    },
    /// The peer's description names another node than its connection proved (its certificate
    /// under TLS, its handshake in plaintext): it is not believed.
    WrongPeer {
        /// Where it was asked.
        addr: SocketAddr,
        /// The name in its answer.
        claimed: String,
        /// The name its connection proved.
        proved: String,
    },
    /// The node that would ask has stopped.
    Stopped,
}

impl std::fmt::Display for DescribeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unreachable { addr, why } => write!(f, "{addr} did not answer: {why}"),
            Self::BadAnswer { addr, why } => write!(f, "{addr} gave no description: {why}"),
            Self::WrongPeer {
                addr,
                claimed,
                proved,
            } => write!(
                f,
                "{addr} says it is node `{claimed}`, but its connection is of node `{proved}`"
            ),
            Self::Stopped => write!(f, "the node has stopped"),
        }
    }
}

impl std::error::Error for DescribeError {}

/// Describes peers on behalf of a node without keeping it alive (a registry backend holds
/// one; the node holds the backend). Cheap to clone.
#[derive(Clone)]
pub struct Describer {
    node: Weak<NodeInner>,
}

impl std::fmt::Debug for Describer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Describer")
            .field("alive", &(self.node.strong_count() > 0))
            .finish()
    }
}

impl Node {
    /// Asks the node at `addr` which node it is and what it serves, within `timeout`, over an
    /// authenticated connection of its own (mutual TLS on a secure node). The node's name is
    /// the one its connection proved: under TLS its certificate's, so that whoever said it is
    /// at `addr` (a DNS answer) cannot make it pose as another node. Its address in the answer
    /// is `addr`, where it was reached. The answer is at most this node's frame limit.
    pub async fn describe_peer(
        &self,
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<Described, DescribeError> {
        describe(&self.inner, addr, timeout, usize::MAX).await
    }

    /// A handle that describes peers for this node, without keeping the node alive.
    pub fn describer(&self) -> Describer {
        Describer {
            node: Arc::downgrade(&self.inner),
        }
    }
}

impl Describer {
    /// [`Node::describe_peer`], or [`DescribeError::Stopped`] once the node is gone or stopped.
    pub async fn describe(
        &self,
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<Described, DescribeError> {
        self.describe_within(addr, timeout, usize::MAX).await
    }

    /// [`describe`](Self::describe), with an answer of at most `max_bytes` (and at most this
    /// node's frame limit): the peer answers `TooLarge` instead of sending more, so a caller
    /// that would refuse a large answer anyway does not read and decode it first.
    pub async fn describe_within(
        &self,
        addr: SocketAddr,
        timeout: Duration,
        max_bytes: usize,
    ) -> Result<Described, DescribeError> {
        let Some(node) = self.node.upgrade() else {
            return Err(DescribeError::Stopped);
        };
        describe(&node, addr, timeout, max_bytes).await
    }
}

async fn describe(
    node: &NodeInner,
    addr: SocketAddr,
    timeout: Duration,
    max_bytes: usize,
) -> Result<Described, DescribeError> {
    if node.stopped.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(DescribeError::Stopped);
    }
    let head = Head {
        caller: Some(node.name.clone()),
        request_id: node.next_request_id(),
        reply_limit: Some(
            node.max_frame
                .saturating_sub(crate::transport::ENVELOPE_OVERHEAD)
                .min(max_bytes) as u64,
        ),
        ..Head::default()
    };
    let request = Arc::new(Request {
        service: SERVICE.into(),
        function: FUNCTION.into(),
        signature: 0,
        args: Encoded::new(),
        head,
        attempt: 1.into(),
    });
    let deadline = Instant::now() + timeout.min(crate::transport::tcp::MAX_DEADLINE);
    let unreachable = |why: String| DescribeError::Unreachable { addr, why };
    let bad = |why: String| DescribeError::BadAnswer { addr, why };
    let (proved, reply) = node
        .connector
        .ask_unnamed(addr, request, deadline)
        .await
        .map_err(|e| {
            unreachable(match e {
                TransportError::Timeout => format!("no answer within {timeout:?}"),
                TransportError::NotSent(why)
                | TransportError::NoAnswer(why)
                | TransportError::Busy(why)
                | TransportError::Queued(why)
                | TransportError::Lost(why)
                | TransportError::WireVersion(why)
                | TransportError::Untrusted(why)
                | TransportError::WrongPeer(why) => why,
            })
        })?;
    let reply = match reply {
        Reply::Recalled(reply) => std::sync::Arc::unwrap_or_clone(reply),
        reply => reply,
    };
    let bytes = match reply {
        Reply::Done(bytes) => bytes,
        Reply::Refused(code, why) => {
            return Err(bad(format!("refused (code {code}): {why}")));
        }
        Reply::TooLarge(why)
        | Reply::Undeliverable(why)
        | Reply::Panicked(why)
        | Reply::Interrupted(why) => {
            return Err(bad(why));
        }
        Reply::Expired | Reply::Recalled(_) => {
            return Err(unreachable(format!("no answer within {timeout:?}")));
        }
    };
    let mut described: Described =
        decode(&bytes).map_err(|e| bad(format!("the answer does not decode: {e}")))?;
    if let Some(proved) = proved
        && proved != described.node.name
    {
        return Err(DescribeError::WrongPeer {
            addr,
            claimed: described.node.name,
            proved,
        });
    }
    described.node.addr = addr;
    Ok(described)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::CallOptions;
    use crate::server::{DispatchFuture, Provide, dispatch_with};
    use crate::service::{FunctionDescription, ServiceDescription};
    use crate::{MemoryNetwork, MemoryRegistry};

    struct Echo;

    impl Provide for Echo {
        fn description(&self) -> &'static ServiceDescription {
            static DESCRIPTION: std::sync::OnceLock<ServiceDescription> =
                std::sync::OnceLock::new();
            DESCRIPTION.get_or_init(|| {
                let echo = FunctionDescription::new(
                    "echo",
                    "echo(u32) -> u32",
                    true,
                    CallOptions::default(),
                );
                ServiceDescription::new(
                    "echo",
                    semver::Version::new(1, 4, 0),
                    None,
                    CallOptions::default(),
                    vec![echo],
                )
            })
        }

        fn dispatch(&self, _: usize, args: &[u8]) -> DispatchFuture {
            dispatch_with(args, |(n,): (u32,)| async move { n })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_describes_what_it_registered_and_nothing_once_withdrawn() {
        let network = MemoryNetwork::new();
        let start = |name: &str| {
            Node::builder()
                .name(name)
                .memory(&network)
                .registry(MemoryRegistry::new())
                .start()
        };
        let (provider, asker) = (
            start("echo-1").await.unwrap(),
            start("web-1").await.unwrap(),
        );
        let registration = provider.serve(Echo).await.unwrap();
        let timeout = Duration::from_secs(1);

        let described = asker.describe_peer(provider.addr(), timeout).await.unwrap();
        assert_eq!(described.node.name, "echo-1");
        assert_eq!(described.node.generation, provider.info().generation);
        assert!(!described.draining);
        let names: Vec<_> = described.services.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["echo"]);
        assert_eq!(described.services[0].version, semver::Version::new(1, 4, 0));

        registration.deregister().await.unwrap();
        let described = asker.describe_peer(provider.addr(), timeout).await.unwrap();
        assert!(described.services.is_empty());

        let _served = provider.serve(Echo).await.unwrap();
        provider.inner.dispatcher.admission.drain();
        let described = asker.describe_peer(provider.addr(), timeout).await.unwrap();
        assert!(described.draining && described.services.is_empty());

        let nobody = std::net::SocketAddr::from(([127, 0, 0, 1], 60999));
        let missing = asker.describe_peer(nobody, timeout).await;
        assert!(
            matches!(missing, Err(DescribeError::Unreachable { .. })),
            "{missing:?}"
        );
        asker.kill().await;
        let stopped = asker.describe_peer(provider.addr(), timeout).await;
        assert_eq!(stopped, Err(DescribeError::Stopped));
    }
}
