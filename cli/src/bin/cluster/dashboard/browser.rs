//! The browser's side: one HTTP/1.1 exchange per connection, by hand as the node's endpoint
//! does (`cluster/src/admin/http.rs`): the request head read up to the blank line (bounded),
//! the node's answer or a page saying why there is none, then close.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::upstream::{FETCH_TIMEOUT, Upstream};

/// The most bytes of a request's line and headers; past them, `431`.
const MAX_HEAD: usize = 8 << 10;

/// The time a browser has to send its request's head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves one connection; errors end it, there is nobody else to tell.
pub(super) async fn exchange<S>(mut stream: S, upstream: &Upstream)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(Head::Complete(head))) => head,
        Ok(Ok(Head::TooLarge)) => {
            let answer = plain(
                431,
                "Request Header Fields Too Large",
                "the request's head is too large",
            );
            let _ = send(&mut stream, &answer).await;
            return;
        }
        // Closed, failed or silent: nothing to answer.
        _ => return,
    };
    let answer = match route(&head) {
        Ok(path) => match upstream.fetch(path).await {
            Ok(answer) => answer,
            Err(why) => plain(502, "Bad Gateway", &why),
        },
        Err(refused) => refused,
    };
    let _ = send(&mut stream, &answer).await;
}

/// Writes `answer` and closes, within the fetch's own time: a browser that does not read
/// cannot hold its place for longer.
async fn send<S: AsyncWrite + Unpin>(stream: &mut S, answer: &[u8]) -> std::io::Result<()> {
    tokio::time::timeout(FETCH_TIMEOUT, async {
        stream.write_all(answer).await?;
        stream.shutdown().await
    })
    .await
    .unwrap_or(Ok(()))
}

/// The node's path to fetch for a request head, or the answer that refuses it.
fn route(head: &[u8]) -> Result<&'static str, Vec<u8>> {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if !parts.next().is_some_and(|v| v.starts_with("HTTP/1.")) {
        return Err(plain(
            400,
            "Bad Request",
            "an HTTP/1.x request line was expected",
        ));
    }
    let host = lines.find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("host")
            .then(|| value.trim())
    });
    if host.is_some_and(names_a_site) {
        return Err(plain(
            421,
            "Misdirected Request",
            "this dashboard answers a Host that is an IP address or localhost",
        ));
    }
    // As the node: the path without a query string, then the method.
    let path = match target.split('?').next().unwrap_or_default() {
        "/" => "/",
        "/metrics" => "/metrics",
        _ => {
            return Err(plain(
                404,
                "Not Found",
                "this endpoint serves / (the dashboard) and /metrics",
            ));
        }
    };
    if method != "GET" {
        return Err(plain(405, "Method Not Allowed", &format!("GET {path}")));
    }
    Ok(path)
}

/// Whether a `Host` names a site rather than an address or `localhost`: a web page that made
/// its own name resolve to 127.0.0.1 (DNS rebinding) must not read the cluster through the
/// operator's browser.
fn names_a_site(host: &str) -> bool {
    // Without its port: `[::1]:8080`, `127.0.0.1:8080`, `localhost`.
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    !(name.parse::<std::net::IpAddr>().is_ok() || name.eq_ignore_ascii_case("localhost"))
}

enum Head {
    Complete(Vec<u8>),
    TooLarge,
    Closed,
}

/// The request's line and headers, up to the blank line; at most [`MAX_HEAD`] bytes.
async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> std::io::Result<Head> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(Head::Closed);
        }
        // The blank line may straddle two reads: look from a little before the new bytes.
        let from = head.len().saturating_sub(3);
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = head[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            head.truncate(from + end);
            return Ok(Head::Complete(head));
        }
        if head.len() > MAX_HEAD {
            return Ok(Head::TooLarge);
        }
    }
}

/// A plain-text answer; the reason is the body, with a newline.
fn plain(status: u16, reason: &str, body: &str) -> Vec<u8> {
    let allow = if status == 405 { "Allow: GET\r\n" } else { "" };
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\nCache-Control: no-store\r\n\
         X-Content-Type-Options: nosniff\r\n{allow}\r\n{body}\n",
        body.len() + 1
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(answer: Result<&'static str, Vec<u8>>) -> String {
        match answer {
            Ok(path) => format!("fetch {path}"),
            Err(answer) => String::from_utf8_lossy(&answer[..12]).into_owned(),
        }
    }

    #[test]
    fn only_get_of_the_two_pages_from_this_machine_is_fetched() {
        let cases: [(&[u8], &str); 9] = [
            (b"GET / HTTP/1.1\r\nHost: 127.0.0.1:8080", "fetch /"),
            (
                b"GET /metrics?x=1 HTTP/1.1\r\nHost: localhost:8080",
                "fetch /metrics",
            ),
            (b"GET / HTTP/1.1\r\nHost: [::1]:8080", "fetch /"),
            (b"GET / HTTP/1.0", "fetch /"),
            (b"POST / HTTP/1.1\r\nHost: 127.0.0.1", "HTTP/1.1 405"),
            (b"GET /admin HTTP/1.1", "HTTP/1.1 404"),
            (b"GET / HTTP/1.1\r\nHost: evil.example:8080", "HTTP/1.1 421"),
            (b"\x16\x03\x01 hello", "HTTP/1.1 400"),
            (b"", "HTTP/1.1 400"),
        ];
        for (head, expected) in cases {
            assert_eq!(
                status(route(head)),
                expected,
                "{}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[tokio::test]
    async fn a_head_past_the_bound_is_refused() {
        let (mut client, mut server) = tokio::io::duplex(64 << 10);
        let mut request = b"GET / HTTP/1.1\r\n".to_vec();
        request.extend(std::iter::repeat_n(b'a', MAX_HEAD + 10));
        client.write_all(&request).await.unwrap();
        assert!(matches!(
            read_head(&mut server).await.unwrap(),
            Head::TooLarge
        ));
    }
}
