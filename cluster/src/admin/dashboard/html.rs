//! The dashboard's page, as HTML: every value escaped, no script, a refresh every few seconds.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::View;
use super::rates::{self, WINDOW};
use crate::registry::{RegistryEvent, ServiceEntry};

/// How often the page reloads itself.
pub(crate) const REFRESH_SECONDS: u32 = 5;

/// Text made safe to place in HTML, in an element or in a quoted attribute.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters other than whitespace, and the invisible ones that reorder or
            // hide text (bidirectional overrides, zero-width), show as a replacement.
            c if (c.is_control() && !matches!(c, '\n' | '\t')) || invisible(c) => {
                out.push('\u{fffd}')
            }
            c => out.push(c),
        }
    }
    out
}

/// Unicode's format characters that change how text around them reads without showing: a
/// name with a right-to-left override or a zero-width space can pass for another.
pub(crate) fn invisible(c: char) -> bool {
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

/// The whole page.
pub(crate) fn page(view: &View<'_>) -> String {
    let mut out = String::with_capacity(16 << 10);
    let node = &view.node;
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <title>{name} · cluster</title><style>{STYLE}</style></head><body>\
         <header><h1>cluster</h1><p>as node <b>{name}</b> ({addr}, generation {generation}) \
         sees it; refreshed every {REFRESH_SECONDS} s</p></header>",
        name = escape(&node.name),
        addr = node.addr,
        generation = node.generation,
    );
    nodes(&mut out, view);
    services(&mut out, view);
    calls(&mut out, view);
    events(&mut out, view);
    out.push_str("</body></html>");
    out
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}\
h1{font-size:1.4em;margin:0}h2{font-size:1.1em;margin:1.6em 0 .4em}header p{margin:.2em 0;color:#555}\
table{border-collapse:collapse;background:#fff;min-width:40em}th,td{padding:.3em .8em;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}\
th{background:#eee}td.n{text-align:right;font-variant-numeric:tabular-nums}\
.ok{color:#17663a}.warn{color:#8a5a00;font-weight:bold}.bad{color:#b00020;font-weight:bold}\
.empty{color:#777;font-style:italic}code{font-size:.95em}";

/// Rows a table shows at most; the rest are counted (`cluster nodes --json` lists them all). A
/// page must stay cheap at the registry's limits (2,048 nodes of 256 entries each).
pub(crate) const MAX_ROWS: usize = 200;

fn nodes(out: &mut String, view: &View<'_>) {
    let mut nodes = view.nodes.clone();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let _ = write!(
        out,
        "<h2>Nodes ({})</h2><table><tr><th>node</th><th>address</th><th>generation</th><th>wire</th><th>state</th><th>services</th></tr>",
        nodes.len()
    );
    // Each node's entries, found once: not a pass over every entry per node.
    let mut by_node: HashMap<&str, Vec<&ServiceEntry>> = HashMap::new();
    for e in &view.services {
        by_node.entry(e.node.name.as_str()).or_default().push(e);
    }
    for n in nodes.iter().take(MAX_ROWS) {
        let entries = by_node.get(n.name.as_str()).map_or(&[][..], Vec::as_slice);
        let (state, class) = if entries.iter().any(|e| e.suspect) {
            ("suspect", "warn")
        } else {
            ("live", "ok")
        };
        let mut services: Vec<String> = entries
            .iter()
            .map(|e| format!("{}@{}", e.description.name, e.description.version))
            .collect();
        services.sort();
        let this = if n.name == view.node.name {
            " (this node)"
        } else {
            ""
        };
        let _ = write!(
            out,
            "<tr><td>{}{this}</td><td><code>{}</code></td><td class=\"n\">{}</td><td>{}</td><td class=\"{class}\">{state}</td><td>{}</td></tr>",
            escape(&n.name),
            n.addr,
            n.generation,
            escape(&n.wire_text().unwrap_or_else(|| "1".to_owned())),
            escape(&services.join(", ")),
        );
    }
    more(out, nodes.len(), 6);
}

/// The first names of a list, and how many more there are.
fn listed(names: &[&str]) -> String {
    const SHOWN: usize = 20;
    match names.len() {
        n if n > SHOWN => format!("{}, … and {} more", names[..SHOWN].join(", "), n - SHOWN),
        _ => names.join(", "),
    }
}

/// Ends a table of `rows` rows, saying how many were left out of it.
fn more(out: &mut String, rows: usize, columns: usize) {
    if rows > MAX_ROWS {
        let _ = write!(
            out,
            "<tr><td colspan=\"{columns}\" class=\"empty\">… and {} more (<code>cluster nodes --json</code>, <code>cluster services --json</code> list them all)</td></tr>",
            rows - MAX_ROWS
        );
    }
    out.push_str("</table>");
}

fn services(out: &mut String, view: &View<'_>) {
    // Per service and version: its providers, and how many are failing or suspect.
    let mut by: BTreeMap<(String, semver::Version), Vec<&ServiceEntry>> = BTreeMap::new();
    for e in &view.services {
        by.entry((e.description.name.clone(), e.description.version.clone()))
            .or_default()
            .push(e);
    }
    let _ = write!(out, "<h2>Services ({})</h2>", by.len());
    if by.is_empty() {
        out.push_str("<p class=\"empty\">no service in the registry</p>");
        return;
    }
    out.push_str("<table><tr><th>service</th><th>version</th><th>providers</th><th>health</th><th>functions</th></tr>");
    for ((name, version), entries) in by.iter().take(MAX_ROWS) {
        let failing = entries.iter().filter(|e| e.failing).count();
        let suspect = entries.iter().filter(|e| e.suspect && !e.failing).count();
        let healthy = entries.len() - failing - suspect;
        let health = match (failing, suspect) {
            (0, 0) => format!("<span class=\"ok\">{healthy} ok</span>"),
            _ => format!(
                "<span class=\"ok\">{healthy} ok</span>{}{}",
                if failing > 0 {
                    format!(", <span class=\"bad\">{failing} failing</span>")
                } else {
                    String::new()
                },
                if suspect > 0 {
                    format!(", <span class=\"warn\">{suspect} suspect</span>")
                } else {
                    String::new()
                },
            ),
        };
        let mut providers: Vec<&str> = entries.iter().map(|e| e.node.name.as_str()).collect();
        providers.sort_unstable();
        let functions: Vec<&str> = entries[0]
            .description
            .functions
            .iter()
            .map(|f| f.name.as_str())
            .collect();
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{health}</td><td>{}</td></tr>",
            escape(name),
            escape(&version.to_string()),
            escape(&listed(&providers)),
            escape(&functions.join(", ")),
        );
    }
    more(out, by.len(), 5);
}

fn calls(out: &mut String, view: &View<'_>) {
    out.push_str("<h2>Calls and requests per function, this node</h2>");
    let Some(metrics) = &view.metrics else {
        out.push_str("<p class=\"empty\">this node records its metrics into the process's recorder, not its own</p>");
        return;
    };
    let now = rates::parse(metrics);
    let (span, rates) = view
        .dashboard
        .history
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .rates(Instant::now(), &now);
    if rates.is_empty() {
        out.push_str("<p class=\"empty\">no call made or served yet</p>");
        return;
    }
    let _ = write!(
        out,
        "<table><tr><th>service</th><th>function</th><th>calls/s made</th><th>failed</th><th>p50 / p99</th><th>requests/s served</th><th>not answered</th><th>p50 / p99</th></tr>"
    );
    for ((service, function), r) in &rates {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"n\">{:.2}</td>{}{}<td class=\"n\">{:.2}</td>{}{}</tr>",
            escape(service),
            escape(function),
            r.calls,
            share(r.call_errors),
            latency(r.call_latency),
            r.requests,
            share(r.request_errors),
            latency(r.handler_latency),
        );
    }
    let _ = write!(
        out,
        "</table><p class=\"empty\">over the last {} s (at most {} s)</p>",
        span.as_secs(),
        WINDOW.as_secs()
    );
}

/// A p50 / p99 pair as a cell, in milliseconds (estimated from the histogram's buckets).
fn latency([p50, p99]: [Option<f64>; 2]) -> String {
    match (p50, p99) {
        (Some(p50), Some(p99)) => format!(
            "<td class=\"n\">{} / {} ms</td>",
            milliseconds(p50),
            milliseconds(p99)
        ),
        _ => "<td class=\"n empty\">–</td>".to_owned(),
    }
}

/// Seconds as milliseconds, to a precision that fits their size.
fn milliseconds(seconds: f64) -> String {
    let ms = seconds * 1000.0;
    if ms < 10.0 {
        format!("{ms:.2}")
    } else {
        format!("{ms:.0}")
    }
}

/// A failure share as a cell: coloured past 1 % and 10 %.
fn share(errors: Option<f64>) -> String {
    match errors {
        None => "<td class=\"n empty\">–</td>".to_owned(),
        Some(e) => {
            let class = if e > 0.10 {
                "bad"
            } else if e > 0.01 {
                "warn"
            } else {
                "ok"
            };
            format!("<td class=\"n {class}\">{:.1} %</td>", e * 100.0)
        }
    }
}

fn events(out: &mut String, view: &View<'_>) {
    let events = view
        .dashboard
        .events
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let _ = write!(out, "<h2>Recent events ({})</h2>", events.len());
    if events.is_empty() {
        out.push_str("<p class=\"empty\">none since the dashboard started</p>");
        return;
    }
    out.push_str("<table><tr><th>at (UTC)</th><th>event</th><th>what</th></tr>");
    for (at, event) in events.iter() {
        let (kind, class, what) = match event {
            RegistryEvent::ServiceUp(e) | RegistryEvent::ServiceDown(e) => {
                let (kind, class) = match event {
                    RegistryEvent::ServiceUp(_) => ("service up", "ok"),
                    _ => ("service down", "warn"),
                };
                let what = format!(
                    "{} {} on {}",
                    e.description.name, e.description.version, e.node.name
                );
                (kind, class, what)
            }
            RegistryEvent::NodeUp(n) => ("node up", "ok", format!("{} ({})", n.name, n.addr)),
            RegistryEvent::NodeDown(n) => ("node down", "bad", format!("{} ({})", n.name, n.addr)),
        };
        let _ = write!(
            out,
            "<tr><td><code>{}</code></td><td class=\"{class}\">{kind}</td><td>{}</td></tr>",
            clock(*at),
            escape(&what)
        );
    }
    out.push_str("</table>");
}

/// `HH:MM:SS` of a wall-clock time, in UTC.
fn clock(at: SystemTime) -> String {
    let seconds = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs()
        % 86_400;
    format!(
        "{:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_that_could_be_markup_is_escaped() {
        assert_eq!(
            escape("<script>alert('x')</script> & \"q\"\u{1b}[31m"),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;\u{fffd}[31m"
        );
    }

    #[test]
    fn invisible_characters_that_reorder_text_are_replaced() {
        assert_eq!(
            escape("web\u{202E}1-bew\u{200B}"),
            "web\u{fffd}1-bew\u{fffd}"
        );
    }

    #[test]
    fn a_page_of_a_registry_at_its_limits_lists_a_bounded_number_of_rows() {
        use std::sync::Arc;

        use crate::registry::{NodeInfo, ServiceEntry};
        use crate::service::ServiceDescription;

        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 1));
        let nodes: Vec<NodeInfo> = (0..2048)
            .map(|n| NodeInfo::new(format!("n-{n}"), addr, 1))
            .collect();
        let descriptions: Vec<Arc<ServiceDescription>> = (0..250)
            .map(|s| {
                Arc::new(ServiceDescription::new(
                    &format!("s-{s}"),
                    semver::Version::new(1, 0, 0),
                    None,
                    crate::CallOptions::new(),
                    vec![],
                ))
            })
            .collect();
        let services: Vec<Arc<ServiceEntry>> = nodes
            .iter()
            .flat_map(|n| {
                descriptions
                    .iter()
                    .take(25)
                    .map(move |d| Arc::new(ServiceEntry::new(n.clone(), d.clone())))
            })
            .collect();
        let dashboard = super::super::Dashboard::default();
        let page = page(&View {
            node: &nodes[0],
            nodes: nodes.clone(),
            services,
            metrics: None,
            dashboard: &dashboard,
        });
        assert_eq!(page.matches("<tr><td>n-").count(), MAX_ROWS, "node rows");
        assert!(page.contains("… and 1848 more"), "the rest counted");
        assert!(page.contains("<h2>Nodes (2048)</h2>"));
        // A service's providers: the first 20 named, the rest counted.
        assert!(page.contains("… and 2028 more"), "providers cut");
        assert!(page.len() < 400_000, "{} bytes", page.len());
    }

    #[test]
    fn a_clock_is_hours_minutes_seconds_in_utc() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(86_400 * 3 + 3600 * 13 + 60 * 5 + 9);
        assert_eq!(clock(at), "13:05:09");
    }
}
