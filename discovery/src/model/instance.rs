//! One registered instance, as Eureka describes it (`InstanceInfo`).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// The `@class` of the data-centre info of machines that are not on AWS.
pub const DEFAULT_DATA_CENTER_CLASS: &str =
    "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo";

/// An instance's status, as Eureka names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[non_exhaustive]
pub enum Status {
    /// Ready for traffic.
    #[default]
    Up,
    /// Not ready (failing its health check).
    Down,
    /// Starting up.
    Starting,
    /// Taken out of traffic on purpose.
    OutOfService,
    /// Unknown: after an override was removed without a fallback status.
    Unknown,
}

impl Status {
    /// Eureka's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Up => "UP",
            Status::Down => "DOWN",
            Status::Starting => "STARTING",
            Status::OutOfService => "OUT_OF_SERVICE",
            Status::Unknown => "UNKNOWN",
        }
    }

    /// Like Eureka's `toEnum`: anything it does not know is `UNKNOWN`.
    pub fn lenient(s: &str) -> Status {
        s.parse().unwrap_or(Status::Unknown)
    }
}

/// A status name that is not one of Eureka's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an instance status (UP, DOWN, STARTING, OUT_OF_SERVICE, UNKNOWN)")]
pub struct BadStatus(pub String);

impl FromStr for Status {
    type Err = BadStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.trim().to_ascii_uppercase().as_str() {
            "UP" => Status::Up,
            "DOWN" => Status::Down,
            "STARTING" => Status::Starting,
            "OUT_OF_SERVICE" => Status::OutOfService,
            "UNKNOWN" => Status::Unknown,
            _ => return Err(BadStatus(s.to_owned())),
        })
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happened to an instance, in a delta.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ActionType {
    /// Registered (or re-registered).
    Added,
    /// Its status changed.
    Modified,
    /// Cancelled or expired.
    Deleted,
}

impl ActionType {
    /// Eureka's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionType::Added => "ADDED",
            ActionType::Modified => "MODIFIED",
            ActionType::Deleted => "DELETED",
        }
    }

    /// From Eureka's name; `None` for anything else.
    pub fn parse(s: &str) -> Option<ActionType> {
        match s.trim().to_ascii_uppercase().as_str() {
            "ADDED" => Some(ActionType::Added),
            "MODIFIED" => Some(ActionType::Modified),
            "DELETED" => Some(ActionType::Deleted),
            _ => None,
        }
    }
}

/// A port and whether it is enabled (`{"$":8080,"@enabled":"true"}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Port {
    /// The port number.
    pub port: u16,
    /// Whether it is in use.
    pub enabled: bool,
}

/// Where the instance runs (`dataCenterInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataCenterInfo {
    /// The Java class, `@class` (Eureka's clients need it).
    pub class: String,
    /// `MyOwn`, `Netflix` or `Amazon`.
    pub name: String,
    /// Amazon's metadata (instance-id, …), empty elsewhere.
    pub metadata: BTreeMap<String, String>,
}

impl Default for DataCenterInfo {
    fn default() -> Self {
        Self {
            class: DEFAULT_DATA_CENTER_CLASS.to_owned(),
            name: "MyOwn".to_owned(),
            metadata: BTreeMap::new(),
        }
    }
}

/// The lease as a response shows it (`leaseInfo`); timestamps in epoch milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaseInfo {
    /// How often the instance says it is alive, in seconds (0: the server's default).
    pub renewal_interval_secs: u64,
    /// How long after its last heartbeat it counts as gone, in seconds (0: the server's default).
    pub duration_secs: u64,
    /// When it registered.
    pub registration_timestamp: u64,
    /// When it last renewed.
    pub last_renewal_timestamp: u64,
    /// When it was cancelled, 0 if it was not.
    pub eviction_timestamp: u64,
    /// When it first came up.
    pub service_up_timestamp: u64,
}

