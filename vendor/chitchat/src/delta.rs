use std::collections::HashSet;

use anyhow::Context as _;

use crate::limits::MAX_DECOMPRESSED_LEN;
use crate::serialize::*;
use crate::types::{DeletionStatusMutation, KeyValueMutation, KeyValueMutationRef};
use std::sync::Arc;

use crate::auth::Signature;
use crate::{ChitchatId, Version, VersionedValue};

/// Not upstream's (`auth.rs`): the longest signature a delta may carry (an ECDSA P-256
/// signature in DER is at most 72 bytes; room for larger keys' schemes).
pub const MAX_SIGNATURE_LEN: usize = 1024;

/// A delta is the message we send to another node to update it.
///
/// Its serialization is done by transforming it into a sequence of operations,
/// encoded one after the other in a compressed stream.
#[derive(Debug, Eq, PartialEq)]
pub struct Delta {
    pub(crate) node_deltas: Vec<NodeDelta>,
    serialized_len: usize,
}

impl Default for Delta {
    fn default() -> Self {
        Delta {
            node_deltas: Vec::new(),
            serialized_len: 1,
        }
    }
}

impl Delta {
    fn get_operations(&self) -> impl Iterator<Item = DeltaOpRef<'_>> {
        self.node_deltas.iter().flat_map(|node_delta| {
            std::iter::once(DeltaOpRef::Node {
                chitchat_id: &node_delta.chitchat_id,
                last_gc_version: node_delta.last_gc_version,
                from_version_excluded: node_delta.from_version_excluded,
            })
            .chain(node_delta.key_values.iter().map(|key_value_mutation| {
                // Not upstream's (`auth.rs`): a key-value with its owner's signature.
                match node_delta.signatures.get(&key_value_mutation.version) {
                    Some(signature) => {
                        DeltaOpRef::SignedKeyValue(key_value_mutation.into(), signature)
                    }
                    None => DeltaOpRef::KeyValue(key_value_mutation.into()),
                }
            }))
            .chain({
                if node_delta.key_values.is_empty() && node_delta.max_version > 0 {
                    // The point of transmitting max_version is to update max_version in the
                    // presence of an empty empty node state (due to GC).
                    Some(DeltaOpRef::SetMaxVersion {
                        max_version: node_delta.max_version,
                    })
                } else {
                    // No need to add this operation.
                    // It would be redundant with the last operation, max_version.
                    None
                }
                .into_iter()
            })
        })
    }
}

enum DeltaOp {
    Node {
        chitchat_id: ChitchatId,
        last_gc_version: Version,
        from_version_excluded: u64,
    },
    KeyValue(KeyValueMutation),
    SetMaxVersion {
        max_version: Version,
    },
    /// Not upstream's (`auth.rs`): a key-value and its owner's signature.
    SignedKeyValue(KeyValueMutation, Signature),
}

enum DeltaOpRef<'a> {
    Node {
        chitchat_id: &'a ChitchatId,
        last_gc_version: Version,
        from_version_excluded: u64,
    },
    KeyValue(KeyValueMutationRef<'a>),
    SetMaxVersion {
        max_version: Version,
    },
    SignedKeyValue(KeyValueMutationRef<'a>, &'a [u8]),
}

#[repr(u8)]
enum DeltaOpTag {
    Node = 0u8,
    KeyValue = 1u8,
    SetMaxVersion = 2u8,
    SignedKeyValue = 3u8,
}

impl TryFrom<u8> for DeltaOpTag {
    type Error = anyhow::Error;

    fn try_from(tag_byte: u8) -> anyhow::Result<DeltaOpTag> {
        match tag_byte {
            0u8 => Ok(DeltaOpTag::Node),
            1u8 => Ok(DeltaOpTag::KeyValue),
            2u8 => Ok(DeltaOpTag::SetMaxVersion),
            3u8 => Ok(DeltaOpTag::SignedKeyValue),
            _ => {
                anyhow::bail!("Unknown tag: {tag_byte}")
            }
        }
    }
}

impl From<DeltaOpTag> for u8 {
    fn from(tag: DeltaOpTag) -> u8 {
        tag as u8
    }
}

impl Deserializable for DeltaOp {
    fn deserialize(buf: &mut &[u8]) -> anyhow::Result<Self> {
        let tag_bytes: [u8; 1] = Deserializable::deserialize(buf)?;
        let tag = DeltaOpTag::try_from(tag_bytes[0])?;
        match tag {
            DeltaOpTag::Node => {
                let chitchat_id = ChitchatId::deserialize(buf)?;
                let last_gc_version = Version::deserialize(buf)?;
                let from_version_excluded = u64::deserialize(buf)?;
                Ok(DeltaOp::Node {
                    chitchat_id,
                    last_gc_version,
                    from_version_excluded,
                })
            }
            DeltaOpTag::KeyValue => {
                let key = String::deserialize(buf)?;
                let value = String::deserialize(buf)?;
                let version = u64::deserialize(buf)?;
                let deleted = DeletionStatusMutation::deserialize(buf)?;
                Ok(DeltaOp::KeyValue(KeyValueMutation {
                    key,
                    value,
                    version,
                    status: deleted,
                }))
            }
            DeltaOpTag::SetMaxVersion => {
                let max_version = Version::deserialize(buf)?;
                Ok(DeltaOp::SetMaxVersion { max_version })
            }
            DeltaOpTag::SignedKeyValue => {
                let key_value_mutation = KeyValueMutation::deserialize(buf)?;
                let len = u16::deserialize(buf)? as usize;
                anyhow::ensure!(
                    len <= MAX_SIGNATURE_LEN,
                    "a signature of {len} bytes, past {MAX_SIGNATURE_LEN}"
                );
                let signature = buf.get(..len).context("a signature cut short")?;
                let signature: Signature = Arc::from(signature);
                *buf = &buf[len..];
                Ok(DeltaOp::SignedKeyValue(key_value_mutation, signature))
            }
        }
    }
}

