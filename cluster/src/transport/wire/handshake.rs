//! The handshake that opens a connection of wire version 2 or later, before the first call:
//!
//! 1. the client writes [`MAGIC`], then a length-prefixed [`Hello`]: the wire versions it
//!    speaks, its features, its name and its frame limit;
//! 2. the provider answers with a [`Welcome`]: the highest version both speak and the features
//!    both support, or a refusal that says why, and closes;
//! 3. both switch to the envelope's frames ([`super::envelope`]) in the agreed version.
//!
//! Hello and Welcome are MessagePack maps with named fields: a later build adds a field and an
//! older one skips it. A connection that does not open with the magic is a first-release peer
//! (wire 1, no handshake); its first four bytes are handed back to its frame reader. The magic's
//! first four bytes, read as a wire 1 frame length, are over 1 GiB, which no frame limit allows,
//! so the two cannot be confused.

use std::io;
use std::ops::RangeInclusive;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The first bytes of every handshake.
pub(crate) const MAGIC: [u8; 8] = *b"cluster\0";

/// The largest hello or welcome either side reads.
const MAX_MESSAGE: usize = 16 << 10;

/// How deep a hello or a welcome may nest.
const MAX_DEPTH: usize = 16;

/// The features this build supports, agreed in every handshake so that a later build can add
/// one without a new wire version: `heartbeat` (`transport/tcp/heartbeat.rs`).
pub(crate) const FEATURES: &[&str] = &[crate::transport::tcp::HEARTBEAT];

/// What a client says first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Hello {
    /// The lowest and highest wire versions it speaks.
    pub(crate) versions: (u32, u32),
    /// The features it supports.
    pub(crate) features: Vec<String>,
    /// Its node's name.
    pub(crate) node: String,
    /// The largest frame it reads.
    pub(crate) max_frame: u64,
}

/// What a provider answers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Welcome {
    /// The agreed version; 0 when refused.
    pub(crate) version: u32,
    /// The features both support.
    pub(crate) features: Vec<String>,
    /// The provider's node name.
    pub(crate) node: String,
    /// The largest frame it reads.
    pub(crate) max_frame: u64,
    /// Why it refused, if it did.
    pub(crate) refusal: Option<String>,
    /// Refused because the provider takes only mutual TLS and the caller spoke plaintext.
    pub(crate) needs_tls: bool,
    /// Refused because the provider holds all the connections it may, and the caller its
    /// share of them: nothing was sent, and another provider may take the call.
    pub(crate) busy: bool,
    /// After how long with nothing in flight the provider closes the connection, in ms; 0
    /// from a build that does not say. The caller closes it sooner.
    pub(crate) idle_timeout_ms: u64,
}

/// How a connection opened, on the provider's side.
pub(crate) enum Opening {
    /// With a handshake.
    Hello(Hello),
    /// Without: a wire 1 peer, whose first frame begins with these bytes.
    Legacy([u8; 4]),
}

/// The provider's answer to `hello`, given what it speaks.
pub(crate) fn welcome(
    hello: &Hello,
    versions: &RangeInclusive<u32>,
    node: &str,
    max_frame: u64,
) -> Welcome {
    let theirs = hello.versions.0..=hello.versions.1;
    // A handshake opens wire 2 or later; wire 1 has none.
    let versions = &((*versions.start()).max(2)..=*versions.end());
    let features = hello
        .features
        .iter()
        .filter(|f| FEATURES.contains(&f.as_str()))
        .cloned()
        .collect();
    match super::common(versions, &theirs) {
        Some(version) => Welcome {
            version,
            features,
            node: node.to_owned(),
            max_frame,
            refusal: None,
            needs_tls: false,
            busy: false,
            idle_timeout_ms: 0,
        },
        None => refusal(
            node,
            max_frame,
            format!(
                "node {node} speaks wire versions {}..={}, the caller {}..={}",
                versions.start(),
                versions.end(),
                hello.versions.0,
                hello.versions.1
            ),
        ),
    }
}

/// A refusal that says `why`.
pub(crate) fn refusal(node: &str, max_frame: u64, why: String) -> Welcome {
    Welcome {
        node: node.to_owned(),
        max_frame,
        refusal: Some(why),
        ..Welcome::default()
    }
}

