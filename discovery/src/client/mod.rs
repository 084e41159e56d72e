//! Clients of registry servers: the REST client and the registrar.

mod eureka;
mod registrar;
mod transport;

pub use eureka::{ClientError, DEFAULT_MAX_ANSWER_BYTES, EurekaClient, Heartbeat};
pub use registrar::{Registrar, RegistrarHandle};
pub use transport::{TooLarge, Transport, TransportError};
