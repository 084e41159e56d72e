//! The provider's handles, per hosted service and function: resolved when the service is hosted.

use std::sync::{Arc, OnceLock};

use metrics::{Counter, Histogram};
use std::time::Duration;

use super::{Served, Sink, names};
use crate::error::Reason;
use crate::service::ServiceDescription;

/// The handles of a hosted service's functions, by index.
pub(crate) struct ServiceMeters {
    pub(crate) functions: Box<[Arc<ServedMeters>]>,
}

/// The handles of one hosted function.
pub(crate) struct ServedMeters {
    sink: Arc<Sink>,
    service: &'static str,
    function: &'static str,
    duration: Histogram,
    /// Registered on first use, as the caller's outcomes.
    outcomes: [OnceLock<Counter>; Served::COUNT],
    /// Overloaded, draining.
    refusals: [OnceLock<Counter>; 2],
}

impl ServiceMeters {
    pub(crate) fn new(sink: &Arc<Sink>, description: &'static ServiceDescription) -> Self {
        let service = description.name.as_str();
        let functions = description
            .functions
            .iter()
            .map(|f| {
                let function = f.name.as_str();
                let labels = [("service", service), ("function", function)];
                Arc::new(ServedMeters {
                    sink: sink.clone(),
                    service,
                    function,
                    duration: sink.histogram(&names::HANDLER_DURATION, &labels),
                    outcomes: std::array::from_fn(|_| OnceLock::new()),
                    refusals: std::array::from_fn(|_| OnceLock::new()),
                })
            })
            .collect();
        Self { functions }
    }
}

impl ServedMeters {
    /// Counts a request that ended as `served`.
    pub(crate) fn count(&self, served: Served) {
        self.outcomes[served.index()]
            .get_or_init(|| {
                let labels = [
                    ("service", self.service),
                    ("function", self.function),
                    ("outcome", served.label()),
                ];
                self.sink.counter(&names::REQUESTS, &labels)
            })
            .increment(1);
    }

    /// Counts a request that admission refused for `reason` (`Overloaded`, `Draining`).
    pub(crate) fn refused(&self, reason: Reason) {
        let (slot, label) = match reason {
            Reason::Draining => (1, "draining"),
            _ => (0, "overloaded"),
        };
        self.refusals[slot]
            .get_or_init(|| {
                let labels = [
                    ("service", self.service),
                    ("function", self.function),
                    ("reason", label),
                ];
                self.sink.counter(&names::ADMISSION_REFUSALS, &labels)
            })
            .increment(1);
    }

    /// Counts a handler that ended as `served` after running for `elapsed`.
    pub(crate) fn ended(&self, served: Served, elapsed: Duration) {
        self.count(served);
        self.duration.record(elapsed.as_secs_f64());
    }
}
