//! `cluster-discovery`: a Eureka-compatible registry server, the `Static` / `Dns` /
//! `Discovery` resolvers, a registrar, and a [`cluster::Registry`] backend on Eureka servers.
//!
//! - [`server`]: the registry server (`cluster-discovery serve`): Eureka's REST routes under
//!   `/eureka/` and `/eureka/v2/`, JSON and XML, leases decided when the registry is read,
//!   self-preservation, peer forwarding, a dashboard behind a token.
//! - [`resolve`]: one [`Resolve`](resolve::Resolve) trait, three answers, chosen by
//!   configuration.
//! - [`client`]: the REST client and the [`Registrar`](client::Registrar).
//! - [`backend`]: [`EurekaRegistry`](backend::EurekaRegistry), so that nodes of a cluster use
//!   Eureka servers as their registry.
//! - [`model`]: Eureka's instance and registry documents, in both formats.
//! - [`gateway`]: HTTP routed by path to a service by name, balanced, `503` when nothing
//!   resolves (`cluster-discovery gateway`).
//! - [`balance`]: the [`Balancer`](balance::Balancer), choosing an instance of a service over any
//!   resolver.
//!
//! See `docs/discovery.md` for which resolver to use when, running servers with peers, and
//! what self-preservation does.
//!
//! ```
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use cluster_discovery::client::{EurekaClient, Registrar};
//! use cluster_discovery::model::Instance;
//! use cluster_discovery::resolve::{Discovery, Resolve};
//! use cluster_discovery::server::{Access, Credentials, Dashboard, RegistryServer, ServerConfig};
//!
//! // A server that starts with nothing to take from a peer answers reads 503 for one renewal
//! // interval while its instances register again after a restart (its warm-up). This one is
//! // new, with nobody to wait for.
//! let mut config = ServerConfig::default();
//! config.warm_up = false;
//! // Writes need the client credentials, replication the peer's (the passwords come from a
//! // file or the environment in production). `Access::open()` would let anyone write.
//! let server = RegistryServer::new()
//!     .config(config)
//!     .access(Access::new(
//!         Credentials::new("app", "app-pw"),
//!         Credentials::new("peer", "peer-pw"),
//!     ))
//!     .dashboard(Dashboard::token("s3cret"))
//!     .start(([127, 0, 0, 1], 0).into())
//!     .await?;
//! // Our clients send the credentials their server URL carries.
//! let client = EurekaClient::new([format!("http://app:app-pw@{}/eureka/", server.addr())]);
//! let mut registrar =
//!     Registrar::new(client.clone(), Instance::new("orders", "127.0.0.1", 8080)).start();
//! registrar.registered(1).await;
//! let orders = Discovery::new(client).resolve("orders").await?;
//! assert_eq!(orders[0].port, 8080);
//! registrar.deregister().await?;
//! server.shutdown().await;
//! # Ok(()) }
//! # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
//! ```
#![deny(missing_docs)]

pub mod backend;
pub mod balance;
pub mod client;
pub mod gateway;
pub mod model;
pub mod resolve;
pub mod server;

// The long-form doc, compiled as a doc test so that its examples keep working.
#[cfg(doctest)]
#[doc = include_str!("../../docs/discovery.md")]
struct DiscoveryDoc;

#[cfg(doctest)]
#[doc = include_str!("../../docs/gateway-calls.md")]
struct GatewayCallsDoc;