impl DeltaOp {
    fn as_ref(&self) -> DeltaOpRef {
        match self {
            DeltaOp::Node {
                chitchat_id,
                last_gc_version,
                from_version_excluded,
            } => DeltaOpRef::Node {
                chitchat_id,
                last_gc_version: *last_gc_version,
                from_version_excluded: *from_version_excluded,
            },
            DeltaOp::KeyValue(key_value_mutation) => {
                DeltaOpRef::KeyValue(key_value_mutation.into())
            }
            DeltaOp::SetMaxVersion { max_version } => DeltaOpRef::SetMaxVersion {
                max_version: *max_version,
            },
            DeltaOp::SignedKeyValue(key_value_mutation, signature) => {
                DeltaOpRef::SignedKeyValue(key_value_mutation.into(), signature)
            }
        }
    }
}

impl Serializable for DeltaOp {
    fn serialize(&self, buf: &mut Vec<u8>) {
        self.as_ref().serialize(buf)
    }

    fn serialized_len(&self) -> usize {
        self.as_ref().serialized_len()
    }
}

impl Serializable for DeltaOpRef<'_> {
    fn serialize(&self, buf: &mut Vec<u8>) {
        match self {
            Self::Node {
                chitchat_id,
                last_gc_version,
                from_version_excluded: from_version,
            } => {
                buf.push(DeltaOpTag::Node.into());
                chitchat_id.serialize(buf);
                last_gc_version.serialize(buf);
                from_version.serialize(buf);
            }
            Self::KeyValue(key_value_mutation_ref) => {
                buf.push(DeltaOpTag::KeyValue.into());
                key_value_mutation_ref.serialize(buf);
            }
            Self::SetMaxVersion { max_version } => {
                buf.push(DeltaOpTag::SetMaxVersion.into());
                max_version.serialize(buf);
            }
            Self::SignedKeyValue(key_value_mutation_ref, signature) => {
                buf.push(DeltaOpTag::SignedKeyValue.into());
                key_value_mutation_ref.serialize(buf);
                (signature.len() as u16).serialize(buf);
                buf.extend_from_slice(signature);
            }
        }
    }

    fn serialized_len(&self) -> usize {
        1 + match self {
            Self::Node {
                chitchat_id,
                last_gc_version,
                from_version_excluded: from_version,
            } => {
                chitchat_id.serialized_len()
                    + last_gc_version.serialized_len()
                    + from_version.serialized_len()
            }
            Self::KeyValue(key_value_mutation_ref) => key_value_mutation_ref.serialized_len(),
            Self::SetMaxVersion { max_version } => max_version.serialized_len(),
            Self::SignedKeyValue(key_value_mutation_ref, signature) => {
                key_value_mutation_ref.serialized_len() + 2 + signature.len()
            }
        }
    }
}

impl Serializable for Delta {
    fn serialize(&self, buf: &mut Vec<u8>) {
        let mut compressed_stream_writer = CompressedStreamWriter::with_block_threshold(16_384);
        for op in self.get_operations() {
            compressed_stream_writer.append(&op);
        }
        let payload = compressed_stream_writer.finish();
        assert_eq!(payload.len(), self.serialized_len);
        buf.extend(&payload);
    }

    fn serialized_len(&self) -> usize {
        self.serialized_len
    }
}

impl Deserializable for Delta {
    fn deserialize(buf: &mut &[u8]) -> anyhow::Result<Self> {
        let original_len = buf.len();
        let ops: Vec<DeltaOp> = crate::serialize::deserialize_stream(buf)?;
        let consumed_len = original_len - buf.len();
        let mut delta_builder = DeltaBuilder::default();
        for op in ops {
            delta_builder.apply_op(op)?;
        }
        Ok(delta_builder.finish(consumed_len))
    }
}

#[cfg(test)]
impl Delta {
    pub(crate) fn num_tuples(&self) -> usize {
        self.node_deltas
            .iter()
            .map(|node_delta| node_delta.num_tuples())
            .sum()
    }

    pub(crate) fn add_node(
        &mut self,
        chitchat_id: ChitchatId,
        last_gc_version: Version,
        from_version: Version,
    ) {
        assert!(
            !self
                .node_deltas
                .iter()
                .any(|node_delta| { node_delta.chitchat_id == chitchat_id })
        );
        self.node_deltas.push(NodeDelta {
            chitchat_id,
            last_gc_version,
            from_version_excluded: from_version,
            key_values: Vec::new(),
            max_version: 0,
            signatures: Default::default(),
        });
    }

