//! How the example binaries log: [`log_filter`]'s directives, written to stderr by a thread of
//! their own through a bounded queue that drops what it cannot hold ([`init_logs`]).
//!
//! A node must never wait on its logs. `tracing_subscriber::fmt()` alone writes each line
//! synchronously from the thread that logs it: a node whose stdout or stderr is a pipe nobody
//! reads (a supervisor that stopped reading, a full terminal) blocks every runtime worker on a
//! full pipe and stops serving. Here a line that finds the queue full is dropped and counted,
//! and the count is said when lines get through again and when the process ends.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tracing_appender::non_blocking::{ErrorCounter, NonBlocking, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

/// Log lines queued for the writer thread at most: about 1 MiB of ordinary lines. Past it lines
/// are dropped, not waited for.
pub const BUFFERED_LOG_LINES: usize = 4096;

/// How often [`Logs::report_every`]'s task says how many lines were dropped, if any were.
pub const DROPPED_REPORT_PERIOD: Duration = Duration::from_secs(10);

/// `RUST_LOG`'s directives, ERROR when it is unset.
pub fn log_filter() -> EnvFilter {
    filter_for(&std::env::var("RUST_LOG").unwrap_or_default())
}

fn filter_for(rust_log: &str) -> EnvFilter {
    EnvFilter::builder()
        .with_default_directive(LevelFilter::ERROR.into())
        .parse_lossy(rust_log)
}

/// The process's logging, installed by [`init_logs`]: keep it for the life of the process.
/// Dropping it says how many lines were dropped, if any, and flushes the queue (waiting a
/// second at most for each: a stderr nobody reads cannot hold the exit either).
#[must_use = "dropping the guard stops the log writer"]
pub struct Logs {
    dropped: Dropped,
    // Declared last: dropped after the final count is queued, so that it is flushed too.
    _guard: WorkerGuard,
}

/// The lines dropped so far, and how many of them have been said.
#[derive(Clone)]
struct Dropped {
    writer: NonBlocking,
    counter: ErrorCounter,
    said: Arc<AtomicUsize>,
}

impl Dropped {
    /// Queues a line with the count if it grew since last said. Through the same lossy queue,
    /// so that saying it never blocks either; a line that is dropped too is said by the next.
    /// False when the line was dropped.
    fn say(&self, when: &str) -> bool {
        let dropped = self.counter.dropped_lines();
        let said = self.said.load(Ordering::Relaxed);
        if dropped == said {
            return true;
        }
        let line = format!(
            "logs: {} log lines dropped {when} ({dropped} in all): the log output was not read fast enough\n",
            dropped - said
        );
        let mut writer = self.writer.clone();
        let queued = writer.write_all(line.as_bytes()).is_ok();
        // A queue still full drops the report as well (and counts it): said next time.
        if queued && self.counter.dropped_lines() == dropped {
            self.said.store(dropped, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// At exit there is no next report: a queue still full (its writer just moving again) is
    /// given up to [`EXIT_WAIT`] to take the count, tried every millisecond.
    fn say_before_exit(&self) {
        let give_up = std::time::Instant::now() + EXIT_WAIT;
        while !self.say("before exit") && std::time::Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// How long the exit waits for room in the queue for the count of dropped lines: as long as
/// the queue's own flush at exit waits, so a stderr nobody reads holds the exit 2 s at most.
const EXIT_WAIT: Duration = Duration::from_secs(1);

impl Logs {
    /// Log lines dropped so far because the queue was full.
    pub fn dropped_lines(&self) -> usize {
        self.dropped.counter.dropped_lines()
    }

    /// Says every `period`, on the current tokio runtime, how many lines were dropped since
    /// it last said, if any were.
    pub fn report_every(&self, period: Duration) {
        let dropped = self.dropped.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(period);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                let _said_or_next_time = dropped.say(&format!("in the last {period:?}"));
            }
        });
    }
}

impl Drop for Logs {
    fn drop(&mut self) {
        self.dropped.say_before_exit();
    }
}

/// A writer of lines to `out` on a thread of its own, through a queue of `lines` lines that
/// drops what does not fit.
fn lossy<W: Write + Send + 'static>(out: W, lines: usize) -> (NonBlocking, WorkerGuard) {
    NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(lines)
        .thread_name("logs")
        .finish(out)
}

fn logs_to<W: Write + Send + 'static>(out: W, lines: usize) -> (Logs, NonBlocking) {
    let (writer, guard) = lossy(out, lines);
    let dropped = Dropped {
        counter: writer.error_counter(),
        writer: writer.clone(),
        said: Arc::default(),
    };
    let logs = Logs {
        dropped,
        _guard: guard,
    };
    (logs, writer)
}

