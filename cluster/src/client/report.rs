//! What a failed call's error says about it: the report, and the errors raised before or
//! outside the attempt loop (nothing to send, a layer's refusal, a reply that cannot be read).

use std::time::Duration;

use super::ClientCore;
use crate::error::{
    CallError, CallReport, ProviderRef, Reason, RpcError, RpcErrorKind, ServiceError,
};
use crate::registry::ServiceEntry;
use crate::service::FunctionDescription;

pub(super) fn provider_ref(entry: &ServiceEntry) -> ProviderRef {
    ProviderRef {
        node: entry.node.name.clone(),
        addr: entry.node.addr,
        version: entry.description.version.clone(),
    }
}

pub(super) fn call_name(client: &ClientCore, function: usize) -> String {
    let f = &client.description.functions[function];
    format!("{}.{}/{}", client.description.name, f.name, f.arity())
}

/// An error raised outside the attempt loop: arguments that cannot be sent, a reply that cannot
/// be read.
pub(crate) fn early_error<E>(
    client: &ClientCore,
    function: usize,
    kind: RpcErrorKind,
    detail: String,
) -> CallError<E> {
    CallError::Rpc(RpcError::new(kind, detail, empty_report(client, function)))
}

/// A refusal raised before the attempt loop (a client layer's).
pub(crate) fn early_service_error<E>(
    client: &ClientCore,
    function: usize,
    reason: Reason,
    detail: String,
) -> CallError<E> {
    let report = empty_report(client, function);
    CallError::Service(ServiceError::new(reason, detail, vec![], report))
}

fn empty_report(client: &ClientCore, function: usize) -> CallReport {
    CallReport {
        call: call_name(client, function),
        requirement: client.requirement.to_string(),
        provider: None,
        attempts: Vec::new(),
        attempts_left_out: 0,
        elapsed: Duration::ZERO,
        budget: None,
        retries_off: false,
        call_id: None,
        budget_exhausted: false,
    }
}

/// The detail of `NoFunction`: what the client wanted, what each provider in range has under
/// that name, and where the shapes part: `wanted `count(Tags) -> u64`; providers have
/// `count(Vec<u8>) -> u64` (2.0.0 on node-a: argument 1: …)`.
pub(super) fn function_miss(
    wanted: &FunctionDescription,
    entries: &[std::sync::Arc<ServiceEntry>],
    requirement: &semver::VersionReq,
) -> String {
    let have: Vec<String> = entries
        .iter()
        .filter(|e| requirement.matches(&e.description.version))
        .filter_map(|e| {
            let f = e
                .description
                .functions
                .iter()
                .find(|f| f.name == wanted.name)?;
            let part = wanted
                .calls(f)
                .err()
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            Some(format!(
                "`{}` ({} on {}{part})",
                f.signature, e.description.version, e.node.name
            ))
        })
        .collect();
    if have.is_empty() {
        format!(
            "wanted `{}`; no provider in range has `{}`",
            wanted.signature, wanted.name
        )
    } else {
        format!(
            "wanted `{}`; providers have {}",
            wanted.signature,
            have.join(", ")
        )
    }
}
