//! The HTTP side of forwarding: one batch posted to one peer (with the peer credentials),
//! retried while it is unavailable.

use std::time::Duration;

use axum::http::{StatusCode, header};

use super::wire::{BatchResponse, Item};
use crate::server::Credentials;

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
    timeout: Duration,
    credentials: Option<&Credentials>,
) -> Option<BatchResponse> {
    let body = serde_json::json!({ "replicationList": batch });
    let mut answer = None;
    for attempt in 0..3u32 {
        let sent = as_peer(http.post(endpoint), credentials)
            .timeout(timeout)
            .header(header::ACCEPT.as_str(), "application/json")
            .json(&body)
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => {
                answer = r.json::<BatchResponse>().await.ok();
                break;
            }
            Ok(r) if r.status() != StatusCode::SERVICE_UNAVAILABLE => {
                if matches!(r.status(), StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
                    tracing::warn!(
                        "peer {url} refused this server's peer credentials ({}): check --peer-user",
                        r.status()
                    );
                }
                tracing::warn!(
                    "peer {url} refused a batch of {}: {}",
                    batch.len(),
                    r.status()
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