    /// add_kv needs to be called in order of increasing versions
    pub(crate) fn add_kv(
        &mut self,
        chitchat_id: &ChitchatId,
        key: &str,
        value: &str,
        version: crate::Version,
        deleted: bool,
    ) {
        assert_ne!(version, 0, "0 version for a kv is forbidden");
        let node_delta = self
            .node_deltas
            .iter_mut()
            .find(|node_delta| &node_delta.chitchat_id == chitchat_id)
            .unwrap();
        assert!(
            node_delta.max_version < version,
            "attempted to set a value with a version ({}) < to our current version ({})",
            node_delta.max_version,
            version
        );
        node_delta.max_version = version;
        node_delta.key_values.push(KeyValueMutation {
            key: key.to_string(),
            value: value.to_string(),
            version,
            status: if deleted {
                DeletionStatusMutation::Delete
            } else {
                DeletionStatusMutation::Set
            },
        });
    }

    pub(crate) fn set_max_version(&mut self, chitchat_id: &ChitchatId, max_version: Version) {
        let node_delta = self
            .node_deltas
            .iter_mut()
            .find(|node_delta| &node_delta.chitchat_id == chitchat_id)
            .unwrap();
        node_delta.max_version = max_version;
    }

    pub(crate) fn set_serialized_len(&mut self, serialized_len: usize) {
        self.serialized_len = serialized_len;
    }

    pub(crate) fn get(&self, chitchat_id: &ChitchatId) -> Option<&NodeDelta> {
        self.node_deltas
            .iter()
            .find(|node_delta| &node_delta.chitchat_id == chitchat_id)
    }
}

#[derive(Debug, Eq, PartialEq)]
pub(crate) struct NodeDelta {
    pub chitchat_id: ChitchatId,
    // `from_version_excluded` and `last_gc_version` are here to express on which states
    // this delta can be applied to.
    //
    // `last_gc_version` expresses that this delta was computed from a state where no
    // keys > `last_gc_version` have been removed.
    //
    // `from_version` expresses that from this state, ALL of the records in
    // (`from_version`.. `max_version`] are present in this delta
    // (where max_version is maximum version in the delta.)
    //
    // In other words, the only gaps in this interval are deleted key-values with a version
    // <= `last gc version`.
    //
    // Inspect the code in `prepare_apply_delta(..)` to see the rules on how `from_version`
    // and `last_gc_version` are used.
    pub from_version_excluded: Version,
    pub last_gc_version: Version,
    pub key_values: Vec<KeyValueMutation>,
    // Not upstream's (`auth.rs`): the owners' signatures of the key-values, by version.
    pub signatures: std::collections::HashMap<Version, Signature>,
    // If key_values is not empty, then max_version is the maximum version in key_values.
    // If key_values is empty, then max_version can be set to something > 0.
    // This is useful when we replicate a state without any key-values.
    pub max_version: Version,
}

#[cfg(test)]
impl NodeDelta {
    pub fn num_tuples(&self) -> usize {
        self.key_values.len()
    }
}

#[derive(Default)]
struct DeltaBuilder {
    existing_nodes: HashSet<ChitchatId>,
    delta: Delta,
    current_node_delta: Option<NodeDelta>,
}

impl DeltaBuilder {
    fn finish(mut self, len: usize) -> Delta {
        self.flush();
        self.delta.serialized_len = len;
        self.delta
    }

    fn apply_op(&mut self, op: DeltaOp) -> anyhow::Result<()> {
        match op {
            DeltaOp::Node {
                chitchat_id,
                last_gc_version,
                from_version_excluded,
            } => {
                self.flush();
                anyhow::ensure!(!self.existing_nodes.contains(&chitchat_id));
                self.existing_nodes.insert(chitchat_id.clone());
                self.current_node_delta = Some(NodeDelta {
                    chitchat_id,
                    last_gc_version,
                    from_version_excluded,
                    key_values: Vec::new(),
                    max_version: 0,
                    signatures: Default::default(),
                });
            }
            DeltaOp::SignedKeyValue(key_value_mutation, signature) => {
                let version = key_value_mutation.version;
                self.apply_op(DeltaOp::KeyValue(key_value_mutation))?;
                if let Some(current_node_delta) = self.current_node_delta.as_mut() {
                    current_node_delta.signatures.insert(version, signature);
                }
            }
            DeltaOp::KeyValue(key_value_mutation) => {
                let current_node_delta = self
                    .current_node_delta
                    .as_mut()
                    .context("received a key-value op without a node op before.")?;
                anyhow::ensure!(
                    current_node_delta.max_version < key_value_mutation.version,
                    "kv version should be striclty increasing"
                );
                current_node_delta.max_version = key_value_mutation.version;
                current_node_delta.key_values.push(key_value_mutation);
            }
            DeltaOp::SetMaxVersion { max_version } => {
                let Some(current_node_delta) = self.current_node_delta.as_mut() else {
                    anyhow::bail!("received a key-value op without a node op before.");
                };
                // Not upstream's: a max version below the last key's made `apply_delta`
                // assert, which stopped gossip for good on one datagram.
                anyhow::ensure!(
                    max_version >= current_node_delta.max_version,
                    "max version {max_version} is below the last key's version {}",
                    current_node_delta.max_version
                );
                current_node_delta.max_version = max_version;
            }
        }
        Ok(())
    }

