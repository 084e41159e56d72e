//! `cluster call SERVICE.FUNCTION 'JSON'`: a call of any service without its Rust types.
//!
//! 1. The function is found in the newest description the registry holds for the service
//!    (within `--version`), the description the call is then made as: its requirement, its
//!    options as the client's declared layer, its shape for the providers' compatibility check.
//! 2. The JSON arguments are checked and encoded by that function's shape
//!    (`cluster::json`): a mistake is said here, nothing is sent.
//! 3. The call runs the ordinary call path (`Client::call_plain`): retries, budget, re-resolution,
//!    as from code; `--timeout`, `--budget`, `--no-retry`, `--meta` are the call's own layer.
//! 4. The answer is decoded as any MessagePack value and printed as JSON; a function returning
//!    `Result` (an enum of `Ok` and `Err`) prints its `Ok`, and its `Err` fails the command.

use std::io::{IsTerminal, Read};
use std::time::Duration;

use cluster::context::TraceParent;
use cluster::json::{Answer, AsJson, FindError, Functions};
use cluster::{CallError, CallReport, Node};
use serde_json::{Value, json};

use crate::Failure;
use crate::args::CallArgs;

/// How long a call goes unanswered before `cluster` says it is still at it (at a terminal).
const SLOW: Duration = Duration::from_secs(2);

/// What `call` checks before joining: a malformed target or JSON fails at once.
pub(crate) struct Prepared {
    args: CallArgs,
    service: String,
    function: String,
    input: Value,
}

/// The target split and the JSON read, before anything joins.
pub(crate) fn prepare(args: CallArgs) -> Result<Prepared, Failure> {
    let Some((service, function)) = args.target.rsplit_once('.') else {
        return Err(Failure::Usage(format!(
            "`{0}` is not SERVICE.FUNCTION (`cluster describe {0}` lists a service's functions)",
            args.target
        )));
    };
    let (service, function) = (service.to_owned(), function.to_owned());
    let input = read_arguments(&args.args)?;
    Ok(Prepared {
        args,
        service,
        function,
        input,
    })
}

