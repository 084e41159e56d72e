//! The `cluster-discovery` binary with a log nobody reads: its stdout and stderr are pipes that
//! fill (64 KiB) and are never read again. Thousands of warnings and debug lines later it still
//! answers at once, and a warning a client repeats was written once.

use std::io::{BufRead as _, BufReader, Read as _};
use std::process::{Command, Stdio};

use crate::Server;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_nobody_reads_never_stops_the_server_and_repeated_warnings_are_written_once() {
    let mut server = Server(
        Command::new(env!("CARGO_BIN_EXE_cluster-discovery"))
            .args([
                "serve",
                "--port",
                "0",
                "--open",
                "--no-warm-up",
                "--log-buffer-lines",
                "64",
            ])
            .env("RUST_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary starts"),
    );
    let stdout = server.0.stdout.take().unwrap();
    let stderr = server.0.stderr.take().unwrap();
    // The first line, then never again: the reader is kept open (a closed pipe would fail the
    // writes instead of filling up).
    let (url, _unread_stdout) = tokio::task::spawn_blocking(move || {
        let mut stdout = BufReader::new(stdout);
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        (
            line.trim().strip_prefix("listening on ").map(str::to_owned),
            stdout,
        )
    })
    .await
    .unwrap();
    let url = url.expect("`listening on URL` first");

    // 2,000 bad registrations (a warning each, unthrottled), then 2,000 good ones (a debug
    // line each): over 200 KB of log into a 64 KiB pipe. Eight at a time, each with 5 s to
    // answer: a server blocked on its log would not.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    for body in ["{not json", &crate::support::js_body("orders", "o-1", 8080)] {
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (http, url, body) = (http.clone(), url.clone(), body.to_owned());
                tokio::spawn(async move {
                    for _ in 0..250 {
                        http.post(format!("{url}apps/ORDERS"))
                            .header("content-type", "application/json")
                            .body(body.clone())
                            .send()
                            .await
                            .expect("answered while its log is not read");
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    }
    let started = std::time::Instant::now();
    let read = reqwest::Client::new()
        .get(format!("{url}apps/"))
        .timeout(Duration::from_secs(1))
        .send()
        .await
        .expect("a normal read within 1 s");
    assert_eq!(read.status(), reqwest::StatusCode::OK);
    assert!(started.elapsed() < Duration::from_secs(1));

    // What reached the pipe: its first 64 KiB, which the 2,000 bad requests came first into.
    drop(server);
    let log = tokio::task::spawn_blocking(move || {
        let mut log = String::new();
        BufReader::new(stderr).read_to_string(&mut log).unwrap();
        log
    })
    .await
    .unwrap();
    let warned = log.matches("registration in ORDERS refused").count();
    assert_eq!(warned, 1, "a warning a client repeats is throttled:\n{log}");
    assert!(log.contains("source=127.0.0.1"), "{log}");
    assert!(
        log.contains("registered o-1 of ORDERS"),
        "the debug lines after it: {log}"
    );
}
