use std::convert::Infallible;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use super::Client;
use crate::error::{CallError, RpcErrorKind};
use crate::options::CallOptions;
use crate::service::CodecError;

type Decode<T, E> = fn(&[u8]) -> Result<Result<T, E>, CodecError>;

/// One call, not yet started: set per-call overrides, then `.await` it.
///
/// ```no_run
/// # use std::time::Duration;
/// # async fn demo(call: cluster::Call<u64, std::convert::Infallible>) {
/// let n = call.timeout(Duration::from_secs(120)).retry_after(Duration::from_millis(100)).await;
/// # }
/// ```
#[must_use = "a call does nothing until it is awaited"]
pub struct Call<T, E> {
    client: Client,
    function: usize,
    args: Result<Vec<u8>, CodecError>,
    overrides: CallOptions,
    decode: Decode<T, E>,
}

/// The future of an awaited [`Call`].
pub type CallFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, CallError<E>>> + Send>>;

impl<T, E> Call<T, E> {
    pub(crate) fn new(
        client: Client,
        function: usize,
        args: Result<Vec<u8>, CodecError>,
        decode: Decode<T, E>,
    ) -> Self {
        Self {
            client,
            function,
            args,
            overrides: CallOptions::new(),
            decode,
        }
    }

    /// The per-attempt timeout of this call.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.overrides.timeout = Some(timeout);
        self
    }

    /// The first pause between attempts; the rest of the retry policy stays as merged.
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.overrides.retry_after = Some(after);
        self
    }

    /// The budget of this call: all attempts and pauses, from its start.
    pub fn budget(mut self, budget: Duration) -> Self {
        self.overrides.retry_budget = Some(budget);
        self
    }

    /// One attempt, whatever happens. A caller can turn retries off; it cannot make a function
    /// the provider did not declare idempotent run again after it may have run.
    pub fn no_retry(mut self) -> Self {
        self.overrides.retry_enabled = Some(false);
        self
    }

    /// Any fields of `options` override the merged ones for this call.
    pub fn options(mut self, options: CallOptions) -> Self {
        self.overrides = self.overrides.overlay(&options);
        self
    }
}

impl<T, E> IntoFuture for Call<T, E>
where
    T: Send + 'static,
    E: Send + 'static,
{
    type Output = Result<T, CallError<E>>;
    type IntoFuture = CallFuture<T, E>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let Call {
                client,
                function,
                args,
                overrides,
                decode,
            } = self;
            let args = match args {
                Ok(args) => args,
                Err(e) => {
                    let detail = format!("cannot encode the arguments: {e}");
                    return Err(super::attempt::early_error(
                        &client,
                        function,
                        RpcErrorKind::Protocol,
                        detail,
                    ));
                }
            };
            let started = tokio::time::Instant::now();
            let bytes = super::attempt::run(&client, function, args, &overrides)
                .await
                .map_err(never_app)?;
            match decode(&bytes) {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(e)) => Err(CallError::App(e)),
                Err(e) => {
                    let detail =
                        format!("cannot decode the reply after {:?}: {e}", started.elapsed());
                    Err(super::attempt::early_error(
                        &client,
                        function,
                        RpcErrorKind::Protocol,
                        detail,
                    ))
                }
            }
        })
    }
}

fn never_app<E>(e: CallError<Infallible>) -> CallError<E> {
    e.map_app(|never| match never {})
}
