use std::future::Future;
use std::pin::Pin;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::service::{Encoded, ServiceDescription, decode, encode_value};

/// The future of one dispatched call: the encoded return value, or why there is none.
pub type DispatchFuture = Pin<Box<dyn Future<Output = Result<Encoded, DispatchError>> + Send>>;

/// A provider of one service, as `#[service]` generates it (`SearchServer<T>`).
pub trait Provide: Send + Sync + 'static {
    /// What it provides.
    fn description(&self) -> &'static ServiceDescription;

    /// Runs function number `function` (its index in the description) on encoded arguments.
    fn dispatch(&self, function: usize, args: &[u8]) -> DispatchFuture;

    /// The callers it admits; `None` (the default) admits every verified member of the
    /// cluster. [`Callers::may_call`](crate::Callers::may_call) sets it.
    fn callers(&self) -> Option<&crate::Callers> {
        None
    }
}

/// Why a dispatched call has no return value.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DispatchError {
    /// The arguments could not be decoded; the function did not run.
    BadArguments(String),
    /// The return value could not be encoded; the function ran.
    Unencodable(String),
    /// No function has this index; the function did not run.
    UnknownFunction(usize),
}

impl std::fmt::Display for DispatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::BadArguments(why) => write!(f, "cannot decode the arguments: {why}"),
            Self::Unencodable(why) => write!(f, "cannot encode the return value: {why}"),
            Self::UnknownFunction(index) => write!(f, "no function number {index}"),
        }
    }
}

impl std::error::Error for DispatchError {}

/// Decodes the argument tuple, runs `f` and encodes its return value. Decoding happens before
/// the future is built, so a bad request never starts the function.
pub fn dispatch_with<A, R, F, Fut>(args: &[u8], f: F) -> DispatchFuture
where
    A: DeserializeOwned,
    R: Serialize,
    F: FnOnce(A) -> Fut,
    Fut: Future<Output = R> + Send + 'static,
{
    match decode::<A>(args) {
        Ok(args) => {
            let run = f(args);
            Box::pin(async move {
                encode_value(&run.await).map_err(|e| DispatchError::Unencodable(e.0))
            })
        }
        Err(e) => Box::pin(std::future::ready(Err(DispatchError::BadArguments(
            by_argument(e.0),
        )))),
    }
}

/// The codec's "at [1].placed: …" in the argument tuple, as the caller counts arguments:
/// "argument 2, at .placed: …".
fn by_argument(message: String) -> String {
    let Some((index, rest)) = message
        .strip_prefix("at [")
        .and_then(|rest| rest.split_once(']'))
    else {
        return message;
    };
    match index.parse::<usize>() {
        Ok(n) => match rest.strip_prefix(':') {
            Some(said) => format!("argument {}:{said}", n + 1),
            None => format!("argument {}, at {rest}", n + 1),
        },
        Err(_) => message,
    }
}

/// The answer for a function index the provider does not have.
pub fn unknown_function(function: usize) -> DispatchFuture {
    Box::pin(std::future::ready(Err(DispatchError::UnknownFunction(
        function,
    ))))
}

#[cfg(test)]
mod tests {
    use super::{DispatchError, dispatch_with};
    use crate::service::encode;

    #[tokio::test]
    async fn arguments_that_do_not_decode_are_named_as_the_caller_counts_them() {
        let sent = encode(&("pear", ("x", "two"))).unwrap();
        let run = dispatch_with::<(String, (String, u32)), (), _, _>(&sent, |_| async {});
        let Err(DispatchError::BadArguments(said)) = run.await else {
            panic!("expected BadArguments");
        };
        assert!(said.starts_with("argument 2, at [1]: "), "{said}");
        let sent = encode(&("pear", "two")).unwrap();
        let run = dispatch_with::<(String, u32), (), _, _>(&sent, |_| async {});
        let Err(DispatchError::BadArguments(said)) = run.await else {
            panic!("expected BadArguments");
        };
        assert!(said.starts_with("argument 2: "), "{said}");
    }
}
