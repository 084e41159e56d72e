//! The call's budget from the request: `grpc-timeout` (gRPC's format: at most 8 digits and a
//! unit, `H` `M` `S` `m` `u` `n`), or `x-cluster-timeout` in the same format, which wins when
//! both are sent. Anything else in them, and a budget of zero, is `400`: a malformed budget is the client's mistake,
//! and guessing would run a call for longer than it meant. A budget past the route's longest
//! is cut to it; none at all is the route's default.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderName};

pub(crate) const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
pub(crate) const X_CLUSTER_TIMEOUT: HeaderName = HeaderName::from_static("x-cluster-timeout");

/// The budget the headers ask for, if they ask for one; or what is wrong with them.
pub(crate) fn requested(headers: &HeaderMap) -> Result<Option<Duration>, String> {
    for name in [X_CLUSTER_TIMEOUT, GRPC_TIMEOUT] {
        if let Some(value) = headers.get(&name) {
            let parsed = value.to_str().ok().and_then(parse);
            return match parsed {
                Some(d) if d.is_zero() => Err(format!(
                    "`{name}` of zero leaves the call no time: give a positive budget, such as 250m"
                )),
                Some(d) => Ok(Some(d)),
                None => Err(format!(
                    "`{name}` is at most 8 digits and a unit (H, M, S, m, u, n), such as 250m"
                )),
            };
        }
    }
    Ok(None)
}

/// `250m` as 250 ms. `None` for anything but 1 to 8 digits and one unit: no overflow is
/// possible (99,999,999 hours fit a `Duration`).
pub(crate) fn parse(text: &str) -> Option<Duration> {
    let (digits, unit) = text.split_at_checked(text.len().checked_sub(1)?)?;
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_s_format_is_read_and_nothing_else() {
        assert_eq!(parse("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(
            parse("99999999H"),
            Some(Duration::from_secs(99_999_999 * 3600))
        );
        assert_eq!(parse("7n"), Some(Duration::from_nanos(7)));
        for bad in [
            "",
            "m",
            "123456789S",
            "1.5S",
            "-1S",
            "1s",
            "1 S",
            "S1",
            "١S",
            "18446744073709551616S",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn our_header_wins_and_a_malformed_one_is_an_error() {
        let mut h = HeaderMap::new();
        assert_eq!(requested(&h), Ok(None));
        h.insert(GRPC_TIMEOUT, "5S".parse().unwrap());
        assert_eq!(requested(&h), Ok(Some(Duration::from_secs(5))));
        h.insert(X_CLUSTER_TIMEOUT, "100m".parse().unwrap());
        assert_eq!(requested(&h), Ok(Some(Duration::from_millis(100))));
        h.insert(X_CLUSTER_TIMEOUT, "forever".parse().unwrap());
        assert!(requested(&h).unwrap_err().contains("x-cluster-timeout"));
        h.insert(X_CLUSTER_TIMEOUT, "0m".parse().unwrap());
        assert!(requested(&h).unwrap_err().contains("of zero"));
    }
}
