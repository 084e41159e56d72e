//! Per-call metadata: string key/values a caller sets on one call and the provider's handler
//! (and its layers) read, bounded in count and size on both sides.

use std::fmt;

/// The most entries one call's metadata may have.
pub const MAX_METADATA_ENTRIES: usize = 64;

/// The most bytes one call's metadata may hold, keys and values together.
pub const MAX_METADATA_BYTES: usize = 8 << 10;

/// Key/value strings that travel with one call, next to its arguments.
///
/// Set on a call with [`Call::metadata`](crate::Call::metadata) (or by a client layer), read in
/// the handler through [`context()`](crate::context()). Keys are compared as written; a key set
/// twice keeps its last value. Bounded: at most [`MAX_METADATA_ENTRIES`] entries and
/// [`MAX_METADATA_BYTES`] bytes, checked before the call is sent (a typed `TooLarge` error) and
/// again by the provider (a refusal), so neither side holds more than that for a peer.
///
/// Metadata is not inherited by calls made inside a handler: each hop sets its own, as in gRPC.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Metadata {
    entries: Vec<(String, String)>,
}

/// Metadata over its bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataTooLarge {
    /// Its entries.
    pub entries: usize,
    /// Its bytes, keys and values.
    pub bytes: usize,
}

impl std::fmt::Display for MetadataTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the call's metadata has {} entries in {} bytes; at most {MAX_METADATA_ENTRIES} entries in {MAX_METADATA_BYTES} bytes are allowed",
            self.entries, self.bytes
        )
    }
}

impl std::error::Error for MetadataTooLarge {}

impl Metadata {
    /// No entries.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value`, replacing an earlier value of `key`.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let (key, value) = (key.into(), value.into());
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.entries.push((key, value)),
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Removes `key`; its value, if it had one.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let at = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(at).1)
    }

    /// The entries, in the order they were first set.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Keys and values, in bytes.
    pub fn bytes(&self) -> usize {
        self.entries.iter().map(|(k, v)| k.len() + v.len()).sum()
    }

    /// Whether it is within its bounds.
    pub fn check(&self) -> Result<(), MetadataTooLarge> {
        let (entries, bytes) = (self.len(), self.bytes());
        if entries > MAX_METADATA_ENTRIES || bytes > MAX_METADATA_BYTES {
            return Err(MetadataTooLarge { entries, bytes });
        }
        Ok(())
    }

    pub(crate) fn entries(&self) -> &[(String, String)] {
        &self.entries
    }

    pub(crate) fn from_entries(entries: Vec<(String, String)>) -> Self {
        Self { entries }
    }
}

impl fmt::Debug for Metadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Metadata {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut metadata = Metadata::new();
        for (k, v) in iter {
            metadata.insert(k, v);
        }
        metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_set_twice_keeps_its_last_value_and_the_bounds_are_checked() {
        let mut m = Metadata::new();
        m.insert("tenant", "a");
        m.insert("tenant", "b");
        assert_eq!((m.get("tenant"), m.len()), (Some("b"), 1));
        assert!(m.check().is_ok());
        m.insert("big", "x".repeat(MAX_METADATA_BYTES));
        assert!(m.check().is_err());
        m.remove("big");
        for i in 0..=MAX_METADATA_ENTRIES {
            m.insert(format!("k{i}"), "");
        }
        assert!(m.check().is_err());
    }
}
