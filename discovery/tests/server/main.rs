//! The registry server: routes and shapes, leases, bad input, peers, the dashboard, the binary's
//! command line.
#![allow(unreachable_pub)]

#[path = "../support/mod.rs"]
mod support;

mod bad_input;
mod cache;
mod command_line;
mod connections;
mod dashboard;
mod leases;
mod limits;
mod logging;
mod peers;
mod routes;
mod security;

/// A `cluster-discovery` process started by a test, killed when the test ends however it ends.
pub struct Server(pub std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (on real time, for real sockets) until `f` holds; 10 s is only reached when broken.
pub async fn until<F, Fut>(what: &str, f: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !f().await {
        assert!(
            std::time::Instant::now() < give_up,
            "gave up waiting until {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
