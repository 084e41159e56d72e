//! The `cluster-discovery` binary's command line: `--help` names every option; a misuse exits 2
//! and says what was wrong; `serve` without credentials refuses unless `--open` says so; a
//! command line with options of each kind still starts a server that does as they say; SIGTERM
//! stops it as ctrl-c does, after the request in flight.

use std::io::{BufRead as _, BufReader, Read as _};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::Server;

/// What `cluster-discovery ARGS` did: its exit code, stdout and stderr. A command that is still
/// running after 10 s (a server that started where it should have refused) is killed and the
/// test fails, rather than hangs.
fn discovery(args: &[&str]) -> (Option<i32>, String, String) {
    let mut child = Server(
        Command::new(env!("CARGO_BIN_EXE_cluster-discovery"))
            .args(args)
            .env_remove("DISCOVERY_PASSWORD")
            .env_remove("DISCOVERY_PEER_PASSWORD")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let read = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = pipe.read_to_end(&mut text);
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let out = read(Box::new(child.0.stdout.take().unwrap()));
    let err = read(Box::new(child.0.stderr.take().unwrap()));
    let give_up = Instant::now() + Duration::from_secs(10);
    let code = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status.code();
        }
        assert!(
            Instant::now() < give_up,
            "{args:?} still running after 10 s (it should have exited)"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    (code, out.join().unwrap(), err.join().unwrap())
}

/// Asserts that `serve ARGS` is a misuse: exit code 2, nothing on stdout (no server started),
/// and a message on stderr that names each of `named`.
fn misuse(args: &[&str], named: &[&str]) {
    let (code, out, err) = discovery(&[&["serve"], args].concat());
    assert_eq!(code, Some(2), "{args:?}: {err}");
    assert_eq!(out, "", "{args:?}");
    for word in named {
        assert!(err.contains(word), "{args:?} should name {word}: {err}");
    }
}

/// Every option of `serve`, and the environment variables it reads.
const OPTIONS: [&str; 40] = [
    "--port",
    "--bind",
    "--peer",
    "--own-url",
    "--dashboard-token",
    "--open-dashboard",
    "--no-dashboard",
    "--lease-duration",
    "--renewal-interval",
    "--no-self-preservation",
    "--no-warm-up",
    "--warm-up",
    "--user",
    "--password-file",
    "--peer-user",
    "--peer-password-file",
    "--protect-reads",
    "--open",
    "--tls-cert",
    "--tls-key",
    "--tls-ca",
    "--max-body-bytes",
    "--max-batch-items",
    "--max-apps",
    "--max-instances-per-app",
    "--max-instances",
    "--max-metadata-entries",
    "--max-instance-bytes",
    "--max-lease",
    "--max-clock-skew",
    "--max-connections",
    "--header-read-timeout",
    "--request-timeout",
    "--write-timeout",
    "--max-peer-queue",
    "--warning-interval",
    "--log-buffer-lines",
    "DISCOVERY_DASHBOARD_TOKEN",
    "DISCOVERY_PASSWORD",
    "DISCOVERY_PEER_PASSWORD",
];

#[test]
fn help_exits_0_and_names_every_option_and_its_default() {
    for args in [&["--help"][..], &["-h"], &["serve", "--help"]] {
        let (code, out, err) = discovery(args);
        assert_eq!(code, Some(0), "{err}");
        for word in OPTIONS {
            assert!(out.contains(word), "{args:?} should name {word}:\n{out}");
        }
        // `--open` is also the start of `--open-dashboard`: its own line.
        assert!(
            out.lines().any(|l| l.trim_start().starts_with("--open ")),
            "{args:?} should name --open:\n{out}"
        );
        // The defaults are the server's own (Limits::default(), ServerConfig::default()).
        for default in ["[default: 8761]", "[default: 90]", "[default: 1048576]"] {
            assert!(out.contains(default), "{args:?}: {default}:\n{out}");
        }
    }
}

#[test]
fn a_misuse_exits_2_and_names_the_problem() {
    let (code, _, err) = discovery(&[]);
    assert_eq!(code, Some(2), "{err}");
    let (code, _, err) = discovery(&["run"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("'run'"), "{err}");

    misuse(&["--bogus"], &["--bogus"]);
    misuse(&["--port"], &["--port", "value"]);
    misuse(&["--port", "65536"], &["--port", "65536"]);
    misuse(&["--bind", "nope"], &["--bind", "nope"]);
    misuse(&["--bind", "127.0.0.1:8761"], &["--bind", "127.0.0.1:8761"]);
    misuse(&["--max-apps", "0"], &["--max-apps", "positive integer"]);
    misuse(&["--max-lease", "31536001"], &["--max-lease", "31536000"]);
    misuse(
        &["--max-lease", "60"],
        &["--lease-duration 90", "--max-lease 60"],
    );
    misuse(&["--warm-up", "0"], &["--warm-up", "31536000"]);
    misuse(
        &["--warm-up", "600", "--max-lease", "300"],
        &["--warm-up 600", "--max-lease 300"],
    );
    // Passwords go in files or the environment, never where `ps` shows them.
    misuse(&["--password", "secret"], &["--password", "ps"]);
    misuse(&["--peer-password"], &["--peer-password-file"]);
    misuse(&["--password-file", "pw"], &["--user"]);
    misuse(&["--user", "a:b"], &["--user", "a:b"]);
    misuse(&["--user", "app"], &["--user app", "DISCOVERY_PASSWORD"]);
    misuse(&["--protect-reads"], &["--protect-reads", "--user"]);
    misuse(&["--tls-cert", "server.pem"], &["--tls-key"]);
    // Open is said by name, and then no credential goes with it.
    misuse(&["--open", "--user", "app"], &["--open", "--user"]);
    misuse(
        &["--peer-user", "peer", "--open"],
        &["--open", "--peer-user"],
    );
    misuse(
        &["--open", "--protect-reads"],
        &["--open", "--protect-reads"],
    );
}

#[test]
fn serve_without_credentials_or_open_refuses_at_once_and_says_what_to_pass() {
    for args in [
        &["--port", "0"][..],
        &["--port", "0", "--no-warm-up", "--open-dashboard"],
    ] {
        let started = Instant::now();
        misuse(
            args,
            &[
                "--user",
                "--password-file",
                "DISCOVERY_PASSWORD",
                "--peer-user",
                "--peer-password-file",
                "DISCOVERY_PEER_PASSWORD",
                "--open",
                "authenticating proxy",
            ],
        );
        assert!(started.elapsed() < Duration::from_secs(5), "{args:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_serves_without_credentials_and_warns_that_anyone_may_write() {
    let mut server = Server(
        Command::new(env!("CARGO_BIN_EXE_cluster-discovery"))
            .args(["serve", "--port", "0", "--open", "--no-warm-up"])
            .env_remove("DISCOVERY_PASSWORD")
            .env_remove("DISCOVERY_PEER_PASSWORD")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary starts"),
    );
    let url = listening(&mut server).await;
    let registered = reqwest::Client::new()
        .post(format!("{url}apps/ORDERS"))
        .header("content-type", "application/json")
        .body(crate::support::js_body("orders", "o-1", 8080))
        .send()
        .await
        .unwrap();
    assert_eq!(
        registered.status(),
        204,
        "open: a write needs no credentials"
    );
    // SIGTERM, so that it exits 0 with its log flushed; then its stderr is whole.
    let mut stderr = server.0.stderr.take().unwrap();
    let term = Command::new("kill")
        .args(["-TERM", &server.0.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let log = tokio::task::spawn_blocking(move || {
        let mut log = String::new();
        stderr.read_to_string(&mut log).unwrap();
        log
    })
    .await
    .unwrap();
    assert!(
        log.contains("WARN") && log.contains("no credentials configured: anyone who reaches"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_line_of_every_kind_starts_a_server_that_does_as_it_says() {
    let password = std::env::temp_dir().join(format!("discovery-cli-{}.pw", std::process::id()));
    std::fs::write(&password, "app-pw\n").unwrap();
    let password_file = password.to_str().unwrap();
    let (_server, url) = serve(&[
        "--port",
        "8761",
        "--port",
        "0",
        "--bind",
        "127.0.0.1",
        "--peer",
        "http://127.0.0.1:9/eureka/",
        "--own-url",
        "http://127.0.0.1:9/eureka/",
        "--user",
        "app",
        "--password-file",
        password_file,
        "--lease-duration",
        "60",
        "--max-lease",
        "3600",
        "--max-body-bytes",
        "512",
        "--no-warm-up",
        // The last of the dashboard options wins.
        "--dashboard-token",
        "t",
        "--no-dashboard",
        "--open-dashboard",
    ])
    .await;
    let _ = std::fs::remove_file(&password);

    let http = reqwest::Client::new();
    let dashboard = url.trim_end_matches("eureka/").to_owned() + "discovery";
    let status = |r: reqwest::Response| r.status().as_u16();
    assert_eq!(status(http.get(&dashboard).send().await.unwrap()), 200);
    // --no-warm-up: a read is answered at once.
    assert_eq!(
        status(http.get(format!("{url}apps/")).send().await.unwrap()),
        200
    );
    // --user: a write needs its credential; --max-body-bytes: a body past 512 bytes is 413.
    let register = |body: String| {
        http.post(format!("{url}apps/ORDERS"))
            .header("content-type", "application/json")
            .body(body)
    };
    let body = crate::support::js_body("orders", "o-1", 8080);
    assert!(body.len() < 512, "{}", body.len());
    assert_eq!(status(register(body.clone()).send().await.unwrap()), 401);
    let authorized = register(body).basic_auth("app", Some("app-pw"));
    assert_eq!(status(authorized.send().await.unwrap()), 204);
    let large = format!("{:<600}", crate::support::js_body("orders", "o-2", 8080));
    let refused = register(large).basic_auth("app", Some("app-pw"));
    assert_eq!(status(refused.send().await.unwrap()), 413);
}

/// `serve ARGS` started; its URL, from the `listening on URL` line it prints first.
async fn serve(args: &[&str]) -> (Server, String) {
    let mut server = Server(
        Command::new(env!("CARGO_BIN_EXE_cluster-discovery"))
            .args(["serve", "--port", "0"])
            .args(args)
            .env("RUST_LOG", "off")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the binary starts"),
    );
    let url = listening(&mut server).await;
    (server, url)
}

/// The URL of a started `serve`, from the `listening on URL` line it prints first.
async fn listening(server: &mut Server) -> String {
    let stdout = server.0.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    line.trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("`listening on URL` first: {line}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_up_sets_the_window_and_no_warm_up_switches_it_off() {
    let http = reqwest::Client::new();
    let (_server, url) = serve(&["--open", "--warm-up", "1"]).await;
    let registered = http
        .post(format!("{url}apps/ORDERS"))
        .header("content-type", "application/json")
        .body(crate::support::js_body("orders", "o-1", 8080))
        .send()
        .await
        .unwrap();
    assert_eq!(registered.status(), 204, "writes go through the warm-up");
    let read = http.get(format!("{url}apps/ORDERS")).send().await.unwrap();
    assert_eq!(read.status(), 503, "a registration does not end it");
    assert_eq!(read.headers()["retry-after"], "1");
    crate::until("the 1 s window is over", || async {
        let read = http.get(format!("{url}apps/ORDERS")).send().await.unwrap();
        read.status() == 200
    })
    .await;

    // The last of the two wins.
    for (args, status) in [
        (&["--open", "--warm-up", "60", "--no-warm-up"][..], 200),
        (&["--open", "--no-warm-up", "--warm-up", "60"], 503),
    ] {
        let (_server, url) = serve(args).await;
        let read = http.get(format!("{url}apps/")).send().await.unwrap();
        assert_eq!(read.status(), status, "{args:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_serve_after_the_request_in_flight_and_exits_0() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let (mut server, url) = serve(&["--open"]).await;
    let addr = url
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix("/eureka/"))
        .unwrap()
        .to_owned();
    // A registration in flight: its head and half its body sent, the rest held back.
    let body = crate::support::js_body("orders", "o-1", 8080);
    let (first, rest) = body.split_at(body.len() / 2);
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    // `Expect: 100-continue`: the server's `100 Continue` says it accepted the connection and
    // is reading this request's body. Without it, SIGTERM could come while the connection
    // still waited in the listen queue, and a server that never accepted it rightly exits.
    let head = format!(
        "POST /eureka/apps/ORDERS HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nexpect: 100-continue\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut go_on = Vec::new();
    while !go_on.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        assert_eq!(tcp.read(&mut byte).await.unwrap(), 1, "closed before 100");
        go_on.push(byte[0]);
    }
    assert!(go_on.starts_with(b"HTTP/1.1 100"), "{go_on:?}");
    tcp.write_all(first.as_bytes()).await.unwrap();
    tcp.flush().await.unwrap();

    let term = Command::new("kill")
        .args(["-TERM", &server.0.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    // It stops accepting, and waits for the registration to finish.
    crate::until("new connections are refused", || async {
        tokio::net::TcpStream::connect(&addr).await.is_err()
    })
    .await;
    assert!(
        server.0.try_wait().unwrap().is_none(),
        "exited with a request in flight"
    );
    tcp.write_all(rest.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 204"), "{answer}");

    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let status = loop {
        if let Some(status) = server.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "no exit within 10 s of its last request"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    assert_eq!(
        status.code(),
        Some(0),
        "a graceful stop, not death by signal"
    );
}
