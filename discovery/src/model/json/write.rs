//! Writing Eureka's JSON: root-wrapped entities, `$`/`@enabled` ports, `@Auto` fields as
//! strings, arrays always arrays, fields in the order Eureka writes them.

use std::io::{self, Write};

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

use crate::model::{Application, Applications, Instance, Port};

/// A JSON value whose object keys keep the order they were written in.
#[derive(Debug, Clone)]
pub(crate) enum Ordered {
    Str(String),
    Num(i64),
    Obj(Vec<(&'static str, Ordered)>),
    Map(Vec<(String, Ordered)>),
    Arr(Vec<Ordered>),
}

impl Serialize for Ordered {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Ordered::Str(v) => s.serialize_str(v),
            Ordered::Num(v) => s.serialize_i64(*v),
            Ordered::Obj(fields) => {
                let mut m = s.serialize_map(Some(fields.len()))?;
                for (k, v) in fields {
                    m.serialize_entry(k, v)?;
                }
                m.end()
            }
            Ordered::Map(fields) => {
                let mut m = s.serialize_map(Some(fields.len()))?;
                for (k, v) in fields {
                    m.serialize_entry(k, v)?;
                }
                m.end()
            }
            Ordered::Arr(items) => {
                let mut q = s.serialize_seq(Some(items.len()))?;
                for i in items {
                    q.serialize_element(i)?;
                }
                q.end()
            }
        }
    }
}

fn s(v: impl Into<String>) -> Ordered {
    Ordered::Str(v.into())
}

fn port(p: Port) -> Ordered {
    Ordered::Obj(vec![
        ("$", Ordered::Num(p.port.into())),
        ("@enabled", s(p.enabled.to_string())),
    ])
}

fn num(n: u64) -> Ordered {
    Ordered::Num(i64::try_from(n).unwrap_or(i64::MAX))
}

