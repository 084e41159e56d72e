//! How a client reaches registry servers: HTTP, or an in-process server (for tests on a
//! paused clock, and for a process that hosts its own registry).

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, Method, Request, StatusCode, header};
use http_body_util::BodyExt as _;

use crate::server::Service;

/// HTTP (reqwest, rustls) or an in-process server.
#[derive(Debug, Clone)]
pub enum Transport {
    /// Real requests.
    Http(reqwest::Client),
    /// Requests answered by an in-process server; the URL's host is ignored.
    InProcess(Service),
}

impl Default for Transport {
    fn default() -> Self {
        Transport::Http(reqwest::Client::new())
    }
}

/// A request that got no answer, or an answer that says the server cannot serve (5xx).
#[derive(Debug, thiserror::Error)]
#[error("asking {url}")]
pub struct TransportError {
    /// The URL, its password replaced by `***` ([`super::redacted`]).
    pub url: String,
    /// Why.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// A request to a registry server.
#[derive(Debug)]
pub(crate) struct Call {
    pub(crate) method: Method,
    pub(crate) url: String,
    pub(crate) json_body: Option<Vec<u8>>,
    pub(crate) timeout: std::time::Duration,
    /// The largest answer body read: past it the answer is a failure, not a buffer that grows
    /// with whatever a server (or whoever answers at its address) sends.
    pub(crate) max_body: usize,
}

/// An answer body larger than the client allows ([`crate::client::EurekaClient::max_answer_bytes`]).
#[derive(Debug, thiserror::Error)]
#[error("the answer is larger than {0} bytes")]
pub struct TooLarge(pub usize);

impl Transport {
    pub(crate) async fn send(&self, call: Call) -> Result<(StatusCode, Bytes), TransportError> {
        let url = super::redacted(&call.url).into_owned();
        let err = |e: Box<dyn std::error::Error + Send + Sync>| TransportError {
            url: url.clone(),
            source: e,
        };
        match self {
            Transport::Http(client) => {
                let mut req = client
                    .request(call.method, &call.url)
                    .timeout(call.timeout)
                    .header(header::ACCEPT.as_str(), "application/json");
                if let Some(body) = call.json_body {
                    req = req
                        .header(header::CONTENT_TYPE.as_str(), "application/json")
                        .body(body);
                }
                // reqwest names the URL, password and all: ours is shown, redacted, instead.
                let mut res = req
                    .send()
                    .await
                    .map_err(|e| err(Box::new(e.without_url())))?;
                let status = res.status();
                let too_large = || err(Box::new(TooLarge(call.max_body)));
                if res
                    .content_length()
                    .is_some_and(|n| n > call.max_body as u64)
                {
                    return Err(too_large());
                }
                let mut body = Vec::new();
                while let Some(chunk) = res
                    .chunk()
                    .await
                    .map_err(|e| err(Box::new(e.without_url())))?
                {
                    if body.len() + chunk.len() > call.max_body {
                        return Err(too_large());
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok((status, Bytes::from(body)))
            }
            Transport::InProcess(service) => {
                let path = match call.url.find("://") {
                    Some(i) => {
                        let rest = &call.url[i + 3..];
                        rest.find('/').map_or("/", |p| &rest[p..]).to_owned()
                    }
                    None => call.url.clone(),
                };
                let mut req = Request::builder()
                    .method(call.method)
                    .uri(path)
                    .header(header::ACCEPT, HeaderValue::from_static("application/json"));
                let body = match call.json_body {
                    Some(b) => {
                        req = req.header(header::CONTENT_TYPE, "application/json");
                        Body::from(b)
                    }
                    None => Body::empty(),
                };
                let req = req.body(body).map_err(|e| err(Box::new(e)))?;
                let res = service.call(req).await;
                let status = res.status();
                let body = res
                    .into_body()
                    .collect()
                    .await
                    .map_err(|e| err(Box::new(e)))?
                    .to_bytes();
                Ok((status, body))
            }
        }
    }
}
