//! Eureka's XML (XStream's shape): `<port enabled="true">`, `<dataCenterInfo class="…">`,
//! lower-case `<overriddenstatus>`, `_` written `__` and `$` written `_-` in element names, null
//! fields omitted rather than written empty (the Python client cannot read an empty timestamp).
//!
//! Reading turns the document into the JSON value the JSON reader takes (attributes as `@name`,
//! the text of an element with attributes as `$`), so both formats share one lenient reader.

use std::fmt::Write as _;

use quick_xml::escape::{escape, resolve_predefined_entity};
use quick_xml::events::Event;
use serde_json::{Map, Value};

use super::{Application, Applications, Instance, ModelError, Port};

/// `_` → `__`, `$` → `_-`, as XStream's name coder writes element names.
pub fn escape_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '_' => out.push_str("__"),
            '$' => out.push_str("_-"),
            c => out.push(c),
        }
    }
    out
}

/// The inverse of [`escape_name`].
pub fn unescape_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '_' {
            match chars.peek() {
                Some('_') => {
                    chars.next();
                    out.push('_');
                }
                Some('-') => {
                    chars.next();
                    out.push('$');
                }
                _ => out.push('_'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether a metadata key can be written as an element name (after [`escape_name`]). The
/// registry refuses the others, so that XML and JSON clients read the same map.
pub(crate) fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '$'))
        && !name.to_ascii_lowercase().starts_with("xml")
}

fn leaf(out: &mut String, name: &str, value: &str) {
    let _ = write!(out, "<{name}>{}</{name}>", escape(value));
}

fn port(out: &mut String, name: &str, p: Port) {
    let _ = write!(out, "<{name} enabled=\"{}\">{}</{name}>", p.enabled, p.port);
}

fn write_instance_into(out: &mut String, i: &Instance) {
    out.push_str("<instance>");
    if let Some(id) = &i.instance_id {
        leaf(out, "instanceId", id);
    }
    leaf(out, "hostName", &i.host_name);
    leaf(out, "app", &i.app);
    leaf(out, "ipAddr", &i.ip_addr);
    leaf(out, "status", i.status.as_str());
    leaf(out, "overriddenstatus", i.overridden_status.as_str());
    port(out, "port", i.port);
    port(out, "securePort", i.secure_port);
    leaf(out, "countryId", &i.country_id.to_string());
    let _ = write!(
        out,
        "<dataCenterInfo class=\"{}\">",
        escape(i.data_center.class.as_str())
    );
    leaf(out, "name", &i.data_center.name);
    if !i.data_center.metadata.is_empty() {
        out.push_str("<metadata>");
        for (k, v) in &i.data_center.metadata {
            if valid_name(k) {
                leaf(out, &escape_name(k), v);
            }
        }
        out.push_str("</metadata>");
    }
    out.push_str("</dataCenterInfo><leaseInfo>");
    let l = &i.lease;
    for (name, v) in [
        ("renewalIntervalInSecs", l.renewal_interval_secs),
        ("durationInSecs", l.duration_secs),
        ("registrationTimestamp", l.registration_timestamp),
        ("lastRenewalTimestamp", l.last_renewal_timestamp),
        ("evictionTimestamp", l.eviction_timestamp),
        ("serviceUpTimestamp", l.service_up_timestamp),
    ] {
        leaf(out, name, &v.to_string());
    }
    out.push_str("</leaseInfo>");
    if i.metadata.is_empty() {
        out.push_str("<metadata class=\"java.util.Collections$EmptyMap\"/>");
    } else {
        out.push_str("<metadata>");
        for (k, v) in &i.metadata {
            if valid_name(k) {
                leaf(out, &escape_name(k), v);
            } else {
                tracing::debug!("metadata key {k:?} of {} cannot be an XML element", i.id());
            }
        }
        out.push_str("</metadata>");
    }
    for (name, v) in [
        ("appGroupName", &i.app_group_name),
        ("homePageUrl", &i.home_page_url),
        ("statusPageUrl", &i.status_page_url),
        ("healthCheckUrl", &i.health_check_url),
        ("secureHealthCheckUrl", &i.secure_health_check_url),
        ("vipAddress", &i.vip_address),
        ("secureVipAddress", &i.secure_vip_address),
    ] {
        if let Some(v) = v {
            leaf(out, name, v);
        }
    }
    leaf(
        out,
        "isCoordinatingDiscoveryServer",
        &i.is_coordinating_discovery_server.to_string(),
    );
    leaf(
        out,
        "lastUpdatedTimestamp",
        &i.last_updated_timestamp.to_string(),
    );
    leaf(
        out,
        "lastDirtyTimestamp",
        &i.last_dirty_timestamp.to_string(),
    );
    if let Some(a) = i.action_type {
        leaf(out, "actionType", a.as_str());
    }
    if let Some(a) = &i.asg_name {
        leaf(out, "asgName", a);
    }
    out.push_str("</instance>");
}

