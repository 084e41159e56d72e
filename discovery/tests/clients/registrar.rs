//! The registrar registers, heartbeats, registers again on a 404, and deregisters; on tokio's
//! paused clock against an in-process server.

use std::time::Duration;

use cluster_discovery::client::{EurekaClient, Registrar};
use cluster_discovery::model::Instance;
use cluster_discovery::server::{Clock, RegistryServer};

#[tokio::test(start_paused = true)]
async fn registers_heartbeats_re_registers_on_404_and_deregisters() {
    let server = RegistryServer::new().clock(Clock::tokio()).service();
    let client = EurekaClient::in_process(server.clone());
    let instance = Instance::new("orders", "127.0.0.1", 8080)
        .with_id("o-1")
        .lease(10, 30)
        .meta("zone", "a");
    let mut handle = Registrar::new(client.clone(), instance).start();
    handle.registered(1).await;
    assert_eq!(server.health().instances, 1);

    // Heartbeats keep it alive well past its lease duration.
    tokio::time::sleep(Duration::from_secs(95)).await;
    assert_eq!(server.health().instances, 1);
    assert_eq!(handle.registrations(), 1);
    assert!(server.health().renewals >= 9);

    // The server forgets it (a restart): the next heartbeat gets 404 and it registers again.
    assert!(client.cancel("ORDERS", "o-1").await.unwrap());
    assert_eq!(server.health().instances, 0);
    handle.registered(2).await;
    assert_eq!(server.health().instances, 1);

    handle.deregister().await.unwrap();
    assert_eq!(server.health().instances, 0);
    let apps = client.applications().await.unwrap();
    assert_eq!(apps.instances().count(), 0);
}
