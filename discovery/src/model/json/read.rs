//! Reading Eureka's JSON leniently: strings or numbers, `null` as absent, both spellings of
//! `overriddenStatus`, a bare integer port, a missing lease.

use serde_json::{Map, Value};

use crate::model::{
    ActionType, Application, Applications, DataCenterInfo, Instance, LeaseInfo, ModelError, Port,
    Status,
};

/// Reads a field of an object, treating `null` as absent.
fn get<'a>(o: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    o.get(key).filter(|v| !v.is_null())
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        // XML leaves with attributes come as {"$": text}.
        Value::Object(o) => get(o, "$").and_then(text),
        _ => None,
    }
}

fn str_field(o: &Map<String, Value>, key: &str) -> Option<String> {
    get(o, key).and_then(text)
}

/// A number as Eureka holds it, a Java `long`: one past `i64::MAX` reads as `i64::MAX`, which
/// is what the writers write for it (and what a Java client can read back).
fn u64_of(v: &Value) -> Option<u64> {
    let n = match v {
        Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_i64().map(|i| i.max(0) as u64))
            .or_else(|| n.as_f64().map(|f| f.max(0.0) as u64)),
        Value::String(s) => s.trim().parse().ok(),
        Value::Object(o) => get(o, "$").and_then(u64_of),
        _ => None,
    }?;
    Some(n.min(i64::MAX as u64))
}

fn u64_field(o: &Map<String, Value>, key: &str) -> Option<u64> {
    get(o, key).and_then(u64_of)
}

/// A number Eureka holds as a Java `int` (a lease's seconds, `countryId`): one out of `range`
/// is refused, not saturated. Saturated, a lease of 2^63 s never ended, and a `countryId` past
/// `i32::MAX` was served back to Java clients, which cannot read it.
fn int_field(
    o: &Map<String, Value>,
    key: &str,
    range: std::ops::RangeInclusive<i64>,
) -> Result<Option<i64>, ModelError> {
    let Some(v) = get(o, key) else {
        return Ok(None);
    };
    let n = match v {
        Value::Object(inner) => match get(inner, "$") {
            Some(v) => whole(v),
            None => return Ok(None),
        },
        v => whole(v),
    };
    match n {
        Some(n) if range.contains(&n) => Ok(Some(n)),
        _ => Err(ModelError::Field {
            field: key.to_owned(),
            reason: format!(
                "expected a whole number from {} to {} (a Java int)",
                range.start(),
                range.end()
            ),
        }),
    }
}

/// A whole number, from a JSON number or a string; `None` for anything else, or one too large
/// for an `i64`.
fn whole(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn bool_of(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        },
        Value::Number(n) => n.as_u64().map(|n| n != 0),
        _ => None,
    }
}

fn port_field(o: &Map<String, Value>, key: &str, default: Port) -> Result<Port, ModelError> {
    let Some(v) = get(o, key) else {
        return Ok(default);
    };
    let bad = || ModelError::Field {
        field: key.to_owned(),
        reason: "expected a port number".into(),
    };
    let (number, enabled) = match v {
        Value::Object(p) => (
            get(p, "$").ok_or_else(bad)?,
            get(p, "@enabled")
                .or_else(|| get(p, "enabled"))
                .and_then(bool_of)
                .unwrap_or(default.enabled),
        ),
        other => (other, default.enabled),
    };
    // Not the lenient reader, which takes a negative number for 0 and 1.5 for 1.
    let n = whole(number).ok_or_else(bad)?;
    Ok(Port {
        port: u16::try_from(n).map_err(|_| bad())?,
        enabled,
    })
}

fn string_map(v: Option<&Value>) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    if let Some(Value::Object(m)) = v {
        for (k, v) in m {
            if k == "@class" {
                continue;
            }
            if let Some(t) = text(v) {
                out.insert(k.clone(), t);
            }
        }
    }
    out
}

