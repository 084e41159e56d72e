//! What a peer that names itself anew on every connection makes a provider keep once the
//! connections are gone (`shares.rs`: admission's count per caller name, looked up when a
//! connection opens). On an `insecure()` node the name is the hello's claim, up to the 16 KiB
//! of a handshake message. Bytes are counted by the allocator, for this whole test binary,
//! so this file holds one test.

use std::alloc::System;
use std::time::Duration;

use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[path = "support/raw_peer.rs"]
mod raw_peer;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Bytes still allocated after `connections` connections, each named anew with a name of
/// `name_len` bytes, opened and closed one after another.
async fn kept_after(
    provider: &cluster::Node,
    tag: char,
    connections: usize,
    name_len: usize,
) -> isize {
    let addr = provider.addr();
    let region = Region::new(GLOBAL);
    for n in 0..connections {
        let mut name = format!("{tag}{n}-");
        name.extend(std::iter::repeat_n(
            'x',
            name_len.saturating_sub(name.len()),
        ));
        drop(raw_peer::named_connection(addr, &name).await);
    }
    // Until the provider has seen every close and dropped every connection.
    let closed = async {
        while !provider
            .render_metrics()
            .unwrap_or_default()
            .contains("cluster_connections{direction=\"in\"} 0")
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), closed)
        .await
        .expect("the provider dropped every closed connection");
    let change = region.change();
    // `bytes_allocated` and `bytes_deallocated` count reallocations' growth and shrinking too.
    change.bytes_allocated as isize - change.bytes_deallocated as isize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_of_closed_connections_are_not_kept_in_bulk() {
    let provider = cluster::Node::builder()
        .name("gate-1")
        .registry(cluster::MemoryRegistry::new())
        .insecure()
        .metrics_insecure(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
        .start()
        .await
        .unwrap();
    // Warm up (the node's first connections allocate what it keeps for any).
    let _ = kept_after(&provider, 'w', 50, 8).await;
    // 2,000 names: under the 2,048 past which `Shares` prunes its map.
    let short = kept_after(&provider, 's', 2000, 8).await;
    let long = kept_after(&provider, 'l', 2000, 16_000).await;
    println!(
        "kept after 2,000 closed connections: {short} B with 8 B names, {long} B with 16 kB names"
    );
    provider.kill().await;
    // 2,000 closed connections of 16 kB names each: were every name kept, 32 MB, as much as
    // the node's whole budget of bytes buffered for peers (`max_buffered_bytes`). A caller's
    // entry goes with its last connection.
    assert!(
        long - short < 4 << 20,
        "a peer gone from every connection left {} bytes more with 16 kB names than with 8 B ones",
        long - short
    );
}
