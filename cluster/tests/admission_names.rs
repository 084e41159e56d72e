//! What a peer that names itself anew on every connection makes a provider keep once the
//! connections are gone (`shares.rs`: admission's count per caller name, looked up when a
//! connection opens). On an `insecure()` node the name is the hello's claim, up to the 16 KiB
//! of a handshake message. Bytes are counted by the allocator, for this whole test binary,
//! so this file holds one test.

use std::alloc::System;
use std::time::Duration;

use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Opens a plaintext connection whose hello names `node`, waits for its welcome, closes it.
async fn named_connection(addr: std::net::SocketAddr, node: &str) {
    fn string(out: &mut Vec<u8>, s: &str) {
        if s.len() < 32 {
            out.push(0xa0 | s.len() as u8);
        } else {
            out.push(0xda);
            out.extend((s.len() as u16).to_be_bytes());
        }
        out.extend_from_slice(s.as_bytes());
    }
    // `Hello` as MessagePack with named fields (docs/wire.md).
    let mut hello = vec![0x84];
    string(&mut hello, "versions");
    hello.extend([0x92, 2, 2]);
    string(&mut hello, "features");
    hello.push(0x90);
    string(&mut hello, "node");
    string(&mut hello, node);
    string(&mut hello, "max_frame");
    hello.push(0xce);
    hello.extend((8u32 << 20).to_be_bytes());
    assert!(hello.len() <= 16 << 10);
    let mut out = b"cluster\0".to_vec();
    out.extend((hello.len() as u32).to_be_bytes());
    out.extend(hello);
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(&out).await.unwrap();
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await.unwrap();
    let mut welcome = vec![0; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut welcome).await.unwrap();
    assert!(
        welcome.windows(9).any(|w| w == b"\xa7version\x02"),
        "not welcomed: {}",
        String::from_utf8_lossy(&welcome)
    );
}

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
        named_connection(addr, &name).await;
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
