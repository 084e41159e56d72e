//! `Dns`: a name the platform already resolves (a Kubernetes service, a Consul DNS name).

use super::{Endpoint, Resolve, ResolveError, ResolveFuture};

/// Resolves `service` through the system resolver, from a name template.
#[derive(Debug, Clone)]
pub struct Dns {
    template: String,
    port: u16,
}

impl Dns {
    /// `template` with `{service}` replaced by the service's name, e.g.
    /// `{service}.default.svc.cluster.local`; every address it resolves to, at `port`.
    pub fn new(template: impl Into<String>, port: u16) -> Self {
        Self {
            template: template.into(),
            port,
        }
    }

    fn name(&self, service: &str) -> String {
        self.template.replace("{service}", service)
    }
}

impl Resolve for Dns {
    fn resolve<'a>(&'a self, service: &'a str) -> ResolveFuture<'a> {
        Box::pin(async move {
            let name = self.name(service);
            match tokio::net::lookup_host((name.as_str(), self.port)).await {
                Ok(addrs) => {
                    let mut out: Vec<Endpoint> = addrs
                        .map(|a| Endpoint::new(a.ip().to_string(), a.port()))
                        .collect();
                    out.sort();
                    out.dedup();
                    if out.is_empty() {
                        Err(ResolveError::no_service(service))
                    } else {
                        Ok(out)
                    }
                }
                // The platform's resolver says the name does not exist (or cannot say): there
                // is nothing to call.
                Err(e) => {
                    tracing::debug!("{name} does not resolve: {e}");
                    Err(ResolveError::no_service(service))
                }
            }
        })
    }
}
