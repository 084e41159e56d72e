//! `Static`: the list you wrote. Where everybody starts, and where many applications stay.

use std::collections::HashMap;

use super::{Endpoint, Resolve, ResolveError, ResolveFuture};

/// Endpoints listed by hand, per service.
#[derive(Debug, Clone, Default)]
pub struct Static {
    services: HashMap<String, Vec<Endpoint>>,
}

impl Static {
    /// No services yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a service and its endpoints.
    pub fn service<I>(mut self, name: &str, endpoints: I) -> Self
    where
        I: IntoIterator<Item = Endpoint>,
    {
        self.services
            .entry(name.to_owned())
            .or_default()
            .extend(endpoints);
        self
    }
}

impl Resolve for Static {
    fn resolve<'a>(&'a self, service: &'a str) -> ResolveFuture<'a> {
        let found = self
            .services
            .get(service)
            .filter(|e| !e.is_empty())
            .cloned()
            .ok_or_else(|| ResolveError::no_service(service));
        Box::pin(std::future::ready(found))
    }
}
