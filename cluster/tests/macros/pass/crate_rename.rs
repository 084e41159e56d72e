// `crate = "…"` replaces `::cluster` in every generated path.
#![deny(warnings)]
extern crate cluster as my_cluster;

#[my_cluster::service(name = "renamed", version = "0.3.0", crate = "my_cluster")]
pub trait Renamed {
    async fn ping(&self) -> u32;
}

/// The runtime reached through a module of the user's crate.
mod rt {
    pub use my_cluster::__private;
}

#[my_cluster::service(name = "relocated", version = "0.3.0", crate = "crate::rt")]
pub trait Relocated {
    async fn ping(&self);
}

struct Provider;

impl Renamed for Provider {
    async fn ping(&self) -> u32 {
        1
    }
}

impl Relocated for Provider {
    async fn ping(&self) {}
}

fn build(node: &my_cluster::__private::Node) {
    let _call = RenamedClient::new(node).ping();
    let _call = RelocatedClient::new(node).ping();
}

fn main() {
    let _ = build;
    let _server = RenamedServer::new(Provider);
    let _server = RelocatedServer::new(Provider);
}
