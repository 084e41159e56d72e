//! The keys that seal gossip. A keyring holds one primary key, which seals every datagram
//! sent, and any number of installed keys, each of which opens a datagram sealed with it. A
//! key is rotated across a running cluster the way Consul's `keyring` does it, each step on
//! every node before the next: install the new key, use it, remove the old one.

use std::path::Path;
use std::sync::{Arc, RwLock};

use ring::aead::{CHACHA20_POLY1305, LessSafeKey, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

use super::IdentityError;

/// A gossip key: 32 random bytes (XChaCha20-Poly1305), written as 64 hex digits.
#[derive(Clone, PartialEq, Eq)]
pub struct GossipKey([u8; 32]);

impl std::fmt::Debug for GossipKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GossipKey({})", self.id())
    }
}

/// A key's short name, the first 4 bytes of its SHA-256, in hex: what a sealed datagram says
/// it was sealed with, and what logs and the keyring's methods name. It says nothing of the key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyId(pub(crate) [u8; 4]);

impl std::fmt::Debug for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyId({self})")
    }
}

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl std::str::FromStr for KeyId {
    type Err = IdentityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes = hex(s, 4, "a key id")?;
        Ok(KeyId(
            bytes.try_into().expect("hex returns the length asked for"),
        ))
    }
}

impl GossipKey {
    /// A new random key.
    pub fn generate() -> Self {
        let mut key = [0u8; 32];
        SystemRandom::new()
            .fill(&mut key)
            .expect("the operating system's random source failed");
        Self(key)
    }

    /// A key from its 64 hex digits.
    pub fn from_hex(text: &str) -> Result<Self, IdentityError> {
        let bytes = hex(text.trim(), 32, "a gossip key")?;
        Ok(Self(
            bytes.try_into().expect("hex returns the length asked for"),
        ))
    }

    /// The key as 64 hex digits.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Its short name.
    pub fn id(&self) -> KeyId {
        let digest = ring::digest::digest(&ring::digest::SHA256, &self.0);
        KeyId(
            digest.as_ref()[..4]
                .try_into()
                .expect("SHA-256 is 32 bytes"),
        )
    }

    fn sealing(&self) -> SealKey {
        SealKey {
            raw: self.0,
            chacha: LessSafeKey::new(
                UnboundKey::new(&CHACHA20_POLY1305, &self.0).expect("a 32-byte key"),
            ),
        }
    }
}

/// A key as `seal.rs` uses it: its bytes, from which XChaCha20-Poly1305 derives each datagram's
/// subkey, and ring's ChaCha20-Poly1305 key of them, which opens the datagrams of the earlier
/// format (a 96-bit nonce under the key itself).
pub(crate) struct SealKey {
    pub(crate) raw: [u8; 32],
    pub(crate) chacha: LessSafeKey,
}

/// The keys a node seals and opens gossip with. Clones share one keyring: keep a clone to
/// rotate keys while the node runs.
///
/// ```
/// use cluster::{GossipKey, Keyring};
/// let old = GossipKey::generate();
/// let keyring = Keyring::new(old.clone());
/// let new = GossipKey::generate();
/// keyring.install(new.clone()); // on every node, then:
/// keyring.use_key(new.id())?; // on every node, then:
/// keyring.remove(old.id())?;
/// assert_eq!(keyring.keys(), vec![new.id()]);
/// # Ok::<(), cluster::IdentityError>(())
/// ```
#[derive(Clone)]
pub struct Keyring {
    inner: Arc<RwLock<Keys>>,
}

struct Keys {
    primary: KeyId,
    keys: Vec<(KeyId, Arc<SealKey>)>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring")
            .field("primary", &self.primary())
            .field("keys", &self.keys())
            .finish()
    }
}

impl Keyring {
    /// A keyring of one key, the primary.
    pub fn new(primary: GossipKey) -> Self {
        let id = primary.id();
        Self {
            inner: Arc::new(RwLock::new(Keys {
                primary: id,
                keys: vec![(id, Arc::new(primary.sealing()))],
            })),
        }
    }

