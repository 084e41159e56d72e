//! The names of the services and functions this node hosts, as the provider reads them from a
//! request: borrowed from the static descriptions when known, so a request's two names cost no
//! allocation (two `String`s per request before); a name no hosted service has is read into a
//! `String`, as before. Only the node's own code adds names (from `&'static` descriptions), so
//! the set is bounded by the program, not by what peers send.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::sync::{LazyLock, RwLock};

use serde::de::{self, Deserializer, Visitor};

type Known = HashSet<&'static str, foldhash::fast::RandomState>;

static KNOWN: LazyLock<RwLock<Known>> = LazyLock::new(|| {
    let mut known = Known::default();
    known.insert(crate::server::describe::SERVICE);
    known.insert(crate::server::describe::FUNCTION);
    RwLock::new(known)
});

/// Makes `name` known: requests naming it borrow it.
pub(crate) fn learn(name: &'static str) {
    let mut known = KNOWN.write().unwrap_or_else(|p| p.into_inner());
    known.insert(name);
}

fn known(name: &str) -> Option<&'static str> {
    let known = KNOWN.read().unwrap_or_else(|p| p.into_inner());
    known.get(name).copied()
}

/// `name`, borrowed if it is known, else copied.
pub(super) fn of(name: &str) -> Cow<'static, str> {
    known(name).map_or_else(|| Cow::Owned(name.to_owned()), Cow::Borrowed)
}

/// Reads one name of a request.
pub(super) fn read<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Cow<'static, str>, D::Error> {
    struct Name;
    impl Visitor<'_> for Name {
        type Value = Cow<'static, str>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a name")
        }
        fn visit_str<E: de::Error>(self, name: &str) -> Result<Self::Value, E> {
            Ok(of(name))
        }
        fn visit_string<E: de::Error>(self, name: String) -> Result<Self::Value, E> {
            Ok(known(&name).map_or(Cow::Owned(name), Cow::Borrowed))
        }
    }
    deserializer.deserialize_str(Name)
}

/// [`read`] as a serde value, for `SeqAccess::next_element`.
pub(super) struct Name(pub(super) Cow<'static, str>);

impl<'de> serde::Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        read(deserializer).map(Name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_name_is_borrowed_and_another_is_read_into_a_string() {
        learn("names-test.search");
        let read = |name: &str| {
            let bytes = bincode::serialize(name).unwrap();
            let Name(name) = bincode::deserialize(&bytes).unwrap();
            name
        };
        assert!(matches!(
            read("names-test.search"),
            Cow::Borrowed("names-test.search")
        ));
        assert!(matches!(read("names-test.other"), Cow::Owned(s) if s == "names-test.other"));
    }
}
