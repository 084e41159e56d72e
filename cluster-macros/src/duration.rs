//! Durations written in attributes: a whole number followed by `ms`, `s`, `m` or `h`.
//!
//! Deliberately stricter than humantime: no fractions, no spaces, no combined units, so that a
//! value means the same thing to everyone who reads the trait.

/// Why a duration string was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DurationError {
    /// Not `<digits><unit>`.
    Malformed,
    /// Does not fit in a `u64` of milliseconds.
    TooLarge,
}

/// The accepted form, for error messages.
pub(crate) const DURATION_HELP: &str =
    "expected a whole number followed by ms, s, m or h, e.g. \"250ms\", \"5s\", \"2m\", \"1h\"";

/// Parses `text` into a number of milliseconds.
pub(crate) fn parse_millis(text: &str) -> Result<u64, DurationError> {
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(digits_end);
    if digits.is_empty() {
        return Err(DurationError::Malformed);
    }
    let per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(DurationError::Malformed),
    };
    // Only ASCII digits remain, so the only possible parse failure is overflow.
    let count: u64 = digits.parse().map_err(|_| DurationError::TooLarge)?;
    count.checked_mul(per_unit).ok_or(DurationError::TooLarge)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_every_unit() {
        assert_eq!(parse_millis("250ms"), Ok(250));
        assert_eq!(parse_millis("5s"), Ok(5_000));
        assert_eq!(parse_millis("2m"), Ok(120_000));
        assert_eq!(parse_millis("1h"), Ok(3_600_000));
        assert_eq!(parse_millis("0ms"), Ok(0));
        assert_eq!(parse_millis("007s"), Ok(7_000));
    }

    #[test]
    fn refuses_other_shapes() {
        for text in [
            "", "5", "ms", "5 s", " 5s", "5s ", "1.5s", "-1s", "+1s", "5S", "5sec", "5d", "1h30m",
            "5us",
        ] {
            assert_eq!(
                parse_millis(text),
                Err(DurationError::Malformed),
                "{text:?}"
            );
        }
    }

    #[test]
    fn refuses_overflow() {
        assert_eq!(
            parse_millis("99999999999999999999ms"),
            Err(DurationError::TooLarge)
        );
        assert_eq!(
            parse_millis("18446744073709551615h"),
            Err(DurationError::TooLarge)
        );
        assert_eq!(parse_millis("18446744073709551615ms"), Ok(u64::MAX));
    }
}
