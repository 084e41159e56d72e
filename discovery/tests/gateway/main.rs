//! The gateway on real loopback sockets: plain hyper upstreams (`support.rs`) behind it,
//! resolved by `Static` or by `Discovery` over our registry server.

mod binary;
mod failures;
mod functions;
mod limits;
mod pool;
mod registry;
mod routing;
mod streams;
mod support;
mod tls;
mod websocket;
