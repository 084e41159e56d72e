//! A client of Eureka's REST API, for our resolvers, registrar and registry backend.

use std::time::Duration;

use axum::http::{Method, StatusCode};

use super::transport::{Call, Transport, TransportError};
use crate::gateway::error_chain;
use crate::model::{Applications, Instance, json};
use crate::server::Clock;

/// What a registry server call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// No server answered.
    #[error("none of the {servers} registry servers answered")]
    Unreachable {
        /// How many were tried.
        servers: usize,
        /// The last failure.
        #[source]
        last: Option<TransportError>,
    },
    /// A server answered with an unexpected status.
    #[error("the registry server answered {status}: {body}")]
    Refused {
        /// The status.
        status: u16,
        /// The body, as text.
        body: String,
    },
}

/// What a heartbeat found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heartbeat {
    /// Renewed.
    Renewed,
    /// The server does not know the instance: register it again.
    Unknown,
}

/// A client of one or more registry servers (tried in order; the first that answers is used).
#[derive(Debug, Clone)]
pub struct EurekaClient {
    servers: Vec<String>,
    transport: Transport,
    timeout: Duration,
    max_answer_bytes: usize,
    clock: Clock,
}

/// The largest answer a client reads by default: 32 MiB, the whole registry of some 30,000
/// instances as Eureka's JSON has them (the registry server holds at most 10,000 by default).
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 32 << 20;

impl EurekaClient {
    /// A client of these servers, by base URL (`http://host:8761/eureka/`), over HTTP.
    pub fn new<I, S>(servers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            servers: servers
                .into_iter()
                .map(|s| format!("{}/", s.into().trim_end_matches('/')))
                .collect(),
            transport: Transport::default(),
            timeout: Duration::from_secs(5),
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
            clock: Clock::system(),
        }
    }

    /// A client of an in-process server.
    pub fn in_process(service: crate::server::Service) -> Self {
        let mut c = Self::new(["http://in-process/eureka/"]);
        c.transport = Transport::InProcess(service);
        c
    }

    /// The time each request may take: 5 s by default.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The largest answer read ([`DEFAULT_MAX_ANSWER_BYTES`] by default): a larger one is a
    /// failure, so that a registry (or whatever answers at its address) cannot make this
    /// process buffer and parse without bound. Parsing holds several times the answer's size.
    pub fn max_answer_bytes(mut self, bytes: usize) -> Self {
        self.max_answer_bytes = bytes;
        self
    }

    /// The clock `lastDirtyTimestamp`s are taken from (the system's by default).
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The servers, by base URL.
    pub fn servers(&self) -> &[String] {
        &self.servers
    }

    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Sends to each server in turn until one gives an answer `accept` takes: for a write,
    /// any but a 5xx (a 400 or a heartbeat's 404 means the same on every server, [`write`]);
    /// for a read of the registry, a success that parses, so that a server that is not a
    /// registry (a 404, an HTML page) or refuses this client (a 401) does not stop the next
    /// from being asked. The last refusal is the error's cause, naming its server.
    async fn send<T>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        accept: impl Fn(StatusCode, axum::body::Bytes) -> Result<T, Refusal>,
    ) -> Result<T, ClientError> {
        let mut last = None;
        for server in &self.servers {
            let shown_server = super::redacted(server);
            let call = Call {
                method: method.clone(),
                url: format!("{server}{path}"),
                json_body: body.clone(),
                timeout: self.timeout,
                max_body: self.max_answer_bytes,
            };
            let why = match self.transport.send(call).await {
                Ok((status, body)) => match accept(status, body) {
                    Ok(answer) => return Ok(answer),
                    Err(why) => why,
                },
                Err(e) => {
                    tracing::debug!("registry server {shown_server} did not answer: {e}");
                    last = Some(e);
                    continue;
                }
            };
            tracing::debug!("registry server {shown_server}: {why}");
            last = Some(TransportError {
                url: format!("{shown_server}{path}"),
                source: why,
            });
        }
        Err(ClientError::Unreachable {
            servers: self.servers.len(),
            last,
        })
    }

    /// A read of the registry: a success that parses ([`EurekaClient::send`]).
    async fn read(&self, path: &str) -> Result<Applications, ClientError> {
        let now = self.now_ms();
        self.send(Method::GET, path, None, |status, body| {
            if !status.is_success() {
                return Err(answered(status, &body));
            }
            json::read_applications(&body, now)
                .map_err(|e| format!("an unreadable document: {}", error_chain(&e)).into())
        })
        .await
    }

    fn refused(status: StatusCode, body: &[u8]) -> ClientError {
        ClientError::Refused {
            status: status.as_u16(),
            body: shown(body),
        }
    }

    /// `POST apps/{app}`.
    pub async fn register(&self, instance: &Instance) -> Result<(), ClientError> {
        let (status, body) = self
            .send(
                Method::POST,
                &format!("apps/{}", instance.app),
                Some(json::write_instance(instance)),
                write,
            )
            .await?;
        if status.is_success() {
            Ok(())
        } else {
            Err(Self::refused(status, &body))
        }
    }

    /// `PUT apps/{app}/{id}`.
    pub async fn heartbeat(&self, instance: &Instance) -> Result<Heartbeat, ClientError> {
        let path = format!(
            "apps/{}/{}?status={}&lastDirtyTimestamp={}",
            instance.app,
            instance.id(),
            instance.status,
            instance.last_dirty_timestamp
        );
        let (status, body) = self.send(Method::PUT, &path, None, write).await?;
        match status {
            s if s.is_success() => Ok(Heartbeat::Renewed),
            StatusCode::NOT_FOUND => Ok(Heartbeat::Unknown),
            s => Err(Self::refused(s, &body)),
        }
    }

    /// `DELETE apps/{app}/{id}`; false if the server did not know it.
    pub async fn cancel(&self, app: &str, id: &str) -> Result<bool, ClientError> {
        let (status, body) = self
            .send(Method::DELETE, &format!("apps/{app}/{id}"), None, write)
            .await?;
        match status {
            s if s.is_success() => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            s => Err(Self::refused(s, &body)),
        }
    }

    /// `GET apps/delta`: the changes of the last few minutes (180 s on Eureka and on our
    /// server), with the hashcode of the whole registry to check the result against.
    pub async fn delta(&self) -> Result<Applications, ClientError> {
        self.read("apps/delta").await
    }

    /// `GET apps/`: the whole registry.
    pub async fn applications(&self) -> Result<Applications, ClientError> {
        self.read("apps/").await
    }
}

