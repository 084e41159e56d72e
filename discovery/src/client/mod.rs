//! Clients of registry servers: the REST client and the registrar.

mod eureka;
mod registrar;
mod transport;

pub use eureka::{ClientError, EurekaClient, Heartbeat};
pub use registrar::{Registrar, RegistrarHandle};
pub use transport::{Transport, TransportError};