/// Reads an instance from its object (root-wrapped or not), as leniently as real clients need;
/// `now` fills the timestamps a client left out.
pub fn instance_from_value(v: &Value, now: u64) -> Result<Instance, ModelError> {
    let Value::Object(root) = v else {
        return Err(ModelError::Shape("expected an object".into()));
    };
    let o = match get(root, "instance") {
        Some(Value::Object(inner)) => inner,
        Some(_) => return Err(ModelError::Shape("`instance` is not an object".into())),
        None => root,
    };
    let mut i = Instance::new("", "", 7001);
    i.app = str_field(o, "app").unwrap_or_default().to_ascii_uppercase();
    i.vip_address = None;
    i.instance_id = str_field(o, "instanceId");
    i.host_name = str_field(o, "hostName").unwrap_or_default();
    i.ip_addr = str_field(o, "ipAddr").unwrap_or_default();
    i.app_group_name = str_field(o, "appGroupName");
    i.status = str_field(o, "status")
        .map(|s| Status::lenient(&s))
        .unwrap_or(Status::Up);
    i.overridden_status = str_field(o, "overriddenStatus")
        .or_else(|| str_field(o, "overriddenstatus"))
        .map(|s| Status::lenient(&s))
        .unwrap_or(Status::Unknown);
    i.port = port_field(
        o,
        "port",
        Port {
            port: 7001,
            enabled: true,
        },
    )?;
    i.secure_port = port_field(
        o,
        "securePort",
        Port {
            port: 7002,
            enabled: false,
        },
    )?;
    // Java's clients read an int: a larger one would break their every read of the registry.
    let java_int = i64::from(i32::MIN)..=i64::from(i32::MAX);
    i.country_id = int_field(o, "countryId", java_int)?.unwrap_or(1);
    if let Some(Value::Object(dc)) = get(o, "dataCenterInfo") {
        i.data_center = DataCenterInfo {
            class: str_field(dc, "@class")
                .or_else(|| str_field(dc, "class"))
                .unwrap_or_else(|| crate::model::DEFAULT_DATA_CENTER_CLASS.to_owned()),
            name: str_field(dc, "name").unwrap_or_else(|| "MyOwn".to_owned()),
            metadata: string_map(get(dc, "metadata")),
        };
    }
    if let Some(Value::Object(l)) = get(o, "leaseInfo") {
        // Seconds as a Java int, never negative: 0 (or absent) is the server's default.
        let secs = |key| -> Result<u64, ModelError> {
            let n = int_field(l, key, 0..=i64::from(i32::MAX))?.unwrap_or(0);
            Ok(n.unsigned_abs())
        };
        i.lease = LeaseInfo {
            renewal_interval_secs: secs("renewalIntervalInSecs")?,
            duration_secs: secs("durationInSecs")?,
            registration_timestamp: u64_field(l, "registrationTimestamp").unwrap_or(0),
            last_renewal_timestamp: u64_field(l, "lastRenewalTimestamp").unwrap_or(0),
            eviction_timestamp: u64_field(l, "evictionTimestamp").unwrap_or(0),
            service_up_timestamp: u64_field(l, "serviceUpTimestamp").unwrap_or(0),
        };
    }
    i.metadata = string_map(get(o, "metadata"));
    i.home_page_url = str_field(o, "homePageUrl");
    i.status_page_url = str_field(o, "statusPageUrl");
    i.health_check_url = str_field(o, "healthCheckUrl");
    i.secure_health_check_url = str_field(o, "secureHealthCheckUrl");
    i.vip_address = str_field(o, "vipAddress");
    i.secure_vip_address = str_field(o, "secureVipAddress");
    i.is_coordinating_discovery_server = get(o, "isCoordinatingDiscoveryServer")
        .and_then(bool_of)
        .unwrap_or(false);
    i.last_updated_timestamp = u64_field(o, "lastUpdatedTimestamp").unwrap_or(now);
    i.last_dirty_timestamp = u64_field(o, "lastDirtyTimestamp").unwrap_or(now);
    i.action_type = str_field(o, "actionType").and_then(|a| ActionType::parse(&a));
    i.asg_name = str_field(o, "asgName");
    Ok(i)
}

/// Reads an instance from a JSON body.
pub fn read_instance(body: &[u8], now: u64) -> Result<Instance, ModelError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| ModelError::Json(e.to_string()))?;
    instance_from_value(&v, now)
}

/// One or many: Eureka's readers accept a single object where a list is expected.
fn list(v: Option<&Value>) -> Vec<&Value> {
    match v {
        Some(Value::Array(a)) => a.iter().collect(),
        Some(v @ Value::Object(_)) => vec![v],
        _ => Vec::new(),
    }
}

fn application_from_value(v: &Value, now: u64) -> Result<Application, ModelError> {
    let Value::Object(o) = v else {
        return Err(ModelError::Shape("`application` is not an object".into()));
    };
    Ok(Application {
        name: str_field(o, "name")
            .unwrap_or_default()
            .to_ascii_uppercase(),
        instances: list(get(o, "instance"))
            .into_iter()
            .map(|i| instance_from_value(i, now))
            .collect::<Result<_, _>>()?,
    })
}

