//! Heartbeats: how a caller finds a connection dead while its calls wait, without waiting for
//! each call's timeout.
//!
//! 1. Both sides offer the `heartbeat` feature in the handshake (`wire/handshake.rs`); only a
//!    connection whose welcome agreed it has heartbeats, so a peer of an earlier build is
//!    never sent a frame it would not read.
//! 2. The provider (`frames.rs`) writes an empty frame, four zero bytes, whenever it holds
//!    work for the connection (requests running, or a frame waiting for its bytes) and has
//!    written nothing to it for [`EVERY`]. It is written by the provider's writer, not its
//!    reader: a provider that has stopped reading a caller's requests (its limits reached)
//!    still says it is there.
//! 3. The caller (`calling.rs`) counts any byte it reads as a word from the provider. With
//!    requests sent and waiting, [`SILENCE`] without one ends the connection: its calls fail
//!    as lost (or as not sent, those none of whose bytes left), the pool drops it, and the
//!    call path tries another provider where that is safe.
//!
//! A dead host is found by TCP keepalive too (`crate::net::keep_alive`), but only on the
//! connection's own hop: a heartbeat crosses proxies, and also finds a provider process that
//! is alive but no longer serves the connection.

use std::time::Duration;

/// The feature's name in the handshake.
pub(crate) const FEATURE: &str = "heartbeat";

/// How long a provider holding work for a connection stays silent on it at most.
pub(crate) const EVERY: Duration = Duration::from_secs(2);