/// The instance object, unwrapped, fields in the order Eureka's serializer writes them.
pub(crate) fn instance_value(i: &Instance) -> Ordered {
    let mut f: Vec<(&'static str, Ordered)> = Vec::with_capacity(26);
    if let Some(id) = &i.instance_id {
        f.push(("instanceId", s(id)));
    }
    f.push(("hostName", s(&i.host_name)));
    f.push(("app", s(&i.app)));
    f.push(("ipAddr", s(&i.ip_addr)));
    f.push(("status", s(i.status.as_str())));
    f.push(("overriddenStatus", s(i.overridden_status.as_str())));
    f.push(("port", port(i.port)));
    f.push(("securePort", port(i.secure_port)));
    f.push(("countryId", Ordered::Num(i.country_id)));
    let mut dc = vec![
        ("@class", s(&i.data_center.class)),
        ("name", s(&i.data_center.name)),
    ];
    if !i.data_center.metadata.is_empty() {
        dc.push((
            "metadata",
            Ordered::Map(
                i.data_center
                    .metadata
                    .iter()
                    .map(|(k, v)| (k.clone(), s(v)))
                    .collect(),
            ),
        ));
    }
    f.push(("dataCenterInfo", Ordered::Obj(dc)));
    let l = &i.lease;
    f.push((
        "leaseInfo",
        Ordered::Obj(vec![
            ("renewalIntervalInSecs", num(l.renewal_interval_secs)),
            ("durationInSecs", num(l.duration_secs)),
            ("registrationTimestamp", num(l.registration_timestamp)),
            ("lastRenewalTimestamp", num(l.last_renewal_timestamp)),
            ("evictionTimestamp", num(l.eviction_timestamp)),
            ("serviceUpTimestamp", num(l.service_up_timestamp)),
        ]),
    ));
    f.push((
        "metadata",
        if i.metadata.is_empty() {
            Ordered::Obj(vec![("@class", s("java.util.Collections$EmptyMap"))])
        } else {
            Ordered::Map(i.metadata.iter().map(|(k, v)| (k.clone(), s(v))).collect())
        },
    ));
    let optional = [
        ("appGroupName", &i.app_group_name),
        ("homePageUrl", &i.home_page_url),
        ("statusPageUrl", &i.status_page_url),
        ("healthCheckUrl", &i.health_check_url),
        ("secureHealthCheckUrl", &i.secure_health_check_url),
        ("vipAddress", &i.vip_address),
        ("secureVipAddress", &i.secure_vip_address),
    ];
    for (k, v) in optional {
        if let Some(v) = v {
            f.push((k, s(v)));
        }
    }
    f.push((
        "isCoordinatingDiscoveryServer",
        s(i.is_coordinating_discovery_server.to_string()),
    ));
    f.push((
        "lastUpdatedTimestamp",
        s(i.last_updated_timestamp.to_string()),
    ));
    f.push(("lastDirtyTimestamp", s(i.last_dirty_timestamp.to_string())));
    if let Some(a) = i.action_type {
        f.push(("actionType", s(a.as_str())));
    }
    if let Some(a) = &i.asg_name {
        f.push(("asgName", s(a)));
    }
    Ordered::Obj(f)
}

fn application_value(a: &Application) -> Ordered {
    Ordered::Obj(vec![
        ("name", s(&a.name)),
        (
            "instance",
            Ordered::Arr(a.instances.iter().map(instance_value).collect()),
        ),
    ])
}

fn to_bytes(v: Ordered) -> Vec<u8> {
    serde_json::to_vec(&v).unwrap_or_default()
}

/// `{"instance":{…}}`.
pub fn write_instance(i: &Instance) -> Vec<u8> {
    to_bytes(Ordered::Obj(vec![("instance", instance_value(i))]))
}

/// `{"application":{"name":…,"instance":[…]}}`.
pub fn write_application(a: &Application) -> Vec<u8> {
    to_bytes(Ordered::Obj(vec![("application", application_value(a))]))
}

/// `{"applications":{"versions__delta":"1","apps__hashcode":"UP_1_","application":[…]}}`.
///
/// Written one instance at a time: a tree of the whole registry first (as for one instance)
/// held every string of 100,000 instances a second time, and took most of the time.
pub fn write_applications(apps: &Applications) -> Vec<u8> {
    let mut out = Vec::new();
    // Into a Vec: cannot fail.
    let _ = write_applications_from(
        &mut out,
        &apps.versions_delta,
        &apps.apps_hashcode,
        apps.applications.iter(),
    );
    out
}

/// Like [`write_applications`], into `out`, from applications made as they are written (the
/// response cache makes each from the store's leases, so only one is ever held whole, and
/// gzips the text as it comes, so the whole text is never held either).
pub(crate) fn write_applications_from<A: std::borrow::Borrow<Application>>(
    out: &mut impl Write,
    versions_delta: &str,
    apps_hashcode: &str,
    applications: impl Iterator<Item = A>,
) -> io::Result<()> {
    out.write_all(br#"{"applications":{"versions__delta":"#)?;
    serde_json::to_writer(&mut *out, versions_delta)?;
    out.write_all(br#","apps__hashcode":"#)?;
    serde_json::to_writer(&mut *out, apps_hashcode)?;
    out.write_all(br#","application":["#)?;
    for (k, a) in applications.enumerate() {
        let a = a.borrow();
        if k > 0 {
            out.write_all(b",")?;
        }
        out.write_all(br#"{"name":"#)?;
        serde_json::to_writer(&mut *out, &a.name)?;
        out.write_all(br#","instance":["#)?;
        for (k, i) in a.instances.iter().enumerate() {
            if k > 0 {
                out.write_all(b",")?;
            }
            serde_json::to_writer(&mut *out, &instance_value(i))?;
        }
        out.write_all(b"]}")?;
    }
    out.write_all(b"]}}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::json::{read_applications, read_instance};

    #[test]
    fn writes_eurekas_shape_and_reads_it_back() {
        let mut i = Instance::new("orders", "10.0.0.1", 8080).with_id("o-1");
        i.last_dirty_timestamp = 7;
        let out = String::from_utf8(write_instance(&i)).unwrap();
        assert!(
            out.starts_with(
                r#"{"instance":{"instanceId":"o-1","hostName":"10.0.0.1","app":"ORDERS""#
            ),
            "{out}"
        );
        assert!(
            out.contains(r#""port":{"$":8080,"@enabled":"true"}"#),
            "{out}"
        );
        assert!(out.contains(r#""metadata":{"@class":"java.util.Collections$EmptyMap"}"#));
        assert!(out.contains(r#""lastDirtyTimestamp":"7""#));
        assert_eq!(read_instance(out.as_bytes(), 0).unwrap(), i);

        let empty =
            String::from_utf8(write_applications(&Applications::group("1", "", []))).unwrap();
        assert_eq!(
            empty,
            r#"{"applications":{"versions__delta":"1","apps__hashcode":"","application":[]}}"#
        );
        let one = Applications::group("1", "UP_1_", [i]);
        let back = read_applications(&write_applications(&one), 0).unwrap();
        assert_eq!(back, one);
    }

    #[test]
    fn the_registry_written_in_pieces_is_byte_for_byte_the_tree_written_whole() {
        let instances = (0..5).map(|k| {
            Instance::new(["a", "b\"q"][k % 2], "h", 1)
                .with_id(format!("i-{k}"))
                .meta("k", "v\u{e9}\n")
        });
        for apps in [
            Applications::group("7", "UP_5_", instances),
            Applications::group("-1", "", []),
        ] {
            let whole = to_bytes(Ordered::Obj(vec![(
                "applications",
                Ordered::Obj(vec![
                    ("versions__delta", s(&apps.versions_delta)),
                    ("apps__hashcode", s(&apps.apps_hashcode)),
                    (
                        "application",
                        Ordered::Arr(apps.applications.iter().map(application_value).collect()),
                    ),
                ]),
            )]));
            assert_eq!(
                String::from_utf8(write_applications(&apps)).unwrap(),
                String::from_utf8(whole).unwrap()
            );
        }
    }
}
