//! The guide's blocks, and how its lines are compared with what the programs print.

/// A fenced block of the guide and the tag on the line before it.
#[derive(Debug)]
pub(crate) struct Block {
    pub(crate) tag: String,
    /// 1-based, for messages.
    pub(crate) line: usize,
    pub(crate) body: Vec<String>,
}

/// Every fenced block of `text` that has a tag.
pub(crate) fn tagged_blocks(text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let fence = lines[i].trim_start();
        if !fence.starts_with("```") {
            i += 1;
            continue;
        }
        let tag = i
            .checked_sub(1)
            .map(|p| lines[p].trim())
            .and_then(|l| l.strip_prefix("<!--"))
            .and_then(|l| l.strip_suffix("-->"))
            .map(|l| l.trim().to_owned());
        let end = (i + 1..lines.len())
            .find(|&j| lines[j].trim_start().starts_with("```"))
            .unwrap_or_else(|| panic!("guide.md:{}: a block never closed", i + 1));
        if let Some(tag) = tag {
            blocks.push(Block {
                tag,
                line: i + 1,
                body: lines[i + 1..end].iter().map(|l| (*l).to_owned()).collect(),
            });
        }
        i = end + 1;
    }
    blocks
}

/// The lines between `guide:start REGION` and `guide:end REGION` of `text`, without their
/// common indentation.
pub(crate) fn region(text: &str, name: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let marker = |l: &str, what: &str| {
        l.trim()
            .trim_start_matches(['/', '#'])
            .trim()
            .strip_prefix(what)
            .is_some_and(|rest| rest.trim() == name)
    };
    let start = lines
        .iter()
        .position(|l| marker(l, "guide:start"))
        .unwrap_or_else(|| panic!("no `guide:start {name}`"));
    let end = lines
        .iter()
        .position(|l| marker(l, "guide:end"))
        .unwrap_or_else(|| panic!("no `guide:end {name}`"));
    let body = &lines[start + 1..end];
    let indent = body
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    body.iter()
        .map(|l| l.get(indent..).unwrap_or("").to_owned())
        .collect()
}

/// A line as compared: whitespace runs as one space, and the numbers that differ from run to
/// run as `N`: ports (`127.0.0.1:N`), durations (`Nms`, `N ms`, `N.Ns`) and generations (ten
/// digits or more). Any other number, a count of items or an exit code, must be the same.
pub(crate) fn normal(line: &str) -> String {
    let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_number = chars[i].is_ascii_digit()
            && (i == 0 || !(chars[i - 1].is_ascii_alphanumeric() || chars[i - 1] == '.'));
        if !starts_number {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        // The number: digits, and a fraction.
        let mut end = i;
        while end < chars.len() && chars[end].is_ascii_digit() {
            end += 1;
        }
        let whole = end - i;
        if end + 1 < chars.len() && chars[end] == '.' && chars[end + 1].is_ascii_digit() {
            end += 1;
            while end < chars.len() && chars[end].is_ascii_digit() {
                end += 1;
            }
        }
        let after: String = chars[end..].iter().collect();
        let unit = ["ms", " ms", "s", " s"].iter().any(|unit| {
            after.strip_prefix(unit).is_some_and(|rest| {
                !rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            })
        });
        let port = out.ends_with("127.0.0.1:");
        if unit || port || whole >= 10 {
            out.push('N');
        } else {
            out.extend(&chars[i..end]);
        }
        i = end;
    }
    out
}

/// Whether a line of the guide's output is one to look for: not blank, and not `…`, which
/// stands for lines the guide leaves out.
pub(crate) fn shown(line: &str) -> bool {
    !matches!(line.trim(), "" | "…")
}

/// The loopback addresses in a line.
pub(crate) fn addresses(line: &str) -> Vec<String> {
    line.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == ':'))
        .filter(|w| {
            w.strip_prefix("127.0.0.1:")
                .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_owned)
        .collect()
}

/// Splits a shell command into words: single and double quotes, nothing else.
pub(crate) fn words(command: &str) -> Vec<String> {
    let (mut words, mut word, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    for c in command.chars() {
        match (quote, c) {
            (None, '\'' | '"') => (quote, any) = (Some(c), true),
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if any {
                    words.push(std::mem::take(&mut word));
                }
                any = false;
            }
            (_, c) => {
                word.push(c);
                any = true;
            }
        }
    }
    assert!(quote.is_none(), "an unclosed quote in `{command}`");
    if any {
        words.push(word);
    }
    words
}
