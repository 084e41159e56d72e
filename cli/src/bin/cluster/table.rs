//! Text tables: columns padded to their widest cell, as `kubectl get` prints them.

/// The widest a cell is shown; past it, cut with `…` (`--json` has the whole value). One
/// member's 16,000-character name would otherwise pad every row of the table to it.
pub(crate) const MAX_CELL: usize = 60;

/// A cell as it is printed: control characters escaped, at most [`MAX_CELL`] characters.
fn cell(text: &str) -> String {
    let shown = crate::out::shown(text);
    match shown.char_indices().nth(MAX_CELL - 1) {
        Some((at, _)) => format!("{}…", &shown[..at]),
        None => shown,
    }
}

/// `rows` under `headers`, each column as wide as its widest cell, two spaces apart.
pub(crate) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|c| cell(c)).collect())
        .collect();
    let rows = &rows[..];
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (n, (cell, width)) in row.iter().zip(&widths).enumerate() {
            if n > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            line.extend(std::iter::repeat_n(' ', width - cell.chars().count()));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_escaped_and_cut() {
        let wide = "w".repeat(10_000);
        let out = table(&["A", "B"], &[vec!["x\u{1b}[2J\nforged".into(), wide]]);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(lines[1].starts_with("x\\u{1b}[2J\\nforged  "), "{out}");
        assert_eq!(
            lines[1].chars().count(),
            "x\\u{1b}[2J\\nforged".len() + 2 + MAX_CELL
        );
        assert!(lines[1].ends_with("w…"), "{out}");
    }
}