/// One instance of one application, Eureka's `InstanceInfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Instance {
    /// Its id, unique in the registry; see [`Instance::id`] for the fallbacks.
    pub instance_id: Option<String>,
    /// Its host name.
    pub host_name: String,
    /// The application, upper-cased.
    pub app: String,
    /// The application group.
    pub app_group_name: Option<String>,
    /// Its IP address.
    pub ip_addr: String,
    /// Its status as it reports it (or as an override set it).
    pub status: Status,
    /// A status an operator set over the reported one, `UNKNOWN` for none.
    pub overridden_status: Status,
    /// The plain port.
    pub port: Port,
    /// The TLS port.
    pub secure_port: Port,
    /// Always 1 in practice.
    pub country_id: i64,
    /// Where it runs.
    pub data_center: DataCenterInfo,
    /// The lease.
    pub lease: LeaseInfo,
    /// Free-form string pairs.
    pub metadata: BTreeMap<String, String>,
    /// Home page.
    pub home_page_url: Option<String>,
    /// Status page.
    pub status_page_url: Option<String>,
    /// Health check.
    pub health_check_url: Option<String>,
    /// Health check over TLS.
    pub secure_health_check_url: Option<String>,
    /// The VIP addresses it serves, comma-separated.
    pub vip_address: Option<String>,
    /// The secure VIP addresses it serves, comma-separated.
    pub secure_vip_address: Option<String>,
    /// Whether it is itself a discovery server.
    pub is_coordinating_discovery_server: bool,
    /// Last change on the server, epoch ms.
    pub last_updated_timestamp: u64,
    /// Last change on the client, epoch ms: the newer copy wins.
    pub last_dirty_timestamp: u64,
    /// What happened to it, in a delta.
    pub action_type: Option<ActionType>,
    /// AWS auto-scaling group.
    pub asg_name: Option<String>,
}

impl Instance {
    /// An instance of `app` on `host` (also its IP address) at `port`, `UP`, with Eureka's
    /// defaults for everything else.
    pub fn new(app: &str, host: &str, port: u16) -> Self {
        Self {
            instance_id: None,
            host_name: host.to_owned(),
            app: app.to_ascii_uppercase(),
            app_group_name: None,
            ip_addr: host.to_owned(),
            status: Status::Up,
            overridden_status: Status::Unknown,
            port: Port {
                port,
                enabled: true,
            },
            secure_port: Port {
                port: 443,
                enabled: false,
            },
            country_id: 1,
            data_center: DataCenterInfo::default(),
            lease: LeaseInfo::default(),
            metadata: BTreeMap::new(),
            home_page_url: None,
            status_page_url: None,
            health_check_url: None,
            secure_health_check_url: None,
            vip_address: Some(app.to_ascii_lowercase()),
            secure_vip_address: None,
            is_coordinating_discovery_server: false,
            last_updated_timestamp: 0,
            last_dirty_timestamp: 0,
            action_type: None,
            asg_name: None,
        }
    }

    /// Sets the instance id.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
        self
    }

    /// Adds a metadata pair.
    pub fn meta(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Sets the lease: heartbeat interval and duration, in seconds.
    pub fn lease(mut self, renewal_interval_secs: u64, duration_secs: u64) -> Self {
        self.lease.renewal_interval_secs = renewal_interval_secs;
        self.lease.duration_secs = duration_secs;
        self
    }

    /// The id Eureka keys it by: `instanceId`, else the AWS instance id, else the host name.
    pub fn id(&self) -> &str {
        if let Some(id) = self.instance_id.as_deref().filter(|s| !s.is_empty()) {
            return id;
        }
        if let Some(id) = self
            .data_center
            .metadata
            .get("instance-id")
            .filter(|s| !s.is_empty())
        {
            return id;
        }
        &self.host_name
    }

    /// Whether `vip` is one of its comma-separated VIP addresses (`secure` for the secure ones).
    pub fn serves_vip(&self, vip: &str, secure: bool) -> bool {
        let list = if secure {
            &self.secure_vip_address
        } else {
            &self.vip_address
        };
        list.as_deref()
            .is_some_and(|l| l.split(',').any(|v| v.trim().eq_ignore_ascii_case(vip)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_falls_back_to_the_aws_id_then_the_host_name() {
        let mut i = Instance::new("orders", "10.0.0.1", 8080);
        assert_eq!(i.id(), "10.0.0.1");
        i.data_center
            .metadata
            .insert("instance-id".into(), "i-123".into());
        assert_eq!(i.id(), "i-123");
        i.instance_id = Some(String::new());
        assert_eq!(i.id(), "i-123");
        assert_eq!(i.with_id("orders-1").id(), "orders-1");
    }

    #[test]
    fn statuses_parse_leniently_and_vips_match_in_lists() {
        assert_eq!(Status::lenient("out_of_service"), Status::OutOfService);
        assert_eq!(Status::lenient("sleeping"), Status::Unknown);
        assert!("sleeping".parse::<Status>().is_err());
        let mut i = Instance::new("orders", "h", 1);
        i.vip_address = Some("orders, orders-v2".into());
        assert!(i.serves_vip("ORDERS-V2", false));
        assert!(!i.serves_vip("orders", true));
    }
}