fn write_application_into(out: &mut String, a: &Application) {
    out.push_str("<application>");
    leaf(out, "name", &a.name);
    for i in &a.instances {
        write_instance_into(out, i);
    }
    out.push_str("</application>");
}

/// `<instance>…</instance>`.
pub fn write_instance(i: &Instance) -> Vec<u8> {
    let mut out = String::new();
    write_instance_into(&mut out, i);
    out.into_bytes()
}

/// `<application><name>…</name><instance>…</instance>…</application>`.
pub fn write_application(a: &Application) -> Vec<u8> {
    let mut out = String::new();
    write_application_into(&mut out, a);
    out.into_bytes()
}

/// `<applications><versions__delta>…</versions__delta><apps__hashcode>…</apps__hashcode>…`.
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
/// gzips the text as it comes, so the whole text is never held either). Each instance is
/// written into one buffer, reused, then passed on.
pub(crate) fn write_applications_from<A: std::borrow::Borrow<Application>>(
    out: &mut impl std::io::Write,
    versions_delta: &str,
    apps_hashcode: &str,
    applications: impl Iterator<Item = A>,
) -> std::io::Result<()> {
    let mut piece = String::with_capacity(4096);
    piece.push_str("<applications>");
    leaf(&mut piece, "versions__delta", versions_delta);
    leaf(&mut piece, "apps__hashcode", apps_hashcode);
    for a in applications {
        let a = a.borrow();
        piece.push_str("<application>");
        leaf(&mut piece, "name", &a.name);
        for i in &a.instances {
            write_instance_into(&mut piece, i);
            out.write_all(piece.as_bytes())?;
            piece.clear();
        }
        piece.push_str("</application>");
    }
    piece.push_str("</applications>");
    out.write_all(piece.as_bytes())
}

// ---- reading -------------------------------------------------------------------------------

struct Element {
    name: String,
    attrs: Map<String, Value>,
    children: Map<String, Value>,
    text: String,
}

impl Element {
    fn new(e: &quick_xml::events::BytesStart<'_>) -> Result<Self, ModelError> {
        let name = unescape_name(&String::from_utf8_lossy(e.name().as_ref()));
        let mut attrs = Map::new();
        for a in e.attributes() {
            let a = a.map_err(|e| ModelError::Xml(e.to_string()))?;
            let key = String::from_utf8_lossy(a.key.as_ref()).into_owned();
            let value = a
                .unescape_value()
                .map_err(|e| ModelError::Xml(e.to_string()))?;
            attrs.insert(format!("@{key}"), Value::String(value.into_owned()));
        }
        Ok(Self {
            name,
            attrs,
            children: Map::new(),
            text: String::new(),
        })
    }

    fn into_value(self) -> Value {
        if self.children.is_empty() && self.attrs.is_empty() {
            return Value::String(self.text.trim().to_owned());
        }
        let mut o = self.attrs;
        if self.children.is_empty() {
            let t = self.text.trim();
            if !t.is_empty() {
                o.insert("$".into(), Value::String(t.to_owned()));
            }
        } else {
            o.extend(self.children);
        }
        Value::Object(o)
    }
}

fn add_child(parent: &mut Element, name: String, value: Value) {
    match parent.children.get_mut(&name) {
        Some(Value::Array(items)) => items.push(value),
        Some(existing) => {
            let first = existing.take();
            *existing = Value::Array(vec![first, value]);
        }
        None => {
            parent.children.insert(name, value);
        }
    }
}

