//! One HTTP/1.1 exchange, by hand: read the request head (bounded), answer, close.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{MAX_HEAD, Render};

/// The content type of Prometheus's text format.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The dashboard's content type.
const HTML: &str = "text/html; charset=utf-8";

/// What a browser may do with the dashboard: show it and its inline style, run nothing, load
/// nothing, be framed by nobody. The names on it come from any member of the cluster.
const HTML_HEADERS: &str = "Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'\r\n\
X-Content-Type-Options: nosniff\r\nX-Frame-Options: DENY\r\nReferrer-Policy: no-referrer\r\nCache-Control: no-store\r\n";

/// Reads one request from `stream` and answers it; `member` says whether the caller's
/// certificate names a member of the cluster (always `Ok` in plaintext).
pub(super) async fn exchange<S>(
    mut stream: S,
    render: &Render,
    member: Result<(), String>,
) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let answer = match read_head(&mut stream).await? {
        Head::Complete(head) => match member {
            Ok(()) => answer(&head, render),
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
fn answer(head: &[u8], render: &Render) -> Vec<u8> {
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
    let path = target.split('?').next().unwrap_or_default();
    let (page, content_type) = match path {
        "/metrics" => ((render.metrics)(), TEXT_FORMAT),
        "/" => ((render.dashboard)(), HTML),
        _ => {
            return plain(
                404,
                "Not Found",
                "this endpoint serves / (the dashboard) and /metrics\n",
            );
        }
    };
    if method != "GET" && method != "HEAD" {
        return plain(405, "Method Not Allowed", &format!("GET {path}\n"));
    }
    let Some(text) = page else {
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
        let serving = tokio::spawn(async move { exchange(server, &render, Ok(())).await });
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
