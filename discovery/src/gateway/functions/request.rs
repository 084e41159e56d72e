//! What a function route reads from the request besides its path: the metadata headers, the
//! content type, the body (bounded) as JSON.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::status::refused;
use super::{
    EDGE_CALLER_KEY, GATEWAY_REQUEST_KEY, MAX_META_BYTES, MAX_META_HEADERS, MAX_META_VALUE,
    META_PREFIX,
};

/// The `x-cluster-meta-KEY: VALUE` headers as metadata, bounded; the gateway's own keys are
/// not the client's to set.
pub(super) fn metadata(headers: &HeaderMap) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut bytes = 0;
    for (name, value) in headers {
        let Some(key) = name.as_str().strip_prefix(META_PREFIX) else {
            continue;
        };
        if out.len() == MAX_META_HEADERS {
            return Err(format!(
                "at most {MAX_META_HEADERS} `{META_PREFIX}*` headers"
            ));
        }
        if key.is_empty() || key == EDGE_CALLER_KEY || key == GATEWAY_REQUEST_KEY {
            return Err(format!("`{name}` is not a metadata key a client may set"));
        }
        if value.len() > MAX_META_VALUE {
            return Err(format!("`{name}` is longer than {MAX_META_VALUE} bytes"));
        }
        let Ok(value) = value.to_str() else {
            return Err(format!("`{name}` is not visible ASCII"));
        };
        // The call's own bound, said here as the client's mistake rather than after the body
        // was read (with the gateway's two keys' room kept).
        bytes += key.len() + value.len();
        if bytes > MAX_META_BYTES {
            return Err(format!(
                "the `{META_PREFIX}*` headers carry more than {MAX_META_BYTES} bytes"
            ));
        }
        out.push((key.to_owned(), value.to_owned()));
    }
    Ok(out)
}

pub(super) fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

/// The body, at most `limit` bytes arriving within `timeout`, as JSON, with the permit of
/// `parsing` it was parsed under: keep it while the parsed value is.
pub(super) async fn read_json(
    body: Incoming,
    limit: usize,
    timeout: Duration,
    parsing: &Arc<Semaphore>,
) -> Result<(serde_json::Value, OwnedSemaphorePermit), Response<Body>> {
    let too_large = || {
        let mut r = refused(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too large",
            &format!("the body is larger than {limit} bytes"),
        );
        // The rest of the body is not read: the connection cannot carry another request.
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        r
    };
    if hyper::body::Body::size_hint(&body)
        .upper()
        .is_some_and(|n| n > limit as u64)
        || hyper::body::Body::size_hint(&body).lower() > limit as u64
    {
        return Err(too_large());
    }
    let read = tokio::time::timeout(timeout, Limited::new(body, limit).collect());
    let Ok(read) = read.await else {
        let mut r = refused(
            StatusCode::REQUEST_TIMEOUT,
            "body too slow",
            &format!("the body did not arrive within {timeout:?}"),
        );
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return Err(r);
    };
    let bytes = match read {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => return Err(too_large()),
        Err(_) => {
            return Err(refused(
                StatusCode::BAD_REQUEST,
                "bad body",
                "the request body could not be read",
            ));
        }
    };
    // The semaphore is never closed.
    let Ok(permit) = parsing.clone().acquire_owned().await else {
        return Err(refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the route is closing",
        ));
    };
    let parsed = serde_json::from_slice(&bytes).map_err(|e| {
        refused(
            StatusCode::BAD_REQUEST,
            "bad json",
            &format!("the body is not JSON: {e}"),
        )
    })?;
    Ok((parsed, permit))
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderName;

    use super::*;

    #[test]
    fn metadata_headers_are_bounded_and_the_gateway_s_keys_kept() {
        let mut h = HeaderMap::new();
        h.insert("x-cluster-meta-tenant", "acme".parse().unwrap());
        h.insert("x-other", "x".parse().unwrap());
        assert_eq!(
            metadata(&h).unwrap(),
            vec![("tenant".to_owned(), "acme".to_owned())]
        );
        h.insert("x-cluster-meta-edge-caller", "admin".parse().unwrap());
        assert!(metadata(&h).is_err());
        let mut many = HeaderMap::new();
        for n in 0..=MAX_META_HEADERS {
            many.insert(
                HeaderName::from_bytes(format!("x-cluster-meta-k{n}").as_bytes()).unwrap(),
                "v".parse().unwrap(),
            );
        }
        assert!(metadata(&many).unwrap_err().contains("at most"));
        let mut long = HeaderMap::new();
        long.insert(
            "x-cluster-meta-k",
            "v".repeat(MAX_META_VALUE + 1).parse().unwrap(),
        );
        assert!(metadata(&long).unwrap_err().contains("longer"));
        // Under each header's bound, past the call's: refused here, not after the body.
        let mut heavy = HeaderMap::new();
        for n in 0..MAX_META_HEADERS {
            heavy.insert(
                HeaderName::from_bytes(format!("x-cluster-meta-k{n}").as_bytes()).unwrap(),
                "v".repeat(MAX_META_VALUE).parse().unwrap(),
            );
        }
        assert!(metadata(&heavy).unwrap_err().contains("more than"));
    }

    #[test]
    fn json_is_application_json_with_or_without_parameters() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, v.parse().unwrap());
            is_json(&h)
        };
        assert!(with("application/json"));
        assert!(with("Application/JSON; charset=utf-8"));
        assert!(!with("text/plain"));
        assert!(!is_json(&HeaderMap::new()));
    }
}