/// Reads an XML document into `{root: value}` in the JSON reader's terms.
pub fn to_value(body: &[u8]) -> Result<Value, ModelError> {
    let mut reader = quick_xml::Reader::from_reader(body);
    let mut stack: Vec<Element> = Vec::new();
    let mut root: Option<(String, Value)> = None;
    let mut buf = Vec::new();
    let bad = |e: quick_xml::Error| ModelError::Xml(e.to_string());
    loop {
        let event = reader.read_event_into(&mut buf).map_err(bad)?;
        match event {
            Event::Start(e) => {
                if root.is_some() {
                    return Err(ModelError::Xml("content after the root element".into()));
                }
                if stack.len() > 32 {
                    return Err(ModelError::Xml("nested too deeply".into()));
                }
                stack.push(Element::new(&e)?);
            }
            Event::Empty(e) => {
                let el = Element::new(&e)?;
                let name = el.name.clone();
                match stack.last_mut() {
                    Some(parent) => add_child(parent, name, el.into_value()),
                    None if root.is_none() => root = Some((name, el.into_value())),
                    None => return Err(ModelError::Xml("content after the root element".into())),
                }
            }
            Event::End(_) => {
                let el = stack
                    .pop()
                    .ok_or_else(|| ModelError::Xml("unbalanced end tag".into()))?;
                let name = el.name.clone();
                match stack.last_mut() {
                    Some(parent) => add_child(parent, name, el.into_value()),
                    None => root = Some((name, el.into_value())),
                }
            }
            Event::Text(t) => {
                if let Some(el) = stack.last_mut() {
                    let t = t.decode().map_err(|e| ModelError::Xml(e.to_string()))?;
                    el.text.push_str(&t);
                } else if !t.iter().all(u8::is_ascii_whitespace) {
                    return Err(ModelError::Xml("text outside the root element".into()));
                }
            }
            Event::CData(t) => {
                if let Some(el) = stack.last_mut() {
                    el.text.push_str(&String::from_utf8_lossy(&t));
                }
            }
            Event::GeneralRef(r) => {
                let resolved = match r.resolve_char_ref().map_err(bad)? {
                    Some(c) => c.to_string(),
                    None => {
                        let name = r.decode().map_err(|e| ModelError::Xml(e.to_string()))?;
                        resolve_predefined_entity(&name)
                            .ok_or_else(|| ModelError::Xml(format!("unknown entity &{name};")))?
                            .to_owned()
                    }
                };
                if let Some(el) = stack.last_mut() {
                    el.text.push_str(&resolved);
                }
            }
            Event::Eof => break,
            Event::Decl(_) | Event::Comment(_) | Event::PI(_) | Event::DocType(_) => {}
        }
        buf.clear();
    }
    if !stack.is_empty() {
        return Err(ModelError::Xml(
            "the document ends inside an element".into(),
        ));
    }
    let (name, value) = root.ok_or_else(|| ModelError::Xml("no root element".into()))?;
    let mut o = Map::new();
    o.insert(name, value);
    Ok(Value::Object(o))
}

/// Reads an instance from an XML body (`<instance>…</instance>`).
pub fn read_instance(body: &[u8], now: u64) -> Result<Instance, ModelError> {
    let v = to_value(body)?;
    if v.get("instance").is_none() {
        return Err(ModelError::Shape(
            "the root element is not <instance>".into(),
        ));
    }
    super::json::instance_from_value(&v, now)
}

/// Reads an `<applications>` document.
pub fn read_applications(body: &[u8], now: u64) -> Result<Applications, ModelError> {
    super::json::applications_from_value(&to_value(body)?, now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Status;

    #[test]
    fn names_escape_as_xstream_does() {
        assert_eq!(escape_name("versions_delta"), "versions__delta");
        assert_eq!(escape_name("a$b_c"), "a_-b__c");
        assert_eq!(unescape_name("a_-b__c"), "a$b_c");
    }

    #[test]
    fn writes_attributes_and_omits_nulls_then_reads_back() {
        let mut i = Instance::new("orders", "10.0.0.1", 8080)
            .with_id("o-1")
            .meta("zone_name", "a<b");
        i.overridden_status = Status::OutOfService;
        i.secure_vip_address = None;
        let apps = Applications::group("1", "UP_1_", [i.clone()]);
        let xml = String::from_utf8(write_applications(&apps)).unwrap();
        assert!(xml.starts_with("<applications><versions__delta>1</versions__delta><apps__hashcode>UP_1_</apps__hashcode><application><name>ORDERS</name><instance>"), "{xml}");
        assert!(xml.contains(r#"<port enabled="true">8080</port>"#));
        assert!(xml.contains(r#"<securePort enabled="false">443</securePort>"#));
        assert!(xml.contains(r#"<dataCenterInfo class="com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo"><name>MyOwn</name></dataCenterInfo>"#));
        assert!(xml.contains("<overriddenstatus>OUT_OF_SERVICE</overriddenstatus>"));
        assert!(xml.contains("<zone__name>a&lt;b</zone__name>"));
        assert!(!xml.contains("secureVipAddress"));
        assert_eq!(read_applications(xml.as_bytes(), 0).unwrap(), apps);
    }

    #[test]
    fn reads_a_registration_in_xml_and_refuses_broken_documents() {
        let body = br#"<?xml version="1.0"?><instance><instanceId>x-1</instanceId><hostName>h</hostName><app>x</app><ipAddr>1.1.1.1</ipAddr><port enabled="true">81</port><metadata><a__b>1</a__b></metadata></instance>"#;
        let i = read_instance(body, 5).unwrap();
        assert_eq!(i.id(), "x-1");
        assert_eq!(i.app, "X");
        assert_eq!(i.port.port, 81);
        assert_eq!(i.metadata["a_b"], "1");
        assert!(read_instance(b"<instance><app>x</instance>", 0).is_err());
        assert!(read_instance(b"<instance>", 0).is_err());
        assert!(read_instance(b"<application/>", 0).is_err());
        assert!(read_instance(b"not xml at all", 0).is_err());
    }
}
