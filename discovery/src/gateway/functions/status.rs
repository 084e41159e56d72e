//! A call's outcome as an HTTP answer: its value as JSON (`200`), the function's own `Err` as
//! `422` naming its variant, and each way the framework can fail as the status that fits it
//! (the table in `docs/gateway-calls.md`). Error bodies are JSON of one shape,
//! `{"error": {"kind", "reason", "message", "may_have_run", "transient", "variant", "value"}}`,
//! every key present. They do not carry the call's report: it names the providers' addresses,
//! which an edge gateway does not tell its clients (the log has it, at DEBUG).

use axum::body::Body;
use axum::http::{HeaderValue, Response, StatusCode, header};
use cluster::error::{Reason, RpcErrorKind};
use cluster::json::{AsJson, FindError, Wire};
use cluster::{CallError, CallReport};
use serde_json::{Value, json};

/// The status of a call the framework could not make or finish.
pub(crate) fn status_of(error: &CallError<std::convert::Infallible>) -> StatusCode {
    match error {
        CallError::Service(e) => match e.reason() {
            Reason::NoService | Reason::NoVersion => StatusCode::SERVICE_UNAVAILABLE,
            Reason::NoFunction => StatusCode::NOT_FOUND,
            Reason::Panicked => StatusCode::INTERNAL_SERVER_ERROR,
            Reason::BadArguments => StatusCode::BAD_REQUEST,
            Reason::Draining | Reason::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
            Reason::WireVersion => StatusCode::BAD_GATEWAY,
            Reason::Rejected | Reason::Unauthorized => StatusCode::FORBIDDEN,
            _ => StatusCode::BAD_GATEWAY,
        },
        CallError::Rpc(e) => match e.kind() {
            RpcErrorKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
            RpcErrorKind::NoConnection | RpcErrorKind::RetryThrottled => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            RpcErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            RpcErrorKind::InvalidOptions => StatusCode::BAD_REQUEST,
            RpcErrorKind::Cancelled => StatusCode::INTERNAL_SERVER_ERROR,
            RpcErrorKind::ConnectionLost
            | RpcErrorKind::ReplyTooLarge
            | RpcErrorKind::Protocol
            | RpcErrorKind::Untrusted
            | RpcErrorKind::WrongPeer => StatusCode::BAD_GATEWAY,
            _ => StatusCode::BAD_GATEWAY,
        },
        _ => StatusCode::BAD_GATEWAY,
    }
}

/// The framework's failure as an answer.
pub(crate) fn call_failed(error: &CallError<std::convert::Infallible>) -> Response<Body> {
    let (kind, reason, detail) = match error {
        CallError::Service(e) => ("service", e.reason().as_str(), e.detail()),
        CallError::Rpc(e) => ("rpc", e.kind().as_str(), e.detail()),
        _ => ("app", "", ""),
    };
    let status = status_of(error);
    // What the client can act on: the arguments it sent, the service it named. Other details
    // (addresses, causes) stay in the log.
    let message = match error {
        CallError::Service(e)
            if matches!(
                e.reason(),
                Reason::BadArguments | Reason::NoService | Reason::NoVersion | Reason::NoFunction
            ) =>
        {
            format!("{}: {detail}", error.report().call)
        }
        _ => format!("{}: {reason}", error.report().call),
    };
    let mut r = json_response(
        status,
        &body(
            kind,
            reason,
            &message,
            error.may_have_run(),
            error.is_transient(),
            Value::Null,
            Value::Null,
        ),
    );
    if matches!(
        status,
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT
    ) && error.is_transient()
    {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}

/// The function's own `Err`: `422`, with the variant named when the error is an enum.
pub(crate) fn app_error(error: &Wire, report: &CallReport) -> Response<Body> {
    let value = error.to_json();
    let (variant, content) = match &value {
        Value::String(name) => (Value::String(name.clone()), Value::Null),
        Value::Object(map) if map.len() == 1 => {
            let (name, content) = map
                .iter()
                .next()
                .map(|(k, v)| (k.clone(), v.clone()))
                .unwrap_or_default();
            (Value::String(name), content)
        }
        other => (Value::Null, other.clone()),
    };
    json_response(
        StatusCode::UNPROCESSABLE_ENTITY,
        &body(
            "app",
            "err",
            &format!("{} returned an error", report.call),
            // The function ran and answered with its error (as `CallError::may_have_run`).
            true,
            false,
            variant,
            content,
        ),
    )
}

/// A call refused before anything was sent: the function not found.
pub(crate) fn not_found(error: &FindError) -> Response<Body> {
    let (status, reason) = match error {
        FindError::NoService { .. } => (StatusCode::SERVICE_UNAVAILABLE, "no service"),
        FindError::NoVersion { .. } => (StatusCode::SERVICE_UNAVAILABLE, "no version"),
        FindError::NoFunction { .. } => (StatusCode::NOT_FOUND, "no function"),
        FindError::Incompatible { .. } => (StatusCode::CONFLICT, "incompatible versions"),
        _ => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
    };
    // A missing function is said without the service's other functions: they may be ones
    // this caller may not call (`_describe` lists those it may).
    let message = match error {
        FindError::NoFunction {
            service,
            version,
            function,
            ..
        } => format!(
            "`{service}` {version} has no function `{function}` (`_describe` lists what you may call)"
        ),
        other => other.to_string(),
    };
    json_response(
        status,
        &body(
            "service",
            reason,
            &message,
            false,
            status == StatusCode::SERVICE_UNAVAILABLE,
            Value::Null,
            Value::Null,
        ),
    )
}

/// A request the gateway refuses itself (`400`, `401`, `403`, `405`, `413`, `415`).
pub(crate) fn refused(status: StatusCode, reason: &str, message: &str) -> Response<Body> {
    let mut r = json_response(
        status,
        &body(
            "request",
            reason,
            message,
            false,
            false,
            Value::Null,
            Value::Null,
        ),
    );
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    r
}

/// A value as the `200` answer.
pub(crate) fn answered(value: &Wire) -> Response<Body> {
    let bytes = serde_json::to_vec(&AsJson(value)).unwrap_or_else(|_| b"null".to_vec());
    with_json(StatusCode::OK, bytes)
}

#[allow(clippy::too_many_arguments)]
fn body(
    kind: &str,
    reason: &str,
    message: &str,
    may_have_run: bool,
    transient: bool,
    variant: Value,
    value: Value,
) -> Value {
    json!({"error": {
        "kind": kind,
        "reason": reason,
        "message": message,
        "may_have_run": may_have_run,
        "transient": transient,
        "variant": variant,
        "value": value,
    }})
}

pub(crate) fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    with_json(status, serde_json::to_vec(value).unwrap_or_default())
}

fn with_json(status: StatusCode, bytes: Vec<u8>) -> Response<Body> {
    let mut r = Response::new(Body::from(bytes));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}