/// The client's side: says hello, reads the welcome.
pub(crate) async fn offer<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut S,
    hello: &Hello,
) -> io::Result<Welcome> {
    let mut out = MAGIC.to_vec();
    append(&mut out, hello)?;
    io.write_all(&out).await?;
    io.flush().await?;
    read(io).await
}

/// The provider's side: reads how the connection opens.
pub(crate) async fn open<S: AsyncRead + Unpin>(io: &mut S) -> io::Result<Opening> {
    let mut first = [0u8; 4];
    io.read_exact(&mut first).await?;
    if first != MAGIC[..4] {
        return Ok(Opening::Legacy(first));
    }
    let mut rest = [0u8; 4];
    io.read_exact(&mut rest).await?;
    if rest != MAGIC[4..] {
        return Err(invalid("the connection opened with a damaged handshake"));
    }
    read(io).await.map(Opening::Hello)
}

/// The provider's side: answers.
pub(crate) async fn answer<S: AsyncWrite + Unpin>(io: &mut S, welcome: &Welcome) -> io::Result<()> {
    let mut out = Vec::new();
    append(&mut out, welcome)?;
    io.write_all(&out).await?;
    io.flush().await
}

fn append<T: Serialize>(out: &mut Vec<u8>, message: &T) -> io::Result<()> {
    let body = rmp_serde::to_vec_named(message).map_err(|e| invalid(&e.to_string()))?;
    let len = u32::try_from(body.len()).map_err(|_| invalid("a handshake message too large"))?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&body);
    Ok(())
}

async fn read<S: AsyncRead + Unpin, T: for<'de> Deserialize<'de>>(io: &mut S) -> io::Result<T> {
    let mut len = [0u8; 4];
    io.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_MESSAGE {
        return Err(invalid(&format!(
            "a handshake message of {len} bytes, more than {MAX_MESSAGE}"
        )));
    }
    let mut body = vec![0u8; len];
    io.read_exact(&mut body).await?;
    // Nothing in a hello or a welcome nests deeply; a later build's fields, skipped, may nest
    // a little. The bound keeps a plaintext kilobyte from overflowing the stack.
    crate::service::decode_within(&body, MAX_DEPTH)
        .map_err(|e| invalid(&format!("an unreadable handshake: {e}")))
}

fn invalid(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_highest_common_version_is_agreed_or_the_refusal_says_why() {
        let hello = Hello {
            versions: (2, 5),
            features: vec!["compression".into()],
            node: "web-1".into(),
            max_frame: 1 << 20,
        };
        let agreed = welcome(&hello, &(1..=3), "search-1", 8 << 20);
        assert_eq!((agreed.version, agreed.refusal), (3, None));
        assert!(
            agreed.features.is_empty(),
            "an unknown feature is not agreed"
        );
        let refused = welcome(&hello, &(1..=1), "search-1", 8 << 20);
        assert_eq!(refused.version, 0);
        assert!(refused.refusal.unwrap().contains("2..=1"));
        let old = Hello {
            versions: (1, 1),
            ..hello
        };
        assert_eq!(
            welcome(&old, &(1..=2), "search-1", 8 << 20).version,
            0,
            "wire 1 is never agreed in a handshake"
        );
    }

    #[tokio::test]
    async fn a_hello_from_a_later_build_is_read_and_a_legacy_opening_recognised() {
        #[derive(Serialize)]
        struct LaterHello {
            versions: (u32, u32),
            node: String,
            colour: String,
        }
        let mut bytes = MAGIC.to_vec();
        let later = LaterHello {
            versions: (2, 9),
            node: "n".into(),
            colour: "blue".into(),
        };
        append(&mut bytes, &later).unwrap();
        let Opening::Hello(hello) = open(&mut &bytes[..]).await.unwrap() else {
            panic!("not read as a handshake");
        };
        assert_eq!((hello.versions, hello.node.as_str()), ((2, 9), "n"));

        let wire1 = [0u8, 0, 0, 12, 1, 2];
        assert!(matches!(
            open(&mut &wire1[..]).await.unwrap(),
            Opening::Legacy([0, 0, 0, 12])
        ));
        let first4 = u32::from_be_bytes(MAGIC[..4].try_into().unwrap());
        assert!(first4 as usize > crate::transport::MAX_FRAME_LIMIT);
        let mut huge = MAGIC.to_vec();
        huge.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(open(&mut &huge[..]).await.is_err());
    }
}
