use std::any::Any;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, RwLock};

use futures::FutureExt;
use tokio::time::Instant;

use super::admission::Admission;
use super::{DispatchError, Provide};
use crate::error::Reason;
use crate::service::{WIRE_VERSION, signature_hash};
use crate::transport::{Reply, Request};

/// Routes requests to the services a node hosts.
pub(crate) struct Dispatcher {
    services: RwLock<HashMap<String, Arc<Hosted>>>,
    max_reply: usize,
    pub(crate) admission: Admission,
}

struct Hosted {
    provider: Arc<dyn Provide>,
    // name -> (index, signature hash): a request names the function and the signature it means.
    functions: HashMap<String, (usize, u64)>,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.read().keys().cloned().collect();
        f.debug_struct("Dispatcher")
            .field("services", &names)
            .finish()
    }
}

impl Dispatcher {
    /// A dispatcher whose encoded replies may be at most `max_reply` bytes: a larger one is
    /// answered with an error instead, rather than breaking the connection for every call on it.
    /// At most `max_concurrent` calls run at once; more are refused before they run.
    pub(crate) fn new(max_reply: usize, max_concurrent: usize) -> Self {
        Self {
            services: RwLock::default(),
            max_reply,
            admission: Admission::new(max_concurrent),
        }
    }

    /// Hosts a provider, replacing one of the same service name.
    pub(crate) fn host(&self, provider: Arc<dyn Provide>) {
        let description = provider.description();
        let functions = description
            .functions
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name.clone(), (i, signature_hash(&f.signature))))
            .collect();
        let hosted = Arc::new(Hosted {
            provider,
            functions,
        });
        self.write().insert(description.name.clone(), hosted);
    }

    /// Stops hosting a service; calls already running finish.
    pub(crate) fn unhost(&self, service: &str) {
        self.write().remove(service);
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<Hosted>>> {
        self.services.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<Hosted>>> {
        self.services.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs one request until `deadline`. Never panics, whatever the request or the provider do.
    pub(crate) async fn handle(&self, request: Request, deadline: Instant) -> Reply {
        if request.wire != WIRE_VERSION {
            let detail = format!(
                "request of wire version {}, this node speaks {WIRE_VERSION}",
                request.wire
            );
            return refuse(Reason::WireVersion, detail);
        }
        let Some(hosted) = self.read().get(&request.service).cloned() else {
            return refuse(
                Reason::NoService,
                format!("this node does not provide `{}`", request.service),
            );
        };
        let Some(&(index, signature)) = hosted.functions.get(&request.function) else {
            let detail = format!(
                "`{}` has no function `{}`",
                request.service, request.function
            );
            return refuse(Reason::NoFunction, detail);
        };
        if signature != request.signature {
            let detail = format!(
                "`{}.{}` has another signature here",
                request.service, request.function
            );
            return refuse(Reason::NoFunction, detail);
        }
        let _permit = match self.admission.admit() {
            Ok(permit) => permit,
            Err((reason, detail)) => return refuse(reason, detail),
        };

        // Building the future runs no user code, but a generated adapter is still code: a panic
        // while building it is caught like one while running it.
        let run = std::panic::catch_unwind(AssertUnwindSafe(|| {
            hosted.provider.dispatch(index, request.args)
        }));
        let outcome = match run {
            Ok(future) => {
                tokio::time::timeout_at(deadline, AssertUnwindSafe(future).catch_unwind()).await
            }
            Err(panic) => Ok(Err(panic)),
        };
        match outcome {
            Ok(Ok(Ok(bytes))) if bytes.len() > self.max_reply => Reply::TooLarge(format!(
                "the reply is {} bytes, more than the frame limit allows ({})",
                bytes.len(),
                self.max_reply
            )),
            Ok(Ok(Ok(bytes))) => Reply::Done(bytes),
            Ok(Ok(Err(DispatchError::BadArguments(e)))) => refuse(Reason::BadArguments, e),
            Ok(Ok(Err(DispatchError::UnknownFunction(i)))) => refuse(
                Reason::NoFunction,
                format!("the provider has no function number {i}"),
            ),
            Ok(Ok(Err(e))) => Reply::Undeliverable(e.to_string()),
            Ok(Err(panic)) => {
                let message = panic_message(&*panic);
                tracing::error!(
                    service = %request.service,
                    function = %request.function,
                    "provider panicked: {message}"
                );
                Reply::Panicked(message)
            }
            Err(_) => Reply::Expired,
        }
    }
}

fn refuse(reason: Reason, detail: String) -> Reply {
    Reply::Refused(reason.code(), detail)
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}
