//! Which text the registry can hold: only what XML 1.0 can carry, since XML is how Eureka's
//! clients read the registry by default (the Python client always does). One instance holding
//! a character XML cannot carry makes every XML read of the registry fail, for every client.

use super::Instance;

/// Whether XML 1.0 can carry `c` (its `Char` production): tab, newline, carriage return and
/// everything from U+0020 up, except U+FFFE and U+FFFF (Rust strings hold no surrogates).
pub(crate) fn xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r') || (c >= ' ' && c != '\u{FFFE}' && c != '\u{FFFF}')
}

/// The first character of `s` XML cannot carry.
pub(crate) fn unrepresentable(s: &str) -> Option<char> {
    s.chars().find(|c| !xml_char(*c))
}

/// The text fields of `i` by their JSON names, metadata apart.
fn fields(i: &Instance) -> [(&'static str, &str); 14] {
    fn opt(s: &Option<String>) -> &str {
        s.as_deref().unwrap_or("")
    }
    [
        ("instanceId", opt(&i.instance_id)),
        ("hostName", i.host_name.as_str()),
        ("app", i.app.as_str()),
        ("appGroupName", opt(&i.app_group_name)),
        ("ipAddr", i.ip_addr.as_str()),
        ("dataCenterInfo.@class", i.data_center.class.as_str()),
        ("dataCenterInfo.name", i.data_center.name.as_str()),
        ("homePageUrl", opt(&i.home_page_url)),
        ("statusPageUrl", opt(&i.status_page_url)),
        ("healthCheckUrl", opt(&i.health_check_url)),
        ("secureHealthCheckUrl", opt(&i.secure_health_check_url)),
        ("vipAddress", opt(&i.vip_address)),
        ("secureVipAddress", opt(&i.secure_vip_address)),
        ("asgName", opt(&i.asg_name)),
    ]
}

/// How much text `i` holds, in bytes: every field, and its metadata's keys and values (the
/// data centre's included).
pub(crate) fn instance_text_len(i: &Instance) -> usize {
    let map = |m: &std::collections::BTreeMap<String, String>| -> usize {
        m.iter().map(|(k, v)| k.len().saturating_add(v.len())).sum()
    };
    fields(i)
        .iter()
        .map(|(_, v)| v.len())
        .sum::<usize>()
        .saturating_add(map(&i.metadata))
        .saturating_add(map(&i.data_center.metadata))
}

/// The first field of `i` holding a character XML cannot carry, by its JSON name
/// (`metadata.key` for a metadata value), and the character.
pub(crate) fn instance_unrepresentable(i: &Instance) -> Option<(String, char)> {
    let named = fields(i)
        .into_iter()
        .map(|(f, v)| (f.to_owned(), v))
        .chain(pairs("metadata", &i.metadata))
        .chain(pairs("dataCenterInfo.metadata", &i.data_center.metadata));
    for (field, value) in named {
        if let Some(c) = unrepresentable(value) {
            return Some((field, c));
        }
    }
    None
}

/// The first metadata key of `i` (its own or its data centre's) that cannot be an XML element
/// name, with the map it is in. Served, it would reach JSON clients and not XML ones (which
/// cannot be sent it), and the two formats would disagree about the instance.
pub(crate) fn instance_bad_key(i: &Instance) -> Option<(&'static str, &str)> {
    let own = i.metadata.keys().map(|k| ("metadata", k));
    let dc = i
        .data_center
        .metadata
        .keys()
        .map(|k| ("dataCenterInfo.metadata", k));
    own.chain(dc)
        .find(|(_, k)| !super::xml::valid_name(k))
        .map(|(m, k)| (m, k.as_str()))
}

/// A map's keys and values as (field name, text) pairs.
fn pairs<'a>(
    prefix: &'a str,
    map: &'a std::collections::BTreeMap<String, String>,
) -> impl Iterator<Item = (String, &'a str)> + 'a {
    map.iter().flat_map(move |(k, v)| {
        let key = (format!("{prefix} key {k:?}"), k.as_str());
        let value = (format!("{prefix}.{k}"), v.as_str());
        [key, value]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_and_nonchars_are_refused_whitespace_is_not() {
        assert_eq!(unrepresentable("a\tb\nc\rd é 🦀"), None);
        assert_eq!(unrepresentable("h\u{1}"), Some('\u{1}'));
        assert_eq!(unrepresentable("\u{0}"), Some('\u{0}'));
        assert_eq!(unrepresentable("x\u{FFFF}"), Some('\u{FFFF}'));
        let i = Instance::new("a", "h", 1).meta("k", "v\u{0}");
        assert_eq!(
            instance_unrepresentable(&i),
            Some(("metadata.k".to_owned(), '\u{0}'))
        );
        let i = Instance::new("a", "h", 1).meta("k\u{8}", "v");
        assert_eq!(instance_unrepresentable(&i).unwrap().1, '\u{8}');
    }

    #[test]
    fn metadata_keys_must_be_xml_names_in_both_maps() {
        let ok = Instance::new("a", "h", 1)
            .meta("management.port", "1")
            .meta("a_b$c-d", "2");
        assert_eq!(instance_bad_key(&ok), None);
        for key in ["1st", "with space", "a:b", "xmlns", "@x", "é", ""] {
            let i = Instance::new("a", "h", 1).meta(key, "v");
            assert_eq!(instance_bad_key(&i), Some(("metadata", key)), "{key:?}");
        }
        let mut i = Instance::new("a", "h", 1);
        i.data_center.metadata.insert("a b".into(), "v".into());
        assert_eq!(
            instance_bad_key(&i),
            Some(("dataCenterInfo.metadata", "a b"))
        );
    }

    #[test]
    fn the_text_of_an_instance_counts_every_field_and_metadata() {
        let i = Instance::new("ab", "host", 1);
        // app "AB", hostName and ipAddr "host", the data centre's class and "MyOwn", vip "ab".
        let base = 2 + 4 + 4 + crate::model::DEFAULT_DATA_CENTER_CLASS.len() + 5 + 2;
        assert_eq!(instance_text_len(&i), base);
        assert_eq!(instance_text_len(&i.meta("key", "value")), base + 8);
    }
}
