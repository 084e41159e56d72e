//! W3C trace context (<https://www.w3.org/TR/trace-context/>): which trace a call belongs to
//! and which span is its parent, carried across nodes so that a provider's handler span is a
//! child of the caller's attempt span. `docs/operations.md` ("Traces that cross nodes") walks
//! through it.
//!
//! 1. A call gets a trace when one is running: made inside a handler whose request carried one
//!    (it joins that trace, under the handler's span), given one with [`Call::trace`](crate::Call::trace)
//!    (from an incoming HTTP `traceparent`, say), or made while a subscriber records the
//!    framework's DEBUG spans (a new trace). Otherwise it carries none and costs nothing.
//! 2. Each attempt has a span id of its own; wire 2 carries the trace id, that span id and the
//!    sampled flag in the request's `TRACE` header (25 bytes, `transport/wire/headers.rs`).
//! 3. The provider's dispatcher reads it into the handler's [`Context`](crate::Context)
//!    ([`Context::trace`](crate::Context::trace)): the handler's span, and calls made inside
//!    the handler, continue the trace.
//!
//! With the `opentelemetry` feature and a `tracing-opentelemetry` layer installed, the ids are
//! those of the OpenTelemetry spans (`otel.rs`): the caller's attempt span and the provider's
//! handler span are parent and child in whatever backend the spans are exported to.

use std::fmt;

use super::otel;

/// A call's place in a trace, as W3C's `traceparent` header says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct TraceParent {
    /// The trace, never 0.
    pub trace_id: u128,
    /// The span this call's work is a child of, never 0.
    pub parent_id: u64,
    /// Whether the caller records this trace (W3C's `sampled` flag).
    pub sampled: bool,
}

/// The bytes of a trace context in a wire 2 header: the trace id (16, big-endian, as W3C's
/// binary form writes it), the parent span id (8, big-endian), the flags (1).
pub(crate) const TRACE_BYTES: usize = 25;

impl TraceParent {
    /// A trace context; `None` for a zero id, which W3C reserves for "invalid".
    pub fn new(trace_id: u128, parent_id: u64, sampled: bool) -> Option<Self> {
        (trace_id != 0 && parent_id != 0).then_some(Self {
            trace_id,
            parent_id,
            sampled,
        })
    }

    /// Reads a `traceparent` header: `00-<32 hex>-<16 hex>-<2 hex>`. A later version's header
    /// is read by its first four fields, as W3C asks; anything malformed is `None`.
    pub fn parse(header: &str) -> Option<Self> {
        let header = header.trim();
        let mut parts = header.split('-');
        let version = parts.next()?;
        let (trace, parent, flags) = (parts.next()?, parts.next()?, parts.next()?);
        fn hex(s: &str, len: usize) -> Option<&str> {
            (s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
                .then_some(s)
        }
        let version = u8::from_str_radix(hex(version, 2)?, 16).ok()?;
        // Version 0 has exactly four fields; ff is invalid.
        if version == 0xff || (version == 0 && parts.next().is_some()) {
            return None;
        }
        let trace_id = u128::from_str_radix(hex(trace, 32)?, 16).ok()?;
        let parent_id = u64::from_str_radix(hex(parent, 16)?, 16).ok()?;
        let flags = u8::from_str_radix(hex(flags, 2)?, 16).ok()?;
        Self::new(trace_id, parent_id, flags & 1 == 1)
    }

    /// The `traceparent` header for a call whose parent is `self`'s span.
    pub fn to_header(&self) -> String {
        self.to_string()
    }

    /// The trace id as W3C writes it: 32 lower-case hex digits.
    pub fn trace_hex(&self) -> String {
        format!("{:032x}", self.trace_id)
    }

    pub(crate) fn to_bytes(self) -> [u8; TRACE_BYTES] {
        let mut out = [0u8; TRACE_BYTES];
        out[..16].copy_from_slice(&self.trace_id.to_be_bytes());
        out[16..24].copy_from_slice(&self.parent_id.to_be_bytes());
        out[24] = u8::from(self.sampled);
        out
    }

    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        let bytes: &[u8; TRACE_BYTES] = bytes.try_into().map_err(|_| {
            format!(
                "a trace context of {} bytes, not {TRACE_BYTES}",
                bytes.len()
            )
        })?;
        let trace_id = u128::from_be_bytes(bytes[..16].try_into().expect("16 bytes"));
        let parent_id = u64::from_be_bytes(bytes[16..24].try_into().expect("8 bytes"));
        Self::new(trace_id, parent_id, bytes[24] & 1 == 1)
            .ok_or_else(|| "a trace context with a zero id".to_owned())
    }

    /// The same trace, under the span `span_id`.
    pub(crate) fn child(self, span_id: u64) -> Self {
        Self {
            parent_id: span_id,
            ..self
        }
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{:032x}-{:016x}-{:02x}",
            self.trace_id,
            self.parent_id,
            u8::from(self.sampled)
        )
    }
}