pub(crate) async fn call(node: &Node, prepared: Prepared, json: bool) -> Result<(), Failure> {
    let Prepared {
        args,
        service,
        function,
        input,
    } = prepared;
    let (service, function) = (service.as_str(), function.as_str());
    let functions = Functions::new(node);
    let found = functions
        .find(service, function, args.requirement.as_ref())
        .map_err(find_failure)?;
    let described = found.function();
    let wire = found.arguments(&input).map_err(|e| {
        Failure::Usage(format!(
            "{e}\n  {service}.{}: {}",
            described.name, described.signature
        ))
    })?;
    let mut call = found.call(&wire);
    if let Some(timeout) = args.timeout {
        call = call.timeout(timeout);
    }
    if let Some(budget) = args.budget {
        call = call.budget(budget);
    }
    if args.no_retry {
        call = call.no_retry();
    }
    if let Some(wait) = args.wait_for_provider {
        call = call.wait_for_provider(wait);
    }
    for (key, value) in args.metadata {
        call = call.metadata(key, value);
    }
    // A trace of its own (sampled, so that every node that records spans keeps it), or the
    // one given: the providers' handler spans are then found under its id.
    let trace = args.traceparent.or_else(|| {
        args.trace
            .then(|| TraceParent::new(fastrand::u128(1..), fastrand::u64(1..), true))
            .flatten()
    });
    if let Some(trace) = trace {
        call = call.trace(trace);
        if !json {
            eprintln!("cluster: trace {}", trace.trace_hex());
        }
    }
    let trace_id = trace.map(|t| t.trace_hex());
    let answered = call.reported();
    tokio::pin!(answered);
    // A call that retries for its whole budget is silent for that long: at a terminal, say so.
    let answered = tokio::select! {
        answered = &mut answered => answered,
        () = tokio::time::sleep(SLOW) => {
            if std::io::stderr().is_terminal() {
                eprintln!("cluster: no answer yet after {SLOW:?}; retrying within the call's budget (ctrl-c to give up)");
            }
            answered.await
        }
    };
    match answered {
        Ok((answer, report)) => {
            let answer = match found.answer(answer) {
                Answer::Ok(answer) => answer,
                Answer::Err(error) => return Err(app_failure(&error.to_json(), &report, json)),
            };
            if json {
                #[derive(serde::Serialize)]
                struct Answered<'a> {
                    answer: AsJson<'a>,
                    #[serde(skip_serializing_if = "Option::is_none")]
                    report: Option<Value>,
                    #[serde(skip_serializing_if = "Option::is_none")]
                    trace_id: Option<String>,
                }
                let report = args.report.then(|| report_json(&report));
                let answered = Answered {
                    answer: AsJson(&answer),
                    report,
                    trace_id,
                };
                crate::out::json(&answered, false);
            } else {
                crate::out::json(&AsJson(&answer), true);
                if args.report {
                    eprintln!("{}", crate::out::shown_lines(&report_text(&report)));
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

/// Why no function was found, with what to do about it: a service not in the registry fails
/// the call (it may yet come), the rest are usage errors.
fn find_failure(e: FindError) -> Failure {
    match e {
        FindError::NoService { .. } => Failure::Failed(format!(
            "{e} (`cluster services` lists them; --wait-for-provider waits for one)"
        )),
        FindError::Incompatible { ref versions, .. } => {
            let major = versions
                .first()
                .and_then(|v| v.parse::<semver::Version>().ok())
                .map_or(0, |v| v.major);
            Failure::Usage(format!(
                "{e}: choose with --version (e.g. --version ^{major})"
            ))
        }
        e => Failure::Usage(e.to_string()),
    }
}

/// The provider's own `Err`: exit 1, said as the typed client would say it.
fn app_failure(error: &Value, report: &CallReport, json: bool) -> Failure {
    let to = report
        .provider
        .as_ref()
        .map_or_else(String::new, |p| format!(" to {p}"));
    // A `String` error reads as itself, its own line breaks kept (a nested call's report).
    let said = match error {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let message = format!("the call {}{to} returned an error: {said}", report.call);
    if json {
        crate::out::line(error_json(
            "app",
            None,
            None,
            &message,
            true,
            false,
            error.clone(),
            report,
        ));
        return Failure::Failed(String::new());
    }
    Failure::Failed(format!("{message}\n{}", report_text(report)))
}

/// The framework's error: exit 1, its message (which carries its report) or its JSON.
fn call_failure(error: &CallError<std::convert::Infallible>, json: bool) -> Failure {
    if !json {
        return Failure::Failed(error.to_string());
    }
    let (kind, reason, detail) = match error {
        CallError::Service(e) => ("service", e.reason().as_str(), e.detail()),
        CallError::Rpc(e) => ("rpc", e.kind().as_str(), e.detail()),
        _ => ("app", "", ""),
    };
    crate::out::line(error_json(
        kind,
        Some(reason),
        Some(detail),
        &error.to_string(),
        error.may_have_run(),
        error.is_transient(),
        Value::Null,
        error.report(),
    ));
    Failure::Failed(String::new())
}

/// A failed call as JSON: every key always present (`null` when it does not apply), so that a
/// script reads `error.reason` without asking first whether it is there.
#[allow(clippy::too_many_arguments)]
fn error_json(
    kind: &str,
    reason: Option<&str>,
    detail: Option<&str>,
    message: &str,
    may_have_run: bool,
    transient: bool,
    value: Value,
    report: &CallReport,
) -> Value {
    json!({
        "error": {
            "kind": kind,
            "reason": reason,
            "detail": detail.filter(|d| !d.is_empty()),
            "message": message,
            "may_have_run": may_have_run,
            "transient": transient,
            "value": value,
        },
        "report": report_json(report),
    })
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