/// Reads `{"applications":{…}}` (or the unwrapped object).
pub fn applications_from_value(v: &Value, now: u64) -> Result<Applications, ModelError> {
    let Value::Object(root) = v else {
        return Err(ModelError::Shape("expected an object".into()));
    };
    let o = match get(root, "applications") {
        Some(Value::Object(inner)) => inner,
        _ => root,
    };
    Ok(Applications {
        // XML's element names unescape to one underscore.
        versions_delta: str_field(o, "versions__delta")
            .or_else(|| str_field(o, "versions_delta"))
            .unwrap_or_default(),
        apps_hashcode: str_field(o, "apps__hashcode")
            .or_else(|| str_field(o, "apps_hashcode"))
            .unwrap_or_default(),
        applications: list(get(o, "application"))
            .into_iter()
            .map(|a| application_from_value(a, now))
            .collect::<Result<_, _>>()?,
    })
}

/// Reads an `applications` document from a JSON body.
pub fn read_applications(body: &[u8], now: u64) -> Result<Applications, ModelError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| ModelError::Json(e.to_string()))?;
    applications_from_value(&v, now)
}

/// Reads `{"application":{…}}`.
pub fn read_application(body: &[u8], now: u64) -> Result<Application, ModelError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| ModelError::Json(e.to_string()))?;
    match &v {
        Value::Object(root) => application_from_value(get(root, "application").unwrap_or(&v), now),
        _ => Err(ModelError::Shape("expected an object".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_the_js_client_sends_and_fills_eurekas_defaults() {
        let body = br#"{"instance":{"app":"js-demo","instanceId":"js-demo-1","hostName":"127.0.0.1","ipAddr":"127.0.0.1","statusPageUrl":"http://127.0.0.1:3000/info","port":{"$":3000,"@enabled":true},"vipAddress":"js-demo","dataCenterInfo":{"@class":"com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo","name":"MyOwn"},"metadata":{"team":"y","@class":"java.util.HashMap"},"status":"UP"}}"#;
        let i = read_instance(body, 42).unwrap();
        assert_eq!(i.app, "JS-DEMO");
        assert_eq!(i.id(), "js-demo-1");
        assert_eq!(
            i.port,
            Port {
                port: 3000,
                enabled: true
            }
        );
        assert_eq!(i.secure_port.port, 7002);
        assert!(!i.secure_port.enabled);
        assert_eq!(i.last_dirty_timestamp, 42);
        assert_eq!(i.metadata.len(), 1, "@class is dropped from metadata");
        assert_eq!(i.overridden_status, Status::Unknown);
    }

    #[test]
    fn reads_spring_and_py_spellings_nulls_and_bare_ports() {
        let body = br#"{"instance":{"app":"W","hostName":"h","ipAddr":"1.2.3.4","appGroupName":null,"overriddenstatus":"OUT_OF_SERVICE","port":8082,"isCoordinatingDiscoveryServer":"false","lastDirtyTimestamp":1630906182808,"lastUpdatedTimestamp":"1630906180645","leaseInfo":{"durationInSecs":"6"}}}"#;
        let i = read_instance(body, 0).unwrap();
        assert_eq!(i.overridden_status, Status::OutOfService);
        assert_eq!(i.port.port, 8082);
        assert_eq!(i.app_group_name, None);
        assert_eq!(i.last_dirty_timestamp, 1630906182808);
        assert_eq!(i.last_updated_timestamp, 1630906180645);
        assert_eq!(i.lease.duration_secs, 6);
    }

    #[test]
    fn numbers_past_a_java_long_read_as_the_largest_one_and_write_back_the_same() {
        // Found by fuzz/eureka_json: a serviceUpTimestamp of 1e66 read as u64::MAX, and was
        // written back as i64::MAX in JSON and as u64::MAX in XML (which no Java client reads).
        let body = br#"{"instance":{"app":"A","hostName":"h","ipAddr":"1.2.3.4","lastDirtyTimestamp":"18446744073709551615","leaseInfo":{"serviceUpTimestamp":1111111111111111111111111111111111111111111111111111111111111111110}}}"#;
        let i = read_instance(body, 0).unwrap();
        assert_eq!(i.lease.service_up_timestamp, i64::MAX as u64);
        assert_eq!(i.last_dirty_timestamp, i64::MAX as u64);
        let again = read_instance(&crate::model::json::write_instance(&i), 0).unwrap();
        assert_eq!(again, i);
        let xml = crate::model::xml::write_instance(&i);
        assert_eq!(crate::model::xml::read_instance(&xml, 0).unwrap(), i);
    }

    #[test]
    fn malformed_bodies_are_errors_not_panics() {
        assert!(read_instance(b"{not json", 0).is_err());
        assert!(read_instance(b"[1,2]", 0).is_err());
        assert!(read_instance(br#"{"instance":{"port":{"$":"x"}}}"#, 0).is_err());
        assert!(read_instance(br#"{"instance":{"port":70000}}"#, 0).is_err());
    }
}
