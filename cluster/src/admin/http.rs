//! One HTTP/1.1 exchange, by hand: read the request head (bounded), answer, close.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{MAX_HEAD, OPENING_TIMEOUT, Render};

/// The content type of Prometheus's text format.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The dashboard's content type.
const HTML: &str = "text/html; charset=utf-8";

/// What a browser may do with the dashboard: show it and its inline style, run nothing, load
/// nothing, be framed by nobody. The names on it come from any member of the cluster.
const HTML_HEADERS: &str = "Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'\r\n\
X-Content-Type-Options: nosniff\r\nX-Frame-Options: DENY\r\nReferrer-Policy: no-referrer\r\nCache-Control: no-store\r\n";

/// Reads one request from `stream` and answers it; `member` says whether the caller's
/// certificate names a member of the cluster (always `Ok` in plaintext, where `plaintext` asks
/// for a `Host` that names no site: see [`rebound`]).
pub(super) async fn exchange<S>(
    mut stream: S,
    render: &Render,
    member: Result<(), String>,
    plaintext: bool,
    opened: &AtomicBool,
) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // A connection that says nothing holds its place for this long, not the whole exchange's.
    let Ok(head) = tokio::time::timeout(OPENING_TIMEOUT, read_head(&mut stream)).await else {
        return Ok(());
    };
    let head = head?;
    opened.store(true, Ordering::Release);
    let answer = match head {
        Head::Complete(head) => match member {
            Ok(()) if plaintext && rebound(&head) => plain(
                421,
                "Misdirected Request",
                "in plaintext this endpoint answers a Host that is an IP address or localhost\n",
            ),
            Ok(()) => answer(&head, render).await,
            Err(why) => plain(403, "Forbidden", &format!("{why}\n")),
        },
        Head::TooLarge => plain(
            431,
            "Request Header Fields Too Large",
            "the request's head is too large\n",
        ),
        // The peer closed before a whole head: nothing to answer.
        Head::Closed => return Ok(()),
    };
    stream.write_all(&answer).await?;
    stream.shutdown().await
}

/// Whether a plaintext request names a site as its `Host`: a web page that made its own name
/// resolve to this node (DNS rebinding) would read the cluster's map through an operator's
/// browser. A scraper or curl names an address, or `localhost`.
fn rebound(head: &[u8]) -> bool {
    let text = String::from_utf8_lossy(head);
    let host = text.lines().skip(1).find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("host")
            .then(|| value.trim().to_owned())
    });
    let Some(host) = host else {
        return false;
    };
    // Without its port: `[::1]:9464`, `10.0.0.7:9464`, `localhost`.
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default().to_owned(),
        None => host
            .rsplit_once(':')
            .map_or(host.as_str(), |(h, _)| h)
            .to_owned(),
    };
    !(name.parse::<std::net::IpAddr>().is_ok() || name.eq_ignore_ascii_case("localhost"))
}

enum Head {
    Complete(Vec<u8>),
    TooLarge,
    Closed,
}

