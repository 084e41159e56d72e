//! What replication puts on the wire: Eureka's `ReplicationInstance` items and the batch
//! request and response around them.

use serde::{Deserialize, Serialize};

use crate::model::{Instance, json};

/// A replicated operation, as Eureka names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// A (re-)registration, with the instance.
    Register,
    /// A renewal.
    Heartbeat,
    /// A cancellation.
    Cancel,
    /// A status override.
    StatusUpdate,
    /// The removal of an override.
    DeleteStatusOverride,
}

/// One entry of a replication batch (`ReplicationInstance`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Item {
    /// The application.
    pub app_name: String,
    /// The instance id.
    pub id: String,
    /// The sender's `lastDirtyTimestamp`.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "loose_u64")]
    pub last_dirty_timestamp: Option<u64>,
    /// The status (for status updates and heartbeats).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The override, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overridden_status: Option<String>,
    /// The instance (for registrations), unwrapped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_info: Option<serde_json::Value>,
    /// What to do.
    pub action: Action,
}

mod loose_u64 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_u64(*v),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        Ok(match Option::<serde_json::Value>::deserialize(d)? {
            Some(serde_json::Value::Number(n)) => n.as_u64(),
            Some(serde_json::Value::String(s)) => s.trim().parse().ok(),
            _ => None,
        })
    }
}

impl Item {
    /// An item with no payload.
    pub fn new(action: Action, app: &str, id: &str) -> Self {
        Self {
            app_name: app.to_ascii_uppercase(),
            id: id.to_owned(),
            last_dirty_timestamp: None,
            status: None,
            overridden_status: None,
            instance_info: None,
            action,
        }
    }

    /// A registration of this instance.
    pub fn register(i: &Instance) -> Self {
        let mut item = Self::new(Action::Register, &i.app, i.id());
        item.last_dirty_timestamp = Some(i.last_dirty_timestamp);
        item.status = Some(i.status.as_str().to_owned());
        item.instance_info = serde_json::to_value(json::instance_value(i)).ok();
        item
    }

    /// A heartbeat.
    pub fn heartbeat(app: &str, id: &str, last_dirty: Option<u64>) -> Self {
        let mut item = Self::new(Action::Heartbeat, app, id);
        item.last_dirty_timestamp = last_dirty;
        item
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Batch {
    pub(super) replication_list: Vec<Item>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ItemResponse {
    pub(super) status_code: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) response_entity: Option<serde_json::Value>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct BatchResponse {
    pub(super) response_list: Vec<ItemResponse>,
}
