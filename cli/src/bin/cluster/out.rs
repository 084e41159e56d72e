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
