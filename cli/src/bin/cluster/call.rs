//! `cluster call SERVICE.FUNCTION 'JSON'`: a call of any service without its Rust types.
//!
//! 1. The function is found in the newest description the registry holds for the service
//!    (within `--version`), the description the call is then made as: its requirement, its
//!    options as the client's declared layer, its shape for the providers' compatibility check.
//! 2. The JSON arguments are checked and encoded by that function's shape
//!    (`cluster_cli::json`): a mistake is said here, nothing is sent.
//! 3. The call runs the ordinary call path (`Client::call_plain`): retries, budget, re-resolution,
//!    as from code; `--timeout`, `--budget`, `--no-retry`, `--meta` are the call's own layer.
//! 4. The answer is decoded as any MessagePack value and printed as JSON; a function returning
//!    `Result` (an enum of `Ok` and `Err`) prints its `Ok`, and its `Err` fails the command.

use std::io::Read;

use cluster::service::shape::{Content, Shape};
use cluster::{CallError, CallReport, Client, FunctionDescription, Node, ServiceDescription};
use cluster_cli::json::{Wire, arguments};
use serde_json::{Value, json};

use crate::Failure;
use crate::args::CallArgs;

pub(crate) async fn call(node: &Node, args: CallArgs, json: bool) -> Result<(), Failure> {
    let Some((service, function)) = args.target.rsplit_once('.') else {
        return Err(Failure::Usage(format!(
            "`{}` is not SERVICE.FUNCTION",
            args.target
        )));
    };
    let input = read_arguments(&args.args)?;
    let (description, index) = find(node, service, function, args.requirement.as_ref())?;
    let described = &description.functions[index];
    let wire = match &described.shape {
        Some(shape) => arguments(&shape.args, &input),
        // An entry from a build before shapes: the JSON goes as it stands, and the provider
        // says whether it reads it.
        None => match &input {
            Value::Array(values) if values.len() == described.arity() => Ok(match values.len() {
                0 => Wire::Nil,
                _ => Wire::Array(values.iter().map(Wire::from_json).collect()),
            }),
            _ => Err(format!(
                "the arguments are a JSON array of {} values (one per argument)",
                described.arity()
            )),
        },
    }
    .map_err(|e| {
        Failure::Usage(format!(
            "{e}\n  {service}.{}: {}",
            described.name, described.signature
        ))
    })?;
    let returns_result = returns_result(described);
    // One description per process, for as long as the client lives: the client stub's
    // description is `'static`, and this process makes one call.
    let description: &'static ServiceDescription = Box::leak(Box::new(description));
    let mut client = Client::new(node, description);
    if let Some(requirement) = args.requirement {
        client = client.require(requirement);
    }
    let mut call = client.call_plain::<_, Wire>(index, &wire);
    if let Some(timeout) = args.timeout {
        call = call.timeout(timeout);
    }
    if let Some(budget) = args.budget {
        call = call.budget(budget);
    }
    if args.no_retry {
        call = call.no_retry();
    }
    for (key, value) in args.metadata {
        call = call.metadata(key, value);
    }
    match call.reported().await {
        Ok((answer, report)) => {
            let answer = answer.to_json();
            let (answer, app_error) = match (returns_result, answer) {
                (true, Value::Object(mut map)) if map.len() == 1 && map.contains_key("Err") => {
                    (Value::Null, map.remove("Err"))
                }
                (true, Value::Object(mut map)) if map.len() == 1 && map.contains_key("Ok") => {
                    (map.remove("Ok").unwrap_or(Value::Null), None)
                }
                (_, answer) => (answer, None),
            };
            if let Some(error) = app_error {
                return Err(app_failure(&error, &report, json));
            }
            if json {
                let mut out = json!({ "answer": answer });
                if args.report {
                    out["report"] = report_json(&report);
                }
                println!("{out}");
            } else {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&answer).unwrap_or_default()
                );
                if args.report {
                    eprintln!("{}", report_text(&report));
                }
            }
            Ok(())
        }
        Err(error) => Err(call_failure(&error, json)),
    }
}

/// The arguments as JSON, from the command line or from stdin for `-`.
fn read_arguments(text: &str) -> Result<Value, Failure> {
    let text = if text == "-" {
        let mut all = String::new();
        std::io::stdin()
            .read_to_string(&mut all)
            .map_err(|e| Failure::Usage(format!("cannot read the arguments from stdin: {e}")))?;
        all
    } else {
        text.to_owned()
    };
    serde_json::from_str(&text)
        .map_err(|e| Failure::Usage(format!("the arguments are not JSON: {e}")))
}

