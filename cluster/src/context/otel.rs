//! The OpenTelemetry side of trace context, with the `opentelemetry` feature: the ids of a
//! `tracing` span as the `tracing-opentelemetry` layer made them, and a remote parent set on a
//! handler's span. Without the feature, or without that layer installed, there are no such
//! ids, and `trace.rs` makes its own.

use super::TraceParent;

#[cfg(feature = "opentelemetry")]
mod enabled {
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
    };
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    use super::TraceParent;

    /// The trace and span id OpenTelemetry gave `span`, if a layer records it.
    pub(crate) fn ids(span: &tracing::Span) -> Option<(u128, u64)> {
        let context = span.context();
        ids_of(context.span().span_context())
    }

    /// The OpenTelemetry span the current `tracing` span stands for, as a trace context.
    pub(crate) fn current() -> Option<TraceParent> {
        let span = tracing::Span::current();
        let context = span.context();
        let otel = context.span();
        let ids = otel.span_context();
        let (trace_id, span_id) = ids_of(ids)?;
        TraceParent::new(trace_id, span_id, ids.is_sampled())
    }

    fn ids_of(ids: &SpanContext) -> Option<(u128, u64)> {
        ids.is_valid().then(|| {
            (
                u128::from_be_bytes(ids.trace_id().to_bytes()),
                u64::from_be_bytes(ids.span_id().to_bytes()),
            )
        })
    }

    /// Makes the caller's attempt, `parent`, the OpenTelemetry parent of `span`.
    pub(crate) fn set_parent(span: &tracing::Span, parent: TraceParent) {
        let flags = if parent.sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        let remote = SpanContext::new(
            TraceId::from_bytes(parent.trace_id.to_be_bytes()),
            SpanId::from_bytes(parent.parent_id.to_be_bytes()),
            flags,
            true,
            TraceState::default(),
        );
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote));
    }
}

#[cfg(feature = "opentelemetry")]
pub(crate) use enabled::{current, ids, set_parent};

/// Without the feature: no OpenTelemetry ids.
#[cfg(not(feature = "opentelemetry"))]
pub(crate) fn ids(_: &tracing::Span) -> Option<(u128, u64)> {
    None
}

/// Without the feature: no OpenTelemetry span.
#[cfg(not(feature = "opentelemetry"))]
pub(crate) fn current() -> Option<TraceParent> {
    None
}

/// Without the feature: nothing to set.
#[cfg(not(feature = "opentelemetry"))]
pub(crate) fn set_parent(_: &tracing::Span, _: TraceParent) {}