    fn flush(&mut self) {
        let Some(node_delta) = self.current_node_delta.take() else {
            // There are no nodes in the builder.
            // (this happens when the delta builder is freshly created and no ops have been received
            // yet.)
            return;
        };
        self.delta.node_deltas.push(node_delta);
    }
}

/// The delta serializer is just helping us with the task of serializing
/// part of a delta, while respecting a given `mtu`.
///
/// We do it by calling `try_add_node_reset`, `try_add_node`, and `try_add_kv`
/// and stopping as soon as one of this methods returns `false`.
pub struct DeltaSerializer {
    mtu: usize,
    delta_builder: DeltaBuilder,
    compressed_stream_writer: CompressedStreamWriter,
    // Not upstream's: the ops' bytes before compression, kept under `MAX_DECOMPRESSED_LEN` so
    // that a receiver never refuses a delta this node built.
    uncompressed_len: usize,
}

const BLOCK_THRESHOLD: u16 = 16_384u16;

impl DeltaSerializer {
    /// The smallest mtu a delta is built for.
    pub const MIN_MTU: usize = 100;

    pub fn with_mtu(mtu: usize) -> Self {
        assert!(mtu >= Self::MIN_MTU);
        let block_threshold = u16::try_from((BLOCK_THRESHOLD as usize).min(mtu)).unwrap();
        DeltaSerializer {
            mtu,
            delta_builder: DeltaBuilder::default(),
            compressed_stream_writer: CompressedStreamWriter::with_block_threshold(block_threshold),
            uncompressed_len: 0,
        }
    }

    #[must_use]
    pub fn try_set_max_version(&mut self, max_version: Version) -> bool {
        let key_value_op = DeltaOp::SetMaxVersion { max_version };
        self.try_add_op(key_value_op)
    }

    fn try_add_op(&mut self, delta_op: DeltaOp) -> bool {
        if self
            .compressed_stream_writer
            .serialized_len_upperbound_after(&delta_op)
            > self.mtu
        {
            return false;
        }
        let uncompressed_len = self.uncompressed_len + delta_op.serialized_len();
        if uncompressed_len > MAX_DECOMPRESSED_LEN {
            return false;
        }
        self.uncompressed_len = uncompressed_len;
        self.compressed_stream_writer.append(&delta_op);
        assert!(self.delta_builder.apply_op(delta_op).is_ok());
        true
    }

    /// Returns false if the KV could not be added because the payload would exceed the mtu.
    pub fn try_add_kv(&mut self, key: &str, versioned_value: VersionedValue) -> bool {
        let key_value_mutation = KeyValueMutation {
            key: key.to_string(),
            value: versioned_value.value,
            version: versioned_value.version,
            status: versioned_value.status.into(),
        };
        let key_value_op = DeltaOp::KeyValue(key_value_mutation);
        self.try_add_op(key_value_op)
    }

    /// Not upstream's (`auth.rs`): [`Self::try_add_kv`] with the owner's signature, if any; the
    /// two go in one op, so that a key-value never goes without the signature it has.
    pub fn try_add_signed_kv(
        &mut self,
        key: &str,
        versioned_value: VersionedValue,
        signature: Option<&Signature>,
    ) -> bool {
        let Some(signature) = signature else {
            return self.try_add_kv(key, versioned_value);
        };
        let key_value_mutation = KeyValueMutation {
            key: key.to_string(),
            value: versioned_value.value,
            version: versioned_value.version,
            status: versioned_value.status.into(),
        };
        self.try_add_op(DeltaOp::SignedKeyValue(
            key_value_mutation,
            signature.clone(),
        ))
    }

    /// Returns false if the node could not be added because the payload would exceed the mtu.
    pub fn try_add_node(
        &mut self,
        chitchat_id: ChitchatId,
        last_gc_version: Version,
        from_version: Version,
    ) -> bool {
        let new_node_op = DeltaOp::Node {
            chitchat_id,
            last_gc_version,
            from_version_excluded: from_version,
        };
        self.try_add_op(new_node_op)
    }

