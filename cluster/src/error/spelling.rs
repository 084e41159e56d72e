//! "Did you mean": the known name nearest to a misspelt one, by edit distance.
//!
//! Only failures ask (a service name no registry entry has), so this is plain and small: a
//! Levenshtein distance over chars, compared without regard to ASCII case, with names whose
//! length alone puts them out of reach skipped before any distance is computed.

/// The name among `known` nearest to `wanted`, if one is near enough to be a slip of the
/// keyboard: at most a third of `wanted`'s length away (at least 1 edit, at most 3), and not
/// `wanted` itself. Of two as near, the one first in alphabetical order, so the answer does not
/// depend on the order `known` comes in.
pub(crate) fn nearest<'a>(
    wanted: &str,
    known: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let given = wanted;
    let wanted: Vec<char> = wanted.chars().map(|c| c.to_ascii_lowercase()).collect();
    let limit = (wanted.len() / 3).clamp(1, 3);
    let mut best: Option<(usize, &'a str)> = None;
    for name in known {
        if name == given || name.chars().count().abs_diff(wanted.len()) > limit {
            continue;
        }
        let chars: Vec<char> = name.chars().map(|c| c.to_ascii_lowercase()).collect();
        let distance = levenshtein(&wanted, &chars);
        if distance > limit {
            continue;
        }
        let better = match best {
            None => true,
            Some((d, b)) => distance < d || (distance == d && name < b),
        };
        if better {
            best = Some((distance, name));
        }
    }
    best.map(|(_, name)| name)
}

/// The edits (insert, delete, replace one char) that turn `a` into `b`; two rows of the table.
fn levenshtein(a: &[char], b: &[char]) -> usize {
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        current[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let replace = previous[j] + usize::from(ca != cb);
            current[j + 1] = replace.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn distance(a: &str, b: &str) -> usize {
        let a: Vec<char> = a.chars().collect();
        let b: Vec<char> = b.chars().collect();
        levenshtein(&a, &b)
    }

    #[test]
    fn the_distance_counts_single_char_edits() {
        assert_eq!(distance("", ""), 0);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("inventory", "inventroy"), 2);
        assert_eq!(distance("search", "serch"), 1);
        assert_eq!(distance("größe", "grösse"), 2);
    }

    #[test]
    fn a_near_name_is_suggested_and_a_far_one_is_not() {
        let known = ["inventory", "orders", "payments", "search"];
        assert_eq!(nearest("inventroy", known), Some("inventory"));
        assert_eq!(nearest("serch", known), Some("search"));
        assert_eq!(nearest("Orders", known), Some("orders"));
        assert_eq!(nearest("payment", known), Some("payments"));
        assert_eq!(nearest("billing", known), None);
        // Two letters: one edit away at most, or every short name would be "near".
        assert_eq!(nearest("db", ["dc", "queue"]), Some("dc"));
        assert_eq!(nearest("db", ["ca", "queue"]), None);
        assert_eq!(nearest("search", ["search"]), None, "never the name itself");
        assert_eq!(nearest("search", []), None);
    }

    #[test]
    fn of_two_as_near_the_first_in_alphabetical_order_wins() {
        assert_eq!(nearest("cat", ["hat", "bat"]), Some("bat"));
        assert_eq!(nearest("cat", ["bat", "hat"]), Some("bat"));
        assert_eq!(nearest("cat", ["hat", "cart"]), Some("cart"));
    }
}