/// The newest description of `service` (within `requirement`) with `function`, and its index.
fn find(
    node: &Node,
    service: &str,
    function: &str,
    requirement: Option<&semver::VersionReq>,
) -> Result<(ServiceDescription, usize), Failure> {
    let entries = node.registry().lookup(service);
    if entries.is_empty() {
        return Err(Failure::Usage(format!(
            "no service `{service}` in the registry (`cluster services` lists them)"
        )));
    }
    let mut candidates: Vec<_> = entries
        .iter()
        .filter(|e| requirement.is_none_or(|r| r.matches(&e.description.version)))
        .collect();
    if candidates.is_empty() {
        let mut versions: Vec<String> = entries
            .iter()
            .map(|e| e.description.version.to_string())
            .collect();
        versions.sort();
        versions.dedup();
        return Err(Failure::Usage(format!(
            "no provider of `{service}` in a version within {}: the registry has {}",
            requirement.map(ToString::to_string).unwrap_or_default(),
            versions.join(", ")
        )));
    }
    candidates.sort_by(|a, b| b.description.version.cmp(&a.description.version));
    for entry in &candidates {
        if let Some(index) = entry
            .description
            .functions
            .iter()
            .position(|f| f.name == function)
        {
            return Ok(((*entry.description).clone(), index));
        }
    }
    let newest = &candidates[0].description;
    let names: Vec<&str> = newest.functions.iter().map(|f| f.name.as_str()).collect();
    Err(Failure::Usage(format!(
        "`{service}` {} has no function `{function}`; it has: {}",
        newest.version,
        names.join(", ")
    )))
}

/// Whether the function returns `Result<T, E>`: its shape is an enum of `Ok` and `Err` (or,
/// in an entry without shapes, its signature says `-> Result<`).
fn returns_result(function: &FunctionDescription) -> bool {
    match function.shape.as_ref().map(|s| &s.output) {
        Some(Shape::Enum { variants, .. }) => {
            variants.len() == 2
                && variants
                    .iter()
                    .any(|v| v.name == "Ok" && matches!(v.content, Content::Newtype(_)))
                && variants
                    .iter()
                    .any(|v| v.name == "Err" && matches!(v.content, Content::Newtype(_)))
        }
        Some(_) => false,
        None => function
            .signature
            .split_once("->")
            .is_some_and(|(_, out)| out.trim_start().starts_with("Result<")),
    }
}

/// The provider's own `Err`: exit 1, said as the typed client would say it.
fn app_failure(error: &Value, report: &CallReport, json: bool) -> Failure {
    if json {
        println!(
            "{}",
            json!({
                "error": {"kind": "app", "value": error, "may_have_run": true, "transient": false},
                "report": report_json(report),
            })
        );
        return Failure::Failed(String::new());
    }
    let to = report
        .provider
        .as_ref()
        .map_or_else(String::new, |p| format!(" to {p}"));
    Failure::Failed(format!(
        "the call {}{to} returned an error: {error}\n{}",
        report.call,
        report_text(report)
    ))
}

/// The framework's error: exit 1, its message (which carries its report) or its JSON.
fn call_failure(error: &CallError<std::convert::Infallible>, json: bool) -> Failure {
    if !json {
        return Failure::Failed(error.to_string());
    }
    let (kind, reason, detail) = match error {
        CallError::Service(e) => ("service", e.reason().as_str(), e.detail().to_owned()),
        CallError::Rpc(e) => ("rpc", e.kind().as_str(), e.detail().to_owned()),
        _ => ("app", "", String::new()),
    };
    println!(
        "{}",
        json!({
            "error": {
                "kind": kind,
                "reason": reason,
                "detail": detail,
                "message": error.to_string(),
                "may_have_run": error.may_have_run(),
                "transient": error.is_transient(),
            },
            "report": report_json(error.report()),
        })
    );
    Failure::Failed(String::new())
}

/// Milliseconds, to the microsecond.
fn millis(d: std::time::Duration) -> f64 {
    d.as_micros() as f64 / 1000.0
}

/// A report as JSON: every field of `CallReport`, durations in milliseconds.
pub(crate) fn report_json(report: &CallReport) -> Value {
    let provider = |p: &cluster::error::ProviderRef| json!({"node": p.node, "addr": p.addr.to_string(), "version": p.version.to_string()});
    json!({
        "call": report.call,
        "requirement": report.requirement,
        "provider": report.provider.as_ref().map(provider),
        "attempts": report.attempts.iter().map(|a| json!({
            "provider": provider(&a.provider),
            "kind": a.kind.to_string(),
            "started_ms": millis(a.started),
            "elapsed_ms": millis(a.elapsed),
            "outcome": a.outcome,
            "answered": a.answered,
            "recalled": a.recalled,
        })).collect::<Vec<_>>(),
        "attempts_left_out": report.attempts_left_out,
        "elapsed_ms": millis(report.elapsed),
        "budget": report.budget.map(|(d, from)| json!({"ms": millis(d), "from": from.to_string()})),
        "retries_off": report.retries_off,
        "call_id": report.call_id.map(|id| format!("{id:032x}")),
    })
}

/// A report for people: the call, then one line per attempt.
fn report_text(report: &CallReport) -> String {
    let mut text = format!(
        "{} in {:.1} ms, {} attempt{}",
        report.call,
        millis(report.elapsed),
        report.attempts.len(),
        if report.attempts.len() == 1 { "" } else { "s" }
    );
    for a in &report.attempts {
        text.push_str(&format!(
            "\n  {} at {:.1} ms to {}: {} in {:.1} ms",
            a.kind,
            millis(a.started),
            a.provider,
            a.outcome,
            millis(a.elapsed)
        ));
    }
    text
}
