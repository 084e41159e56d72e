//! A peer that speaks the handshake by hand, naming itself as it likes (`docs/wire.md`).
#![allow(dead_code, unreachable_pub)]

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Opens a plaintext connection whose hello names `node` (at most 64 KiB), and waits for its
/// welcome to wire version 2.
pub async fn named_connection(addr: std::net::SocketAddr, node: &str) -> tokio::net::TcpStream {
    fn string(out: &mut Vec<u8>, s: &str) {
        match s.len() {
            len @ 0..32 => out.push(0xa0 | len as u8),
            len @ 32..256 => out.extend([0xd9, len as u8]),
            len => {
                out.push(0xda);
                out.extend(
                    u16::try_from(len)
                        .expect("a name of at most 64 KiB")
                        .to_be_bytes(),
                );
            }
        }
        out.extend_from_slice(s.as_bytes());
    }
    // `Hello` as MessagePack with named fields.
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
    let mut out = b"cluster\0".to_vec();
    out.extend((hello.len() as u32).to_be_bytes());
    out.extend(hello);
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(&out).await.unwrap();
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await.unwrap();
    let mut welcome = vec![0; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut welcome).await.unwrap();
    let agreed = welcome.windows(9).any(|w| w == b"\xa7version\x02");
    assert!(
        agreed,
        "not welcomed: {}",
        String::from_utf8_lossy(&welcome)
    );
    stream
}
