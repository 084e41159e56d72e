// Zero- and one-argument functions without a return type, in a private trait: the generated
// items must not warn when only part of them is used.
#![deny(warnings, missing_docs)]
//! Checks that generated items are documented.

#[cluster::service(name = "bell", version = "1.0.0")]
trait Bell {
    async fn ring(&self);
    async fn ring_times(&self, times: u32);
}

/// An empty service is allowed and compiles without warnings.
#[cluster::service(name = "empty", version = "1.0.0")]
pub trait Empty {}

struct Quiet;

impl Bell for Quiet {
    async fn ring(&self) {}

    async fn ring_times(&self, _times: u32) {}
}

fn main() {
    let _server = BellServer::new(Quiet);
    let _ = EmptyClient::description();
}