    pub fn finish(self) -> Delta {
        let buffer = self.compressed_stream_writer.finish();
        self.delta_builder.finish(buffer.len())
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::*;
    use crate::types::DeletionStatus;

    #[test]
    fn test_delta_serialization_default() {
        test_serdeser_aux(&Delta::default(), 1);
    }

    #[test]
    fn test_delta_serialization_with_set_max_version() {
        // 4 bytes
        let mut delta_writer = DeltaSerializer::with_mtu(198);

        // ChitchatId takes 27 bytes = 15 bytes + 2 bytes for node length + "node-10001".len().
        let node1 = ChitchatId::for_local_test(10_001);

        // +37 bytes = 8 bytes (heartbeat) + 2 bytes (empty node delta) + 27 bytes (node).
        assert!(delta_writer.try_add_node(node1, 80u64, 50u64));

        // +9 bytes: +1 bytes + 8 bytes (version)
        assert!(delta_writer.try_set_max_version(100));

        test_aux_delta_writer(delta_writer, 1 + 56);
    }

    #[test]
    fn test_delta_serialization_simple_foo() {
        // 4 bytes
        let mut delta_writer = DeltaSerializer::with_mtu(198);

        // ChitchatId takes 27 bytes = 15 bytes + 2 bytes for node length + "node-10001".len().
        let node1 = ChitchatId::for_local_test(10_001);
        // +37 bytes = 8 bytes (heartbeat) + 2 bytes (empty node delta) + 27 bytes (node).
        assert!(delta_writer.try_add_node(node1, 0u64, 0u64));

        // +23 bytes: 2 bytes (key length) + 5 bytes (key) + 7 bytes (values) + 8 bytes (version) +
        // 1 bytes (empty tombstone).
        assert!(delta_writer.try_add_kv(
            "key11",
            VersionedValue {
                value: "val11".to_string(),
                version: 1,
                status: DeletionStatus::Set,
            },
        ));
        // +26 bytes: 2 bytes (key length) + 5 bytes (key) + 8 bytes (version) +
        // 9 bytes (empty tombstone).
        assert!(delta_writer.try_add_kv(
            "key12",
            VersionedValue {
                value: "".to_string(),
                version: 2,
                status: DeletionStatus::Deleted(Instant::now()),
            },
        ));

        let node2 = ChitchatId::for_local_test(10_002);
        // +37 bytes
        assert!(delta_writer.try_add_node(node2, 0, 0u64));

        // +23 bytes.
        assert!(delta_writer.try_add_kv(
            "key21",
            VersionedValue {
                value: "val21".to_string(),
                version: 2,
                status: DeletionStatus::Set,
            },
        ));
        // +23 bytes.
        assert!(delta_writer.try_add_kv(
            "key22",
            VersionedValue {
                value: "val22".to_string(),
                version: 3,
                status: DeletionStatus::Set,
            },
        ));
        test_aux_delta_writer(delta_writer, 115);
    }

    #[test]
    fn test_delta_serialization_simple_node() {
        // 1 bytes (End tag)
        let mut delta_writer = DeltaSerializer::with_mtu(140);

        // ChitchatId takes 27 bytes = 15 bytes + 2 bytes for node length + "node-10001".len().
        let node1 = ChitchatId::for_local_test(10_001);
        // +37 bytes = 8 bytes (last gc version) + 27 bytes (node) +  2bytes (block length)
        assert!(delta_writer.try_add_node(node1, 0, 0u64));

        // +24 bytes (kv + op tag)
        assert!(delta_writer.try_add_kv(
            "key11",
            VersionedValue {
                value: "val11".to_string(),
                version: 1,
                status: DeletionStatus::Set,
            }
        ));

        // +24 bytes. (kv + op tag)
        assert!(delta_writer.try_add_kv(
            "key12",
            VersionedValue {
                value: "val12".to_string(),
                version: 2,
                status: DeletionStatus::Set,
            }
        ));

        let node2 = ChitchatId::for_local_test(10_002);
        // +37 bytes = 8 bytes (last gc version) + 2 bytes (empty node delta) + 27 bytes (node).
        assert!(delta_writer.try_add_node(node2, 0, 0u64));
        test_aux_delta_writer(delta_writer, 96);
    }

    #[track_caller]
    fn test_aux_delta_writer(delta_writer: DeltaSerializer, expected_len: usize) {
        let delta: Delta = delta_writer.finish();
        test_serdeser_aux(&delta, expected_len)
    }

    #[test]
    fn test_delta_serialization_simple_with_nodes_to_reset() {
        // 1 bytes (end tag)
        let mut delta_writer = DeltaSerializer::with_mtu(155);

        // +27 bytes (ChitchatId) + 1 (op tag) + 3 bytes (block len)
        // = 32 bytes

        let node1 = ChitchatId::for_local_test(10_001);

        // +8 bytes (last gc version) + 27 bytes (ChitchatId) + (1 op tag) + 3 bytes (pessimistic
        // new block) = 71
        assert!(delta_writer.try_add_node(node1, 0u64, 0u64));

        // +23 bytes (kv) + 1 (op tag)
        // = 95
        assert!(delta_writer.try_add_kv(
            "key11",
            VersionedValue {
                value: "val11".to_string(),
                version: 1,
                status: DeletionStatus::Set,
            }
        ));
        // +23 bytes (kv) + 1 (op tag)
        // = 119
        assert!(delta_writer.try_add_kv(
            "key12",
            VersionedValue {
                value: "val12".to_string(),
                version: 2,
                status: DeletionStatus::Set,
            }
        ));

        let node2 = ChitchatId::for_local_test(10_002);
        // +8 bytes (last gc version) + 27 bytes (ChitchatId) + 1 byte (op tag)
        // = 155
        assert!(delta_writer.try_add_node(node2, 0u64, 0));
        // The block got compressed.
        test_aux_delta_writer(delta_writer, 96);
    }

    #[test]
    fn test_delta_serialization_exceed_mtu_on_add_node() {
        // 4 bytes.
        let mut delta_writer = DeltaSerializer::with_mtu(100);

        let node1 = ChitchatId::for_local_test(10_001);
        // +37 bytes = 8 bytes (heartbeat) + 2 bytes (empty node delta) + 27 bytes (ChitchatId).
        assert!(delta_writer.try_add_node(node1, 0, 0));

        // +23 bytes.
        assert!(delta_writer.try_add_kv(
            "key11",
            VersionedValue {
                value: "val11".to_string(),
                version: 1,
                status: DeletionStatus::Set,
            }
        ));
        // +23 bytes.
        assert!(delta_writer.try_add_kv(
            "key12",
            VersionedValue {
                value: "val12".to_string(),
                version: 2,
                status: DeletionStatus::Set,
            }
        ));

        let node2 = ChitchatId::for_local_test(10_002);
        // +37 bytes = 8 bytes (heartbeat) + 2 bytes (empty node delta) + 27 bytes (ChitchatId).
        assert!(!delta_writer.try_add_node(node2, 0u64, 1u64));

        // The block got compressed.
        test_aux_delta_writer(delta_writer, 88);
    }

    #[test]
    fn test_delta_serialization_exceed_mtu_on_add_kv() {
        // 1 bytes.
        let mut delta_writer = DeltaSerializer::with_mtu(100);

        let node1 = ChitchatId::for_local_test(10_001);

        // + 3 bytes (block tag) + 35 bytes (node) + 1 byte (op tag)
        // = 40
        assert!(delta_writer.try_add_node(node1, 0u64, 1u64));

        // +23 bytes (kv) + 1 (op tag) + 3 bytes (pessimistic block tag)
        // = 67
        assert!(delta_writer.try_add_kv(
            "key11",
            VersionedValue {
                value: "val11".to_string(),
                version: 1,
                status: DeletionStatus::Set,
            }
        ));

        // +33 bytes (kv) + 1 (op tag)
        // = 101 (exceeding mtu!)
        assert!(!delta_writer.try_add_kv(
            "key12",
            VersionedValue {
                value: "val12aaaaaaaaaabcc".to_string(),
                version: 2,
                status: DeletionStatus::Set,
            }
        ));
        test_aux_delta_writer(delta_writer, 72);
    }

    #[test]
    #[should_panic]
    fn test_delta_serialization_panic_if_add_after_exceed() {
        let mut delta_writer = DeltaSerializer::with_mtu(62);

        let node1 = ChitchatId::for_local_test(10_001);
        assert!(delta_writer.try_add_node(node1, 0u64, 1u64));

        assert!(delta_writer.try_add_kv(
            "key11",
            VersionedValue {
                value: "val11".to_string(),
                version: 1,
                status: DeletionStatus::Set,
            }
        ));
        assert!(!delta_writer.try_add_kv(
            "key12",
            VersionedValue {
                value: "val12".to_string(),
                version: 2,
                status: DeletionStatus::Set,
            }
        ));
        delta_writer.try_add_kv(
            "key13",
            VersionedValue {
                value: "val12".to_string(),
                version: 2,
                status: DeletionStatus::Set,
            },
        );
    }

    #[test]
    fn test_delta_op_tag() {
        let mut num_valid_tags = 0;
        for b in 0..=u8::MAX {
            if let Ok(tag) = DeltaOpTag::try_from(b) {
                let tag_byte: u8 = tag.into();
                assert_eq!(b, tag_byte);
                num_valid_tags += 1;
            }
        }
        assert_eq!(num_valid_tags, 4);
    }
}

/// Not upstream's: blocks written by `ruzstd` and by libzstd (nodes before it, or with the
/// `libzstd` feature) are read by both, within the same bound; and what the codec costs in
/// size on gossip-like deltas.
#[cfg(test)]
mod codec_tests {
    use std::net::SocketAddr;

