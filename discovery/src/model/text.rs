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

/// The first field of `i` holding a character XML cannot carry, by its JSON name
/// (`metadata.key` for a metadata value), and the character.
pub(crate) fn instance_unrepresentable(i: &Instance) -> Option<(String, char)> {
    fn opt(s: &Option<String>) -> &str {
        s.as_deref().unwrap_or("")
    }
    let fields = [
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
    ];
    let named = fields
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
}