/// The request's line and headers, up to the blank line; at most [`MAX_HEAD`] bytes.
async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> io::Result<Head> {
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
        if let Some(end) = find(&head[from..], b"\r\n\r\n") {
            head.truncate(from + end);
            return Ok(Head::Complete(head));
        }
        if head.len() > MAX_HEAD {
            return Ok(Head::TooLarge);
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The answer to a request whose head is `head`.
async fn answer(head: &[u8], render: &Render) -> Vec<u8> {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.trim_end().split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if !parts.next().is_some_and(|v| v.starts_with("HTTP/1.")) {
        return plain(
            400,
            "Bad Request",
            "an HTTP/1.x request line was expected\n",
        );
    }
    // The path without a query string: Prometheus may add its own parameters.
    let path = target.split('?').next().unwrap_or_default().to_owned();
    let dashboard = match path.as_str() {
        "/metrics" => false,
        "/" => true,
        _ => {
            return plain(
                404,
                "Not Found",
                "this endpoint serves / (the dashboard) and /metrics\n",
            );
        }
    };
    // Before anything is made: a page is not rendered for a method that gets none.
    if method != "GET" && method != "HEAD" {
        return plain(405, "Method Not Allowed", &format!("GET {path}\n"));
    }
    // Made on a blocking thread: a page of a large registry takes a while, and the node's
    // runtime (its calls, its gossip) must not wait for it.
    let pages = render.clone();
    let made = tokio::task::spawn_blocking(move || match dashboard {
        true => (pages.dashboard)(),
        false => (pages.metrics)(),
    })
    .await;
    let content_type = if dashboard { HTML } else { TEXT_FORMAT };
    let Ok(Some(text)) = made else {
        return plain(
            404,
            "Not Found",
            "this node records into the process's metrics recorder, not its own\n",
        );
    };
    let mut out = response(200, "OK", content_type, text.len());
    if method == "GET" {
        out.extend_from_slice(text.as_bytes());
    }
    out
}

fn plain(status: u16, reason: &str, body: &str) -> Vec<u8> {
    let mut out = response(status, reason, "text/plain; charset=utf-8", body.len());
    out.extend_from_slice(body.as_bytes());
    out
}

fn response(status: u16, reason: &str, content_type: &str, length: usize) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\nConnection: close\r\n"
    );
    if status == 405 {
        out.push_str("Allow: GET, HEAD\r\n");
    }
    if content_type == HTML {
        out.push_str(HTML_HEADERS);
    }
    out.push_str("\r\n");
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    async fn ask(request: &[u8]) -> String {
        let render: Render = Arc::new(super::super::Pages {
            metrics: Box::new(|| Some("cluster_calls_total 1\n".to_owned())),
            dashboard: Box::new(|| Some("<!doctype html><p>hi</p>".to_owned())),
        });
        let (mut client, server) = tokio::io::duplex(64 << 10);
        let serving = tokio::spawn(async move {
            exchange(server, &render, Ok(()), false, &AtomicBool::new(false)).await
        });
        client.write_all(request).await.unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).await.unwrap();
        serving.await.unwrap().unwrap();
        answer
    }

    #[tokio::test]
    async fn get_metrics_is_answered_with_the_text_and_anything_else_is_refused() {
        let ok = ask(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("version=0.0.4"), "{ok}");
        assert!(ok.ends_with("\r\n\r\ncluster_calls_total 1\n"), "{ok}");
        let query = ask(b"GET /metrics?x=1 HTTP/1.1\r\n\r\n").await;
        assert!(query.starts_with("HTTP/1.1 200"), "{query}");
        let head = ask(b"HEAD /metrics HTTP/1.1\r\n\r\n").await;
        assert!(
            head.starts_with("HTTP/1.1 200") && head.ends_with("\r\n\r\n"),
            "{head}"
        );
        let other = ask(b"GET /admin HTTP/1.1\r\n\r\n").await;
        assert!(other.starts_with("HTTP/1.1 404"), "{other}");
        let dashboard = ask(b"GET / HTTP/1.1\r\n\r\n").await;
        assert!(dashboard.starts_with("HTTP/1.1 200"), "{dashboard}");
        assert!(dashboard.contains("Content-Type: text/html"), "{dashboard}");
        assert!(
            dashboard.contains("Content-Security-Policy: default-src 'none';"),
            "{dashboard}"
        );
        assert!(dashboard.ends_with("<p>hi</p>"), "{dashboard}");
        let post = ask(b"POST /metrics HTTP/1.1\r\n\r\n").await;
        assert!(
            post.starts_with("HTTP/1.1 405") && post.contains("Allow: GET"),
            "{post}"
        );
        let garbage = ask(b"\x16\x03\x01 hello\r\n\r\n").await;
        assert!(garbage.starts_with("HTTP/1.1 400"), "{garbage}");
    }

    #[tokio::test]
    async fn a_head_past_the_bound_is_refused_without_reading_on() {
        let mut request = b"GET /metrics HTTP/1.1\r\n".to_vec();
        request.extend(std::iter::repeat_n(b'a', MAX_HEAD + 10));
        let answer = ask(&request).await;
        assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    }
}