/// Installs the process's logging: [`log_filter`]'s lines to stderr, never blocking the thread
/// that logs ([`BUFFERED_LOG_LINES`] queued at most, the rest dropped and counted).
///
/// A span the filter lets through is written when it closes, with its fields and its time: so
/// `RUST_LOG=info,cluster::trace=debug` shows each call, attempt and handler with its trace id
/// and how long it took, and a trace can be followed across nodes' logs by its id.
pub fn init_logs() -> Logs {
    let (logs, writer) = logs_to(std::io::stderr(), BUFFERED_LOG_LINES);
    tracing_subscriber::fmt()
        .with_env_filter(log_filter())
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(writer)
        .init();
    logs
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::mpsc;
    use std::time::Instant;

    use super::*;

    /// A writer that hands every line to a channel.
    struct Lines(mpsc::Sender<String>);

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let _ = self.0.send(String::from_utf8_lossy(buf).into_owned());
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn errors_only_unless_rust_log_says_more() {
        let (tx, rx) = mpsc::channel();
        let (logs, writer) = logs_to(Lines(tx), 64);
        for rust_log in ["", "warn", "error,cluster=debug"] {
            let subscriber = tracing_subscriber::fmt()
                .with_env_filter(filter_for(rust_log))
                .with_writer(writer.clone())
                .finish();
            tracing::subscriber::with_default(subscriber, || {
                tracing::error!(target: "cluster", "an error at {rust_log:?}");
                tracing::warn!(target: "cluster", "a warning at {rust_log:?}");
                tracing::debug!(target: "cluster", "a debug line at {rust_log:?}");
                tracing::warn!(target: "elsewhere", "another module's warning at {rust_log:?}");
            });
        }
        drop(logs);
        let written: Vec<String> = rx.try_iter().collect();
        let said = |line: &str| written.iter().any(|written| written.contains(line));
        // Unset: errors only.
        assert!(said(r#"an error at """#), "{written:?}");
        assert!(!said(r#"a warning at """#), "{written:?}");
        // A level: that level for every module.
        assert!(said(r#"a warning at "warn""#), "{written:?}");
        assert!(said(r#"another module's warning at "warn""#), "{written:?}");
        assert!(!said(r#"a debug line at "warn""#), "{written:?}");
        // A module's directive: that module only.
        assert!(
            said(r#"a debug line at "error,cluster=debug""#),
            "{written:?}"
        );
        assert!(
            !said(r#"another module's warning at "error,cluster=debug""#),
            "{written:?}"
        );
        assert_eq!(written.len(), 1 + 3 + 3, "{written:?}");
    }

    /// A writer blocked as a pipe nobody reads is, until `open`; then it hands lines on.
    #[derive(Clone, Default)]
    struct Gate(Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>);

    impl Gate {
        fn open(&self) {
            *self.0.0.lock().unwrap() = true;
            self.0.1.notify_all();
        }
    }

    struct Gated(Gate, mpsc::Sender<String>);

    impl Write for Gated {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let (open, opened) = &*self.0.0;
            let _open = opened
                .wait_while(open.lock().unwrap(), |open| !*open)
                .unwrap();
            let _ = self.1.send(String::from_utf8_lossy(buf).into_owned());
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_stuck_output_drops_and_counts_lines_and_the_count_is_said_at_exit() {
        let (gate, (tx, rx)) = (Gate::default(), mpsc::channel());
        let (logs, writer) = logs_to(Gated(gate.clone(), tx), 16);
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(writer)
            .finish();
        let start = Instant::now();
        tracing::subscriber::with_default(subscriber, || {
            for n in 0..10_000 {
                tracing::error!("line {n}");
            }
        });
        let took = start.elapsed();
        assert!(
            took < Duration::from_secs(2),
            "10,000 lines to a stuck output took {took:?}"
        );
        let dropped = logs.dropped_lines();
        assert!(
            (10_000 - 16 - 1..10_000).contains(&dropped),
            "{dropped} dropped: all but the queue's 16 and the line being written"
        );
        gate.open();
        drop(logs);
        let written: Vec<String> = rx.try_iter().collect();
        let last = written.last().expect("lines written once the output moved");
        // Tries of the report that found the queue still full are dropped lines too.
        let said: usize = last
            .strip_prefix("logs: ")
            .and_then(|rest| rest.split(' ').next())
            .and_then(|count| count.parse().ok())
            .unwrap_or_else(|| panic!("no count of dropped lines last: {written:?}"));
        assert!(
            last.contains("log lines dropped before exit") && said >= dropped,
            "{dropped} dropped: {written:?}"
        );
        assert_eq!(written.len(), 10_000 - dropped + 1, "{last}");
    }

    #[test]
    fn nothing_dropped_nothing_said() {
        let (tx, rx) = mpsc::channel();
        let (logs, mut writer) = logs_to(Lines(tx), 4);
        writer.write_all(b"one line\n").unwrap();
        assert!(logs.dropped.say("now"));
        drop(logs);
        let written: Vec<String> = rx.try_iter().collect();
        assert_eq!(written, ["one line\n"]);
    }
}