/// How long a caller with requests waiting waits for any byte before it takes the provider for
/// gone: four heartbeats missed, so a provider busy on both cores for a moment is not cut off.
pub(crate) const SILENCE: Duration = Duration::from_secs(8);

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::pin::Pin;
    use std::sync::atomic::AtomicU32;
    use std::sync::{Arc, OnceLock};
    use std::task::Poll;

    use tokio::io::{AsyncReadExt, DuplexStream};
    use tokio::task::{AbortHandle, JoinHandle};
    use tokio::time::Instant;

    use super::*;
    use crate::rate_limited::RateLimited;
    use crate::transport::tcp::budget::{Account, Budget, ConnectionLimits};
    use crate::transport::tcp::caller_frames::CallerFrames;
    use crate::transport::tcp::calling::{Calls, Ended};
    use crate::transport::tcp::frames::{FrameLimits, Frames};
    use crate::transport::wire::v2::{ReplyFrame, RequestFrame};
    use crate::transport::{Head, Reply, Request};

    /// A caller listening for heartbeats on `io`.
    fn caller(io: DuplexStream) -> Calls<RequestFrame> {
        let frames = CallerFrames::new(io, 1 << 20, Duration::from_secs(10));
        let (calls, dispatch) = Calls::new(frames);
        tokio::spawn(dispatch.listening_for_heartbeats(SILENCE));
        calls
    }

    /// A provider on `io` whose handler answers after `takes`, with heartbeats if `beating`.
    fn provider(io: DuplexStream, beating: bool, takes: Duration) -> JoinHandle<()> {
        serving(io, beating, move |_, _: RequestFrame| async move {
            tokio::time::sleep(takes).await;
            ReplyFrame(Reply::Done(vec![7].into()))
        })
    }

    /// A provider on `io` whose requests `handler` answers, with heartbeats if `beating`.
    fn serving<F, Fut>(io: DuplexStream, beating: bool, handler: F) -> JoinHandle<()>
    where
        F: Fn(Instant, RequestFrame) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ReplyFrame> + Send + 'static,
    {
        let account = Account::new(
            Budget::new(1 << 20),
            &super::super::established::Peer::test(1),
            ConnectionLimits {
                max_in_flight: 8,
                per_connection: 1 << 20,
            },
        );
        let serving: Arc<OnceLock<AbortHandle>> = Arc::default();
        let mut frames = Frames::new(
            io,
            SocketAddr::from(([127, 0, 0, 1], 1)),
            account,
            FrameLimits {
                max_frame: 1 << 20,
                frame_timeout: Duration::from_secs(10),
                idle_timeout: Duration::from_secs(300),
            },
            Arc::new(RateLimited::default()),
            serving.clone(),
            &[],
        );
        if beating {
            frames = frames.beating();
        }
        let guarded = super::super::channel::guard(frames, serving.clone());
        let task = crate::background::spawn(super::super::answering::serve(guarded, handler));
        serving.set(task.abort_handle()).unwrap();
        task
    }

    fn call(
        calls: &Calls<RequestFrame>,
        within: Duration,
    ) -> impl Future<Output = Result<Reply, Ended>> + '_ {
        call_with(calls, within, vec![1; 16])
    }

    fn call_with(
        calls: &Calls<RequestFrame>,
        within: Duration,
        args: Vec<u8>,
    ) -> impl Future<Output = Result<Reply, Ended>> + '_ {
        let request = RequestFrame(Arc::new(Request {
            service: "svc".into(),
            function: "f".into(),
            signature: 0,
            args: args.into(),
            head: Head::default(),
            attempt: AtomicU32::new(1),
        }));
        calls.call(request, Instant::now() + within)
    }

    #[tokio::test(start_paused = true)]
    async fn a_handler_that_panics_where_it_is_read_ends_its_request_alone() {
        // (Here, beside the loop's other tests over an in-memory pipe.) A request runs on the
        // provider's loop until it first waits (`answering.rs`): a panic that escaped the
        // dispatcher there would take the connection and every request on it, were it not
        // caught.
        let (a, b) = tokio::io::duplex(1 << 16);
        let calls = caller(a);
        let _provider = serving(b, true, |_, request: RequestFrame| {
            let boom = request.0.args.first() == Some(&0);
            async move {
                assert!(!boom, "a handler that panics where it is read");
                ReplyFrame(Reply::Done(vec![7].into()))
            }
        });
        let within = Duration::from_secs(1);
        let (lost, answered) = tokio::join!(
            call_with(&calls, within, vec![0]),
            call_with(&calls, within, vec![1])
        );
        assert_eq!(answered.unwrap(), Reply::Done(vec![7].into()));
        assert!(matches!(lost, Err(Ended::Timeout)), "{lost:?}");
        // The connection serves on.
        assert_eq!(
            call(&calls, within).await.unwrap(),
            Reply::Done(vec![7].into())
        );
    }

    /// A handler the dispatcher did not wrap (a2a5911's slot): by `mode`, 0 panics at its first
    /// poll and its drop panics too; 1 answers at its first poll and its drop panics; 2 answers
    /// after a wait and its drop panics (in its task); 3 never answers and its drop panics when
    /// its deadline stops it; 4 answers at once; 5 after a wait.
    struct Hostile {
        mode: u8,
        sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    }

    impl Future for Hostile {
        type Output = ReplyFrame;
        fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<ReplyFrame> {
            match self.mode {
                0 => panic!("a handler that panics at its first poll"),
                1 | 4 => {}
                3 => return Poll::Pending,
                _ => {
                    let sleep = self.sleep.get_or_insert_with(|| {
                        Box::pin(tokio::time::sleep(Duration::from_millis(100)))
                    });
                    if sleep.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                }
            }
            Poll::Ready(ReplyFrame(Reply::Done(vec![self.mode; 100].into())))
        }
    }

    impl Drop for Hostile {
        fn drop(&mut self) {
            if self.mode < 4 && !std::thread::panicking() {
                panic!("a handler's drop panics (mode {})", self.mode);
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn handlers_whose_poll_or_drop_panics_end_alone_and_the_slot_serves_on() {
        let (a, b) = tokio::io::duplex(1 << 16);
        let calls = caller(a);
        let _provider = serving(b, true, |_, request: RequestFrame| Hostile {
            mode: request.0.args[0],
            sleep: None,
        });
        let within = Duration::from_secs(1);
        for round in 0..20u8 {
            // Orders vary, so that a slot left by each kind is met by each other kind.
            let mut modes = [0u8, 1, 2, 3, 4, 5];
            modes.rotate_left(usize::from(round % 6));
            if round % 2 == 1 {
                modes.reverse();
            }
            let ended = futures::future::join_all(
                modes.iter().map(|&m| call_with(&calls, within, vec![m])),
            )
            .await;
            for (mode, ended) in modes.iter().zip(ended) {
                match mode {
                    4 | 5 => assert_eq!(
                        ended.unwrap_or_else(|e| panic!(
                            "round {round} {modes:?}, mode {mode}: {e:?}"
                        )),
                        Reply::Done(vec![*mode; 100].into()),
                        "round {round}"
                    ),
                    _ => assert!(
                        matches!(ended, Err(Ended::Timeout)),
                        "round {round}, mode {mode}: {ended:?}"
                    ),
                }
            }
        }
        assert_eq!(
            call_with(&calls, within, vec![4]).await.unwrap(),
            Reply::Done(vec![4; 100].into())
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_longer_than_the_silence_limit_lives_on_heartbeats() {
        let (a, b) = tokio::io::duplex(1 << 16);
        let calls = caller(a);
        let _provider = provider(b, true, 10 * SILENCE);
        let start = Instant::now();
        let reply = call(&calls, 60 * SILENCE).await;
        assert_eq!(reply.unwrap(), Reply::Done(vec![7].into()));
        assert_eq!(start.elapsed(), 10 * SILENCE);
    }

    #[tokio::test(start_paused = true)]
    async fn a_provider_silent_past_the_limit_is_taken_for_gone_long_before_the_deadline() {
        // A provider without heartbeats stands for one whose host or process is gone.
        let (a, b) = tokio::io::duplex(1 << 16);
        let calls = caller(a);
        let _provider = provider(b, false, 10 * SILENCE);
        let start = Instant::now();
        let ended = call(&calls, 60 * SILENCE).await;
        assert!(matches!(ended, Err(Ended::Lost(_))), "{ended:?}");
        let took = start.elapsed();
        assert!(took >= SILENCE && took < SILENCE + EVERY, "{took:?}");
        // The connection is over: a call after it is not sent.
        let after = call(&calls, SILENCE).await;
        assert!(matches!(after, Err(Ended::NotSent(_))), "{after:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_sends_and_expects_nothing() {
        let (a, mut b) = tokio::io::duplex(1 << 16);
        let calls = caller(a);
        tokio::time::sleep(10 * SILENCE).await;
        // Nothing was written, and the connection still serves a call.
        let mut byte = [0u8; 1];
        let nothing = tokio::time::timeout(Duration::from_millis(1), b.read(&mut byte)).await;
        assert!(nothing.is_err(), "the caller wrote while idle");
        let _provider = provider(b, true, Duration::ZERO);
        assert_eq!(
            call(&calls, SILENCE).await.unwrap(),
            Reply::Done(vec![7].into())
        );
    }
}
