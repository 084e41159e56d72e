//! What `cluster` prints on stdout, for people and for pipes. A reader that goes away
//! (`cluster watch | head -3`) is not a crash: the write fails, the command ends, the node
//! leaves cleanly, as a Unix tool that gets SIGPIPE would stop.

use std::fmt::Display;
use std::io::Write;

/// Writes `text` and a newline, flushed (a `watch` line reaches its reader at once); false if
/// nobody reads stdout any more.
pub(crate) fn line(text: impl Display) -> bool {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").and_then(|()| out.flush()).is_ok()
}

/// Writes `text` as it is (a table, which ends in its own newline).
pub(crate) fn text(text: &str) -> bool {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_ok()
}

/// Writes `value` as JSON (indented if `pretty`) and a newline, through a buffer: a large
/// answer is written as it is serialised, never held as text.
pub(crate) fn json(value: &impl serde::Serialize, pretty: bool) -> bool {
    let mut out = std::io::BufWriter::with_capacity(64 << 10, std::io::stdout().lock());
    let written = match pretty {
        true => serde_json::to_writer_pretty(&mut out, value),
        false => serde_json::to_writer(&mut out, value),
    };
    written.is_ok() && writeln!(out).and_then(|()| out.flush()).is_ok()
}

/// `text` as it may reach a terminal: every control character (escape sequences, a newline that
/// would start a forged row, a bell) written as its Rust escape. Names come from the registry,
/// which any member of the cluster writes.
pub(crate) fn shown(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_debug().collect()
            } else if invisible(c) {
                c.escape_unicode().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

/// Unicode's format characters that change how text around them reads without showing (a
/// right-to-left override, a zero-width space): a name with one can pass for another.
fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{061C}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
    )
}

/// A message of several lines as it may reach a terminal: control characters escaped as in
/// [`shown`], its own line breaks kept.
pub(crate) fn shown_lines(text: &str) -> String {
    text.split('\n').map(shown).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_escaped() {
        assert_eq!(shown("svc\u{1b}[2J\nrow\u{7}"), "svc\\u{1b}[2J\\nrow\\u{7}");
        assert_eq!(shown("web\u{202e}1"), "web\\u{202e}1");
        assert_eq!(shown("plain é"), "plain é");
        assert_eq!(shown_lines("a\u{1b}\nb"), "a\\u{1b}\nb");
    }
}