    use proptest::prelude::*;

    use super::*;
    use crate::serialize::{CompressedStreamWriter, compress_block, decompress_block};

    fn libzstd_compress(block: &[u8], compressed: &mut Vec<u8>) {
        *compressed = zstd::bulk::compress(block, 0).unwrap();
    }

    use compress_block as ruzstd_compress;

    /// A deterministic generator (splitmix64): the same state on every run.
    struct Bytes(u64);

    impl Bytes {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        fn take(&mut self, len: usize) -> Vec<u8> {
            (0..len).map(|_| self.next() as u8).collect()
        }
    }

    fn base64(bytes: &[u8]) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut text = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (*b as u32) << (16 - 8 * i));
            for i in 0..=chunk.len() {
                text.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            }
            for _ in chunk.len()..3 {
                text.push('=');
            }
        }
        text
    }

    fn function(name: &str, arg: &str, ok: &str) -> String {
        format!(
            r#"{{"name":"{name}","signature":"{name}({arg}) -> Result<Vec<{ok}>, ServiceError>","shape":{{"args":[{{"Struct":{{"name":"{arg}","fields":[{{"name":"text","shape":"Str","optional":false}},{{"name":"limit","shape":{{"Uint":32}},"optional":false}},{{"name":"filters","shape":{{"Map":["Str","Str"]}},"optional":true}},{{"name":"deadline_ms","shape":{{"Option":{{"Uint":64}}}},"optional":true}}]}}}}],"output":{{"Enum":{{"name":"Result","variants":[{{"name":"Ok","content":{{"Newtype":{{"Seq":{{"Struct":{{"name":"{ok}","fields":[{{"name":"id","shape":"Str","optional":false}},{{"name":"score","shape":{{"Float":32}},"optional":false}},{{"name":"tags","shape":{{"Seq":"Str"}},"optional":false}}]}}}}}}}}}},{{"name":"Err","content":{{"Newtype":{{"Enum":{{"name":"ServiceError","variants":[{{"name":"BadRequest","content":{{"Newtype":"Str"}}}},{{"name":"Unavailable","content":"Unit"}},{{"name":"Timeout","content":{{"Struct":[{{"name":"after_ms","shape":{{"Uint":64}},"optional":false}}]}}}}]}}}}}}}}]}}}}}},"idempotent":true,"options":{{}},"params":["request"]}}"#
        )
    }

    fn service(name: &str) -> String {
        let functions: Vec<String> = ["get", "list", "search", "update"]
            .iter()
            .map(|f| function(&format!("{f}_{name}"), &format!("{}Request", name), &format!("{}Item", name)))
            .collect();
        format!(
            r#"{{"name":"{name}","version":"2.3.1","compat":"^2","options":{{"timeout":{{"secs":5,"nanos":0}}}},"functions":[{}],"wire":2}}"#,
            functions.join(",")
        )
    }

    /// What `cluster` gossips for `nodes` nodes, each with 3 services of a pool of 6: its
    /// address keys, status and revision, a certificate (base64 DER, a template shared by all
    /// and its own key, serial and signature), the services' descriptions (JSON with traced
    /// shapes), a load, each key signed (an ECDSA P-256 signature in DER, 71 bytes) if `signed`.
    fn gossip_like_ops(nodes: usize, signed: bool) -> Vec<DeltaOp> {
        let mut bytes = Bytes(7);
        let pool = ["search", "index", "billing", "accounts", "media", "audit"].map(service);
        let names = ["search", "index", "billing", "accounts", "media", "audit"];
        let template = bytes.take(330);
        let mut ops = Vec::new();
        for i in 0..nodes {
            let chitchat_id = ChitchatId::new(
                format!("node-{i:03}.eu-west.prod"),
                1_765_000_000_000 + i as u64,
                SocketAddr::from(([10, 0, (i / 200) as u8, (i % 200) as u8], 7280)),
            );
            ops.push(DeltaOp::Node {
                chitchat_id,
                last_gc_version: 0,
                from_version_excluded: 0,
            });
            let mut der = template.clone();
            der.splice(40..40, bytes.take(16)); // serial
            der.splice(180..180, bytes.take(65)); // public key
            der.extend(bytes.take(72)); // the CA's signature
            let mut keys = vec![
                ("rpc".to_owned(), format!("10.0.{}.{}:7000", i / 200, i % 200)),
                ("frame".to_owned(), "16777216".to_owned()),
                ("wire".to_owned(), "1-2".to_owned()),
                ("status".to_owned(), "up".to_owned()),
                ("cert".to_owned(), base64(&der)),
            ];
            for s in 0..3 {
                let k = (i + s * 2) % pool.len();
                keys.push((format!("svc:{}", names[k]), pool[k].clone()));
            }
            keys.push(("load".to_owned(), format!("0.{}", bytes.next() % 100)));
            keys.push(("rev".to_owned(), "9".to_owned()));
            for (version, (key, value)) in keys.into_iter().enumerate() {
                let mutation = KeyValueMutation {
                    key,
                    value,
                    version: version as u64 + 1,
                    status: DeletionStatusMutation::Set,
                };
                let signature = bytes.take(71);
                ops.push(if signed {
                    DeltaOp::SignedKeyValue(mutation, signature.into())
                } else {
                    DeltaOp::KeyValue(mutation)
                });
            }
        }
        ops
    }

    /// The ops' bytes, and their stream as a delta writes it (blocks of 16 KiB) with `compress`.
    fn stream(ops: &[DeltaOp], compress: fn(&[u8], &mut Vec<u8>)) -> (usize, Vec<u8>) {
        let mut writer = CompressedStreamWriter::with_compressor(BLOCK_THRESHOLD, compress);
        for op in ops {
            writer.append(op);
        }
        (ops.iter().map(|op| op.serialized_len()).sum(), writer.finish())
    }

    fn libzstd_decompress_stream(mut buf: &[u8]) -> Vec<u8> {
        let mut data = Vec::new();
        loop {
            let (tag, rest) = buf.split_first().unwrap();
            if *tag == 0 {
                return data;
            }
            let len = u16::from_le_bytes([rest[0], rest[1]]) as usize;
            let block = &rest[2..2 + len];
            if *tag == 1 {
                data.extend(zstd::bulk::decompress(block, u16::MAX as usize).unwrap());
            } else {
                data.extend(block);
            }
            buf = &rest[2 + len..];
        }
    }

    #[test]
    fn gossip_like_deltas_read_across_codecs_and_their_sizes() {
        for (nodes, signed) in [(10, true), (50, true), (50, false)] {
            let ops = gossip_like_ops(nodes, signed);
            let mut plain = Vec::new();
            for op in &ops {
                op.serialize(&mut plain);
            }
            let (len, ruzstd) = stream(&ops, ruzstd_compress);
            let (_, libzstd) = stream(&ops, libzstd_compress);
            // Each reads the other's.
            for stream in [&libzstd, &ruzstd] {
                let read: Vec<DeltaOp> = deserialize_stream(&mut &stream[..]).unwrap();
                assert_eq!(read.len(), ops.len());
                let mut again = Vec::new();
                for op in &read {
                    op.serialize(&mut again);
                }
                assert_eq!(again, plain);
            }
            assert_eq!(libzstd_decompress_stream(&ruzstd), plain);
            println!(
                "{nodes} nodes, signed: {signed}, {len} bytes of ops: ruzstd Fastest {} bytes, libzstd level 3 {} bytes ({:.2}x)",
                ruzstd.len(),
                libzstd.len(),
                ruzstd.len() as f64 / libzstd.len() as f64
            );
        }
    }

    #[test]
    fn a_block_decompresses_into_its_room_exactly_and_no_further() {
        let ops = gossip_like_ops(3, true);
        let mut plain = Vec::new();
        for op in &ops {
            op.serialize(&mut plain);
        }
        let block = &plain[..plain.len().min(16_384)];
        for compress in [ruzstd_compress, libzstd_compress] {
            let mut frame = Vec::new();
            compress(block, &mut frame);
            assert!(frame.len() < block.len() / 2);
            let mut output = vec![0; block.len()];
            assert_eq!(decompress_block(&frame, &mut output).unwrap(), block.len());
            assert_eq!(output, block);
            // Refused from the header: it declares its content's size.
            assert!(decompress_block(&frame, &mut output[..block.len() - 1]).is_err());
        }
    }

    /// 60 KiB in a frame that declares no content size and a window of 1 KiB, in RLE blocks of
    /// 1 KiB: refused once past the room.
    #[test]
    fn a_frame_of_many_small_blocks_is_refused_past_the_room() {
        let mut frame = vec![0x28, 0xB5, 0x2F, 0xFD, 0, 0];
        for i in 0..60u32 {
            let block = u32::from(i == 59) | (1 << 1) | (1024 << 3);
            frame.extend(&block.to_le_bytes()[..3]);
            frame.push(b'x');
        }
        let mut output = vec![0; 65_535];
        assert_eq!(decompress_block(&frame, &mut output).unwrap(), 61_440);
        let err = decompress_block(&frame, &mut output[..10_000]).unwrap_err();
        assert!(format!("{err:#}").contains("more than 10000 bytes"), "{err:#}");
        assert_eq!(zstd::bulk::decompress(&frame, 65_536).unwrap().len(), 61_440);
    }

    fn compressible() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..3_000),
            proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), any::<u8>()], 0..20_000),
            (proptest::collection::vec(any::<u8>(), 1..200), 1..200usize)
                .prop_map(|(pattern, times)| pattern.repeat(times)),
        ]
    }

    proptest! {
        // Failing cases are kept in proptest-regressions/, and printed with their seed.
        #[test]
        fn blocks_read_across_codecs(data in compressible()) {
            let mut ours = Vec::new();
            ruzstd_compress(&data, &mut ours);
            if !data.is_empty() {
                prop_assert_eq!(zstd::bulk::decompress(&ours, data.len()).unwrap(), data.clone());
                let mut output = vec![0; data.len()];
                prop_assert_eq!(decompress_block(&ours, &mut output).unwrap(), data.len());
                prop_assert_eq!(&output, &data);
                prop_assert!(decompress_block(&ours, &mut output[..data.len() - 1]).is_err());
            }
            let theirs = zstd::bulk::compress(&data, 0).unwrap();
            let mut output = vec![0; data.len()];
            prop_assert_eq!(decompress_block(&theirs, &mut output).unwrap(), data.len());
            prop_assert_eq!(&output, &data);
        }

        #[test]
        fn damaged_blocks_are_errors_or_bounded(
            data in compressible(),
            damage in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
            room in 0..70_000usize,
        ) {
            let mut frame = Vec::new();
            ruzstd_compress(&data, &mut frame);
            if frame.is_empty() {
                frame = zstd::bulk::compress(&data, 0).unwrap();
            }
            for (at, byte) in damage {
                let at = at.index(frame.len());
                frame[at] = byte;
            }
            let mut output = vec![0; room.min(u16::MAX as usize)];
            if let Ok(len) = decompress_block(&frame, &mut output) {
                prop_assert!(len <= output.len());
            }
        }

        #[test]
        fn random_bytes_are_errors_or_bounded(frame in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut with_magic = vec![0x28, 0xB5, 0x2F, 0xFD];
            with_magic.extend(&frame);
            let mut output = vec![0; 4_096];
            for frame in [&frame, &with_magic] {
                if let Ok(len) = decompress_block(frame, &mut output) {
                    prop_assert!(len <= output.len());
                }
            }
        }
    }
}