/// A new span id: random, never 0.
fn span_id() -> u64 {
    fastrand::u64(1..)
}

/// Whether a subscriber records the framework's spans: `cluster::trace` at DEBUG (a filter of
/// `cluster=debug` or `cluster::trace=debug`).
#[inline]
pub(crate) fn traced() -> bool {
    tracing::enabled!(target: "cluster::trace", tracing::Level::DEBUG)
}

/// The trace of a call: the one it was given, the calling handler's, the OpenTelemetry span
/// it is made in, or a new one while spans are recorded; none otherwise. Inlined, and the
/// rest out of line: a call nothing traces pays a few branches.
#[inline]
pub(crate) fn of_call(
    given: Option<TraceParent>,
    handler: Option<&crate::Context>,
) -> Option<TraceParent> {
    given
        .or_else(|| handler.and_then(crate::Context::trace))
        .or_else(|| traced().then(new_trace))
}

/// The trace of a call made while spans are recorded, outside any other.
#[cold]
fn new_trace() -> TraceParent {
    otel::current().unwrap_or(TraceParent {
        trace_id: fastrand::u128(1..),
        parent_id: span_id(),
        sampled: true,
    })
}

/// The span of one attempt of a call in `trace`, and the id the provider gets as its parent:
/// the OpenTelemetry span's own, where there is one.
pub(crate) fn attempt_span(
    trace: TraceParent,
    service: &str,
    function: &str,
    attempt: usize,
    node: &str,
) -> (tracing::Span, u64) {
    let span = tracing::debug_span!(
        target: "cluster::trace",
        "attempt",
        service,
        function,
        attempt,
        node,
        trace_id = %format_args!("{:032x}", trace.trace_id),
        span_id = tracing::field::Empty,
        outcome = tracing::field::Empty,
        // For OpenTelemetry: the caller's side of a remote call, and whether it failed.
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
    );
    let id = otel::ids(&span).map_or_else(span_id, |(_, id)| id);
    span.record("span_id", format_args!("{id:016x}"));
    (span, id)
}

/// Says on an attempt's span how it ended: `answered`, or the failure (an OpenTelemetry error).
pub(crate) fn attempt_ended(span: &tracing::Span, outcome: &str, answered: bool) {
    span.record("outcome", outcome);
    if !answered {
        span.record("otel.status_code", "ERROR");
    }
}

/// The span of a handler serving a request that carried `incoming` (the caller's attempt as
/// parent), and the trace the handler's own calls continue. No span while none is recorded;
/// no trace when the caller sent none and no span is recorded.
#[inline]
pub(crate) fn handler_span(
    incoming: Option<TraceParent>,
    service: &str,
    function: &str,
    caller: Option<&str>,
) -> (Option<tracing::Span>, Option<TraceParent>) {
    if !traced() {
        return (None, incoming.map(|trace| trace.child(span_id())));
    }
    recorded_handler_span(incoming, service, function, caller)
}

/// [`handler_span`] while spans are recorded.
#[inline(never)]
fn recorded_handler_span(
    incoming: Option<TraceParent>,
    service: &str,
    function: &str,
    caller: Option<&str>,
) -> (Option<tracing::Span>, Option<TraceParent>) {
    let span = tracing::debug_span!(
        target: "cluster::trace",
        "handle",
        service,
        function,
        caller,
        trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty,
        parent_id = tracing::field::Empty,
        otel.kind = "server",
    );
    if let Some(parent) = incoming {
        otel::set_parent(&span, parent);
        span.record("parent_id", format_args!("{:016x}", parent.parent_id));
    }
    let trace = match (otel::ids(&span), incoming) {
        (Some((trace_id, id)), incoming) => TraceParent {
            trace_id,
            parent_id: id,
            sampled: incoming.is_none_or(|t| t.sampled),
        },
        (None, Some(incoming)) => incoming.child(span_id()),
        (None, None) => TraceParent {
            trace_id: fastrand::u128(1..),
            parent_id: span_id(),
            sampled: true,
        },
    };
    span.record("trace_id", format_args!("{:032x}", trace.trace_id));
    span.record("span_id", format_args!("{:016x}", trace.parent_id));
    (Some(span), Some(trace))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_reads_back_as_it_was_written() {
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let parent = TraceParent::parse(header).unwrap();
        assert_eq!(parent.trace_id, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(parent.parent_id, 0x00f067aa0ba902b7);
        assert!(parent.sampled);
        assert_eq!(parent.to_header(), header);
        assert_eq!(TraceParent::from_bytes(&parent.to_bytes()), Ok(parent));
    }

    #[test]
    fn a_malformed_traceparent_is_none() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad}");
        }
        // A later version is read by its first four fields.
        assert!(
            TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-x")
                .is_some()
        );
        assert!(TraceParent::from_bytes(&[0; 24]).is_err());
        assert!(TraceParent::from_bytes(&[0; TRACE_BYTES]).is_err());
    }
}
