//! `cluster describe SERVICE`: every version of a service the registry holds, its providers,
//! and each function's signature, shape, idempotence and call options, each option with the
//! layer it comes from, as a caller without a client build of its own would merge them
//! (`ResolvedOptions::merge` over the provider's service and function options).

use std::sync::Arc;
use std::time::Duration;

use cluster::options::ResolvedOptions;
use cluster::registry::ServiceEntry;
use cluster::{FunctionDescription, Node, ServiceDescription, Source};
use serde_json::{Value, json};

use crate::Failure;
use crate::out::shown;
use crate::show::health;

/// The option names, in the order of `ResolvedOptions::sources`.
const OPTIONS: [&str; 14] = [
    "timeout",
    "retry",
    "retry_after",
    "retry_max_after",
    "retry_factor",
    "retry_jitter",
    "retry_budget",
    "wait_for_provider",
    "overloaded_retries",
    "retry_ratio",
    "retry_window",
    "retry_floor",
    "hedge_after",
    "hedge_max",
];

pub(crate) fn describe(node: &Node, service: &str, json: bool) -> Result<(), Failure> {
    let entries = node.registry().lookup(service);
    if entries.is_empty() {
        let mut known: Vec<String> = node
            .registry()
            .services()
            .iter()
            .map(|e| e.description.name.clone())
            .collect();
        known.sort();
        known.dedup();
        let near = node
            .registry()
            .local_copy()
            .nearest_service(service)
            .map_or_else(String::new, |near| format!("did you mean \"{near}\"? "));
        return Err(Failure::Failed(format!(
            "no service `{service}` in the registry; {near}it holds: {}",
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        )));
    }
    let groups = by_description(&entries);
    if json {
        let versions: Vec<Value> = groups
            .iter()
            .map(|(d, providers)| version_json(d, providers))
            .collect();
        crate::out::line(json!({ "service": service, "versions": versions }));
        return Ok(());
    }
    let text: String = groups
        .iter()
        .map(|(description, providers)| version_text(description, providers))
        .collect();
    crate::out::text(&text);
    Ok(())
}

/// The entries grouped by description, newest version first: providers of one version have
/// one description, unless two builds disagree (then each is shown).
fn by_description(
    entries: &[Arc<ServiceEntry>],
) -> Vec<(Arc<ServiceDescription>, Vec<Arc<ServiceEntry>>)> {
    let mut groups: Vec<(Arc<ServiceDescription>, Vec<Arc<ServiceEntry>>)> = Vec::new();
    for entry in entries {
        match groups.iter_mut().find(|(d, _)| **d == *entry.description) {
            Some((_, providers)) => providers.push(entry.clone()),
            None => groups.push((entry.description.clone(), vec![entry.clone()])),
        }
    }
    groups.sort_by(|a, b| b.0.version.cmp(&a.0.version));
    for (_, providers) in &mut groups {
        providers.sort_by(|a, b| a.node.name.cmp(&b.node.name));
    }
    groups
}

/// The options a call of `function` gets from its provider's entry, before any client or call
/// layer.
fn resolved(description: &ServiceDescription, function: &FunctionDescription) -> ResolvedOptions {
    ResolvedOptions::merge(&[
        (Source::ProviderService, &description.options),
        (Source::ProviderFunction, &function.options),
    ])
}

/// Each option's value, in the order of [`OPTIONS`]: as text for people (a hedge that is off
/// says so rather than show its unused pause), and as JSON (durations in milliseconds).
fn values(o: &ResolvedOptions) -> [(String, Value); 14] {
    let d = |d: Duration| (human(d), millis(d));
    let plain = |v: Value| (v.to_string(), v);
    let max_after = if o.retry.max_after == Duration::MAX {
        ("none".to_owned(), Value::Null)
    } else {
        d(o.retry.max_after)
    };
    let hedge_after = match o.hedge.max {
        0 => ("off".to_owned(), d(o.hedge.after).1),
        _ => d(o.hedge.after),
    };
    [
        d(o.timeout),
        plain(json!(o.retry.enabled)),
        d(o.retry.after),
        max_after,
        (o.retry.factor.to_string(), json!(o.retry.factor)),
        plain(json!(o.retry.jitter)),
        d(o.retry.budget),
        d(o.wait_for_provider),
        plain(json!(o.retry.overloaded)),
        (o.retry.ratio.to_string(), json!(o.retry.ratio)),
        d(o.retry.window),
        plain(json!(o.retry.floor)),
        hedge_after,
        plain(json!(o.hedge.max)),
    ]
}

