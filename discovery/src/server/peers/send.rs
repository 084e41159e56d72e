//! The HTTP side of forwarding: one batch posted to one peer, retried while it is unavailable.

use std::time::Duration;

use axum::http::{StatusCode, header};

use super::wire::{BatchResponse, Item};

/// Posts `batch` to `endpoint` (the batch endpoint of the peer at `url`); the peer's answer,
/// or `None` if it refused the batch or did not answer after three attempts.
pub(super) async fn post_batch(
    http: &reqwest::Client,
    url: &str,
    endpoint: &str,
    batch: &[Item],
    timeout: Duration,
) -> Option<BatchResponse> {
    let body = serde_json::json!({ "replicationList": batch });
    let mut answer = None;
    for attempt in 0..3u32 {
        let sent = http
            .post(endpoint)
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