/// Why an answer is not taken: the next server is asked.
type Refusal = Box<dyn std::error::Error + Send + Sync>;

/// A write's answer is taken unless the server failed (5xx): see [`EurekaClient::send`].
fn write(
    status: StatusCode,
    body: axum::body::Bytes,
) -> Result<(StatusCode, axum::body::Bytes), Refusal> {
    if status.is_server_error() {
        Err(answered(status, &body))
    } else {
        Ok((status, body))
    }
}

/// What a server answered, as a refusal's cause: a warming-up server's 503, a 404.
fn answered(status: StatusCode, body: &[u8]) -> Refusal {
    format!("answered {status}: {}", shown(body)).into()
}

/// A server's answer body as an error shows it: its first 200 bytes, trimmed, with control
/// characters, line and paragraph separators and bidirectional overrides escaped, so that a
/// log line stays one line that reads as it is, and a megabyte answer is not logged.
fn shown(body: &[u8]) -> String {
    const SHOWN: usize = 200;
    let text = String::from_utf8_lossy(&body[..body.len().min(SHOWN)]);
    let mut s = String::new();
    for c in text.trim().chars() {
        if c.is_control()
            || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}')
            || ('\u{202a}'..='\u{202e}').contains(&c)
            || ('\u{2066}'..='\u{2069}').contains(&c)
        {
            s.extend(c.escape_default());
        } else {
            s.push(c);
        }
    }
    if body.len() > SHOWN {
        s.push_str(&format!(" … ({} bytes)", body.len()));
    }
    s
}

#[cfg(test)]
mod shown_tests {
    #[test]
    fn an_answer_body_is_shown_short_and_on_one_line() {
        assert_eq!(super::shown(b" not found\r\n"), "not found");
        assert_eq!(super::shown(b"a\nFAKE LOG LINE"), "a\\nFAKE LOG LINE");
        assert_eq!(
            super::shown("a\u{2028}b\u{202e}c".as_bytes()),
            "a\\u{2028}b\\u{202e}c"
        );
        let long = super::shown(&[b'x'; 1 << 20]);
        assert!(
            long.len() < 250 && long.ends_with("(1048576 bytes)"),
            "{long}"
        );
    }
}
