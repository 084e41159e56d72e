//! The HTTP side of forwarding: one batch posted to one peer (with the peer credentials),
//! retried while it is unavailable.

use std::time::Duration;

use axum::http::{StatusCode, header};

use super::Settings;
use super::wire::{BatchResponse, Item};
use crate::server::Credentials;
use crate::server::limits::warn::throttled_warn;

/// A peer's answer, read up to `max` bytes: `None` past that (or if it breaks off), so that a
/// peer, or whoever answers in its name on plaintext, cannot make this server hold more.
pub(super) async fn read_capped(mut answer: reqwest::Response, max: usize) -> Option<Vec<u8>> {
    if answer.content_length().is_some_and(|n| n > max as u64) {
        return None;
    }
    let mut body = Vec::new();
    while let Some(chunk) = answer.chunk().await.ok()? {
        if body.len().saturating_add(chunk.len()) > max {
            return None;
        }
        body.extend_from_slice(&chunk);
    }
    Some(body)
}

/// A request with this server's peer credentials, if it has any.
pub(super) fn as_peer(
    request: reqwest::RequestBuilder,
    credentials: Option<&Credentials>,
) -> reqwest::RequestBuilder {
    match credentials {
        Some(c) => request.basic_auth(c.user(), Some(c.password())),
        None => request,
    }
}

/// Posts `batch` to `endpoint` (the batch endpoint of the peer at `url`); the peer's answer,
/// or `None` if it refused the batch or did not answer after three attempts.
pub(super) async fn post_batch(
    http: &reqwest::Client,
    url: &str,
    endpoint: &str,
    batch: &[Item],
    settings: &Settings,
) -> Option<BatchResponse> {
    let body = serde_json::json!({ "replicationList": batch });
    let mut answer = None;
    for attempt in 0..3u32 {
        let sent = as_peer(http.post(endpoint), settings.credentials.as_ref())
            .timeout(settings.timeout)
            .header(header::ACCEPT.as_str(), "application/json")
            .json(&body)
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => {
                let body = read_capped(r, settings.max_answer_bytes).await;
                answer = body.and_then(|b| serde_json::from_slice::<BatchResponse>(&b).ok());
                if answer.is_none() {
                    throttled_warn!(
                        settings.throttle,
                        "peer-answer",
                        url,
                        "peer {url} answered a batch with something else than a batch answer \
                         (or more than {} bytes)",
                        settings.max_answer_bytes
                    );
                }
                break;
            }
            Ok(r) if r.status() != StatusCode::SERVICE_UNAVAILABLE => {
                let status = r.status();
                if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
                    throttled_warn!(
                        settings.throttle,
                        "peer-credentials",
                        url,
                        "peer {url} refused this server's peer credentials ({status}): check \
                         --peer-user"
                    );
                }
                throttled_warn!(
                    settings.throttle,
                    "peer-refused",
                    url,
                    "peer {url} refused a batch of {}: {status}",
                    batch.len()
                );
                break;
            }
            Ok(_) | Err(_) => {
                tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
            }
        }
    }
    answer
}