    /// A keyring from a file of keys, one per line in hex (`#` starts a comment): the first is
    /// the primary, the others are installed. `cluster-node init` writes one key.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, IdentityError> {
        let text = super::identity::read(path.as_ref())?;
        let mut keys = text
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .filter(|l| !l.is_empty())
            .map(GossipKey::from_hex);
        let Some(primary) = keys.next() else {
            return Err(IdentityError::Invalid(format!(
                "{} holds no gossip key",
                path.as_ref().display()
            )));
        };
        let keyring = Self::new(primary?);
        for key in keys {
            keyring.install(key?);
        }
        Ok(keyring)
    }

    /// Adds a key that opens datagrams; the primary still seals.
    pub fn install(&self, key: GossipKey) {
        let id = key.id();
        let mut keys = self.write();
        if !keys.keys.iter().any(|(k, _)| *k == id) {
            keys.keys.push((id, Arc::new(key.sealing())));
        }
    }

    /// Makes an installed key the primary: every datagram from now on is sealed with it.
    pub fn use_key(&self, id: KeyId) -> Result<(), IdentityError> {
        let mut keys = self.write();
        if !keys.keys.iter().any(|(k, _)| *k == id) {
            return Err(IdentityError::Invalid(format!(
                "key {id} is not installed: install it before using it"
            )));
        }
        keys.primary = id;
        Ok(())
    }

    /// Removes a key; the primary cannot be removed.
    pub fn remove(&self, id: KeyId) -> Result<(), IdentityError> {
        let mut keys = self.write();
        if keys.primary == id {
            return Err(IdentityError::Invalid(format!(
                "key {id} is the primary: use another key first"
            )));
        }
        keys.keys.retain(|(k, _)| *k != id);
        Ok(())
    }

    /// The key that seals.
    pub fn primary(&self) -> KeyId {
        self.read().primary
    }

    /// Every installed key, the primary among them.
    pub fn keys(&self) -> Vec<KeyId> {
        self.read().keys.iter().map(|(k, _)| *k).collect()
    }

    /// The primary key, to seal with.
    pub(crate) fn sealing(&self) -> (KeyId, Arc<SealKey>) {
        let keys = self.read();
        let primary = keys.primary;
        let key = keys
            .keys
            .iter()
            .find(|(k, _)| *k == primary)
            .map(|(_, key)| key.clone())
            .expect("the primary key is always installed");
        (primary, key)
    }

    /// The installed key of this id, to open with.
    pub(crate) fn opening(&self, id: KeyId) -> Option<Arc<SealKey>> {
        self.read()
            .keys
            .iter()
            .find(|(k, _)| *k == id)
            .map(|(_, key)| key.clone())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Keys> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Keys> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }
}

fn hex(text: &str, len: usize, what: &str) -> Result<Vec<u8>, IdentityError> {
    let wrong = || IdentityError::Invalid(format!("{what} must be {} hex digits", 2 * len));
    if text.len() != 2 * len || !text.is_ascii() {
        return Err(wrong());
    }
    (0..len)
        .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| wrong()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_the_primary_cannot_be_removed() {
        let key = GossipKey::generate();
        assert_eq!(GossipKey::from_hex(&key.to_hex()).unwrap(), key);
        assert!(GossipKey::from_hex("abc").is_err());
        assert!(GossipKey::from_hex(&"zz".repeat(32)).is_err());
        assert_eq!(key.id().to_string().parse::<KeyId>().unwrap(), key.id());
        let keyring = Keyring::new(key.clone());
        assert!(keyring.remove(key.id()).is_err());
        let other = GossipKey::generate();
        assert!(keyring.use_key(other.id()).is_err(), "not installed yet");
        keyring.install(other.clone());
        keyring.install(other.clone());
        assert_eq!(keyring.keys().len(), 2);
        keyring.use_key(other.id()).unwrap();
        assert_eq!(keyring.sealing().0, other.id());
        keyring.remove(key.id()).unwrap();
        assert!(keyring.opening(key.id()).is_none());
    }
}