/// Milliseconds as JSON: an integer when whole.
fn millis(d: Duration) -> Value {
    match u64::try_from(d.as_millis()) {
        Ok(ms) if d.subsec_nanos().is_multiple_of(1_000_000) => json!(ms),
        _ => json!(d.as_secs_f64() * 1000.0),
    }
}

/// `250ms`, `5s`, `1.5s`, `2m`, `3h`.
fn human(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        ms if ms < 1000 => format!("{ms}ms"),
        ms if ms.is_multiple_of(3_600_000) => format!("{}h", ms / 3_600_000),
        ms if ms.is_multiple_of(60_000) => format!("{}m", ms / 60_000),
        ms if ms.is_multiple_of(1000) => format!("{}s", ms / 1000),
        _ => format!(
            "{}s",
            format!("{:.3}", d.as_secs_f64()).trim_end_matches('0')
        ),
    }
}

/// Where an option came from, in a word or two.
fn source(source: Source) -> &'static str {
    match source {
        Source::ProviderService => "service",
        Source::ProviderFunction => "function",
        Source::Library => "default",
        _ => "other",
    }
}

/// What a caller may do with the function: run it twice, or only retry what cannot have run.
fn flags(function: &FunctionDescription) -> String {
    let mut flags = Vec::new();
    flags.push(if function.idempotent {
        "idempotent: retried after a timeout"
    } else {
        "not idempotent: retried only when it cannot have run"
    });
    if function.at_most_once {
        flags.push("at most once");
    }
    flags.join(", ")
}

fn version_text(description: &ServiceDescription, providers: &[Arc<ServiceEntry>]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let compat = description
        .compat
        .as_ref()
        .map_or_else(String::new, |c| format!(", serves clients of {}", shown(c)));
    let _ = writeln!(
        out,
        "{} {} (wire {}{compat})",
        shown(&description.name),
        description.version,
        description.wire
    );
    let _ = writeln!(out, "  providers:");
    for p in providers {
        let _ = writeln!(
            out,
            "    {} {} {}",
            shown(&p.node.name),
            p.node.addr,
            health(p)
        );
    }
    for function in &description.functions {
        let _ = writeln!(
            out,
            "  {}  [{}]",
            shown(&function.signature),
            flags(function)
        );
        if let Some(shape) = &function.shape {
            let _ = writeln!(out, "    shape  {}", shown(&shape.to_string()));
            if shape.has_opaque() {
                let _ = writeln!(
                    out,
                    "    note   a `type` in backticks could not be traced (the WARN of the node \
                     that traced it says why: read through deserialize_any, as untagged, tagged \
                     and flattened types are, or a limit of the tracer); it is compared by its \
                     text, and `cluster call` sends its JSON as it stands"
                );
            }
        }
        let options = resolved(description, function);
        let values = values(&options);
        let width = OPTIONS.iter().map(|n| n.len()).max().unwrap_or(0);
        let value_width = values.iter().map(|(text, _)| text.len()).max().unwrap_or(0);
        for ((name, (value, _)), from) in OPTIONS.iter().zip(&values).zip(options.sources) {
            let _ = writeln!(
                out,
                "    {name:width$}  {value:value_width$}  {}",
                source(from)
            );
        }
    }
    out
}

fn version_json(description: &ServiceDescription, providers: &[Arc<ServiceEntry>]) -> Value {
    let functions: Vec<Value> = description
        .functions
        .iter()
        .map(|function| {
            let options = resolved(description, function);
            let values = values(&options);
            let options: serde_json::Map<String, Value> = OPTIONS
                .iter()
                .zip(values)
                .zip(options.sources)
                .map(|((name, (text, value)), from)| {
                    let option = json!({ "value": value, "text": text, "from": source(from) });
                    ((*name).to_owned(), option)
                })
                .collect();
            json!({
                "name": function.name,
                "signature": function.signature,
                "shape": function.shape.as_ref().map(ToString::to_string),
                "args": function.shape.as_ref().map(|s| s.args.iter().map(ToString::to_string).collect::<Vec<_>>()),
                "idempotent": function.idempotent,
                "at_most_once": function.at_most_once,
                "options": options,
            })
        })
        .collect();
    json!({
        "version": description.version.to_string(),
        "compat": description.compat,
        "wire": description.wire,
        "providers": providers.iter().map(|p| json!({
            "node": p.node.name,
            "addr": p.node.addr.to_string(),
            "health": health(p),
        })).collect::<Vec<_>>(),
        "functions": functions,
    })
}
