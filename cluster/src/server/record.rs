//! At-most-once calls: a provider's record of the calls of its `at_most_once` functions.
//!
//! A caller whose attempt of a non-idempotent call timed out, or whose connection broke, cannot
//! know whether the function ran. Hadoop IPC's RetryCache answers such a retry from the
//! server's record of the call instead of running it again; this is that record.
//!
//! 1. An attempt of an `at_most_once` function carries its call's id (`Head::call_id`). Before
//!    the handler runs, [`Record::begin`] looks the call up under (caller, call id): the caller
//!    is the authenticated peer, so no node can read or settle another's calls.
//! 2. Not there: it is entered as running, and the handler runs; when it ends its reply is kept
//!    ([`Running::finish`]) before it is sent. A handler stopped before it ends (its deadline,
//!    its caller's connection) leaves the call *interrupted*: it may have run.
//! 3. There: a retry is answered from the record ([`Reply::Recalled`]), waiting for a running
//!    one to end (within the retry's own deadline); an interrupted one is answered
//!    [`Reply::Interrupted`]. The function does not run a second time.
//! 4. A call is kept until its budget ends (at most [`KEEP`]) and [`GRACE`] more: a retry sent
//!    before the caller's budget ran out still finds it. The caller pins a retry to the process
//!    the call may have run on (`Head::pinned`), and does not retry past `KEEP` (`client/attempt.rs`).
//!
//! Bounds, in the bytes the record really takes (its table, its expiry lists and the replies
//! kept, each counted as allocated: [`ENTRY_BYTES`], [`kept_bytes`]): [`MAX_CALLS`] calls and
//! [`MAX_BYTES`] in all; a quarter of each for one caller; and the last eighth of each kept for
//! callers holding less than a sixty-fourth ([`RESERVE`]), so that members filling the record
//! with fresh call ids (each up to its quarter) leave room for everyone else's calls. A call
//! that finds no room is refused as `Overloaded` before it runs (so it is retried elsewhere,
//! never run twice); a reply too large for what is left is not kept, and a retry of that call
//! is told it ran and its reply is gone.
//!
//! A small reply (a deposit's receipt) is kept inside the call's entry, not in an allocation
//! of its own, and calls expire by the second from lists, not a tree of small nodes: a record
//! filled with such calls is a few large allocations, which keeps the node's resident memory
//! near what is counted (`examples/tests/abuse.rs`, rows 11a and 11b).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::service::Encoded;
use crate::transport::Reply;

/// The longest a call is kept, whatever its budget: a caller does not retry an `at_most_once`
/// call later than this after its first attempt.
pub(crate) const KEEP: Duration = Duration::from_secs(600);
/// Kept this much past the call's budget: a retry sent just before the budget ended is on its
/// way, and the two nodes count the budget from moments a network trip apart.
pub(crate) const GRACE: Duration = Duration::from_secs(5);
/// The most calls kept: a caller making 1,000 at-most-once calls a second to one provider, on
/// budgets of 25 s, needs its quarter of them.
pub(crate) const MAX_CALLS: usize = 1 << 17;
/// The most calls of one caller kept, and the most of [`MAX_BYTES`] its calls take: one node
/// cannot fill the record for the others.
pub(crate) const MAX_CALLS_PER_CALLER: usize = MAX_CALLS / 4;
/// The most bytes the record takes: every call's entry ([`ENTRY_BYTES`]) and the replies kept
/// outside their entries ([`kept_bytes`]).
pub(crate) const MAX_BYTES: usize = 64 << 20;
/// The share of [`MAX_CALLS`] and [`MAX_BYTES`] (one part in this many) kept for callers that
/// hold less than a sixty-fourth of each; the others stop short of it.
const RESERVE: usize = 8;
/// What one call's entry takes, besides a reply kept outside it: its slot in the table
/// (hashbrown keeps a table at most 7/8 full and doubles it, so a slot costs between 8/7 and
/// 16/7 of its size: counted at twice) and its place in an expiry list (a `Vec` that doubles:
/// counted at twice). 322 bytes on x86-64.
pub(crate) const ENTRY_BYTES: usize =
    2 * (size_of::<(Key, Entry)>() + 1) + 2 * size_of::<(Key, u64)>();
/// Replies of at most this many bytes are kept inside their entry.
const INLINE: usize = 22;

/// What a reply kept outside its entry takes: the reply, its `Arc` and its buffer, each
/// allocation with the allocator's own 16 bytes.
pub(crate) fn kept_bytes(reply: &Reply) -> usize {
    reply.size() + size_of::<Reply>() + 2 * size_of::<usize>() + 2 * 16
}

/// A call, as the record knows it: who made it, of which function, and its id. The function is
/// in the key so that a caller that used one id for two functions gets neither the other's
/// reply.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub(crate) caller: Arc<str>,
    pub(crate) function: Arc<str>,
    pub(crate) call: u128,
}

#[derive(Debug, Default)]
pub(crate) struct Record {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    calls: HashMap<Key, Entry>,
    /// Calls by the second they expire in, counted from `epoch` (each with the `seq` it was
    /// entered with): a list is forgotten whole once its second has passed, so a call is
    /// forgotten at most a second after it expires, never before.
    expiring: BTreeMap<u64, Vec<(Key, u64)>>,
    epoch: Option<Instant>,
    entered: u64,
    /// Each caller's calls kept, and the bytes they take.
    per_caller: HashMap<Arc<str>, (usize, usize)>,
    bytes: usize,
}

#[derive(Debug)]
struct Entry {
    seq: u64,
    state: State,
    /// The newest retry of the call ([`Record::seen`]): only it waits for a running call, an
    /// older one still waiting is answered `Expired` (its caller has moved on to the newer), so
    /// retries of one call wait one at a time whatever a caller sends, and every answer shares
    /// the one kept reply.
    latest_recall: u64,
}

#[derive(Debug)]
enum State {
    Running(Arc<Notify>),
    Finished(Kept),
    Interrupted,
}

/// A finished call's reply, as kept.
#[derive(Debug)]
enum Kept {
    /// A `Done` reply of at most [`INLINE`] bytes, inside the entry.
    Inline(u8, [u8; INLINE]),
    /// Any other, shared with every retry answered, and the bytes it is counted at.
    Shared(Arc<Reply>, usize),
    /// Too large for the room left: not kept. Its size, for the retry's error.
    Gone(usize),
}

/// What [`Record::begin`] found.
pub(crate) enum Begin {
    /// A new call: run it, and tell the record how it ended.
    Run(Running),
    /// Seen before: the answer, or what to wait on.
    Seen(Recall),
    /// No room: refuse it before it runs.
    Full(String),
}

/// A retry of a call seen before: wait with [`Record::recall`].
pub(crate) struct Recall {
    key: Key,
    /// Its number among the call's retries: a newer one takes over.
    id: u64,
}

/// What a retry is told when the call's first attempt stopped before it ended.
pub(crate) fn interrupted() -> Reply {
    Reply::Interrupted(
        "an earlier attempt of this call started here and was stopped before it finished (its \
         deadline, its caller's connection, or this node's shutdown): it may have run, and is \
         not run again"
            .to_owned(),
    )
}

impl Record {
    /// Looks a call up; enters it as running if it is new and there is room. It expires at
    /// `budget_end` (capped at [`KEEP`] from now) plus [`GRACE`].
    pub(crate) fn begin(self: &Arc<Self>, key: Key, budget_end: Option<Instant>) -> Begin {
        let now = Instant::now();
        let mut inner = self.lock();
        inner.epoch.get_or_insert(now);
        inner.expire(now);
        if let Some(recall) = inner.recall_of(key.clone()) {
            return Begin::Seen(recall);
        }
        let (mine, my_bytes) = inner
            .per_caller
            .get(&key.caller)
            .copied()
            .unwrap_or_default();
        if !inner.has_room(mine, my_bytes, 1, ENTRY_BYTES) {
            return Begin::Full(format!(
                "the record of at-most-once calls is full ({} calls, {mine} of this caller's, \
                 {} bytes of {MAX_BYTES}): it was not run here",
                inner.calls.len(),
                inner.bytes
            ));
        }
        inner.bytes += ENTRY_BYTES;
        let caller = inner.per_caller.entry(key.caller.clone()).or_default();
        caller.0 += 1;
        caller.1 += ENTRY_BYTES;
        let kept_until = now + KEEP;
        let expires = budget_end.map_or(kept_until, |end| end.min(kept_until)) + GRACE;
        inner.entered += 1;
        let seq = inner.entered;
        let second = inner.second_after(expires);
        inner
            .expiring
            .entry(second)
            .or_default()
            .push((key.clone(), seq));
        let notify = Arc::new(Notify::new());
        inner.calls.insert(
            key.clone(),
            Entry {
                seq,
                state: State::Running(notify),
                latest_recall: 0,
            },
        );
        Begin::Run(Running {
            record: self.clone(),
            key: Some(key),
            expires,
        })
    }

    /// The call, if it was seen before: this retry becomes the one answered.
    pub(crate) fn seen(&self, key: &Key) -> Option<Recall> {
        let mut inner = self.lock();
        inner.expire(Instant::now());
        inner.recall_of(key.clone())
    }

    /// The answer to a call seen before: its kept reply (waiting, until `deadline`, for one
    /// still running), or why there is none.
    pub(crate) async fn recall(&self, recall: Recall, deadline: Instant) -> Reply {
        let key = &recall.key;
        loop {
            let notify = {
                let inner = self.lock();
                let entry = inner.calls.get(key);
                if entry.is_some_and(|e| e.latest_recall != recall.id) {
                    // A newer retry of the call arrived: it is the one answered.
                    return Reply::Expired;
                }
                match entry.map(|e| &e.state) {
                    Some(State::Finished(Kept::Inline(len, bytes))) => {
                        let reply = Reply::Done(Encoded::from_slice(&bytes[..usize::from(*len)]));
                        return Reply::Recalled(Arc::new(reply));
                    }
                    Some(State::Finished(Kept::Shared(reply, _))) => {
                        return Reply::Recalled(reply.clone());
                    }
                    Some(State::Finished(Kept::Gone(size))) => {
                        return Reply::Undeliverable(format!(
                            "the call ran here; its reply ({size} bytes) was more than the record \
                             of at-most-once calls had room to keep, so it is gone, and the call \
                             is not run again"
                        ));
                    }
                    Some(State::Interrupted) | None => return interrupted(),
                    Some(State::Running(notify)) => notify.clone(),
                }
            };
            let ended = notify.notified();
            tokio::pin!(ended);
            // Registered before the state is read again: an end in between is not missed.
            ended.as_mut().enable();
            if self.lock().calls.get(key).is_some_and(|e| {
                matches!(e.state, State::Running(_)) && e.latest_recall == recall.id
            }) && tokio::time::timeout_at(deadline, ended).await.is_err()
            {
                return Reply::Expired;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Inner {
    /// A retry of `key`, if the call is kept: the newest, which wakes an older one waiting.
    fn recall_of(&mut self, key: Key) -> Option<Recall> {
        let entry = self.calls.get_mut(&key)?;
        entry.latest_recall += 1;
        if let State::Running(notify) = &entry.state {
            notify.notify_waiters();
        }
        Some(Recall {
            id: entry.latest_recall,
            key,
        })
    }

    /// Whether a caller holding `mine` calls and `my_bytes` may enter `calls` more calls of
    /// `bytes`: within its quarter, and within the record short of its reserve, or within the
    /// whole record for a caller that holds less than a sixty-fourth.
    fn has_room(&self, mine: usize, my_bytes: usize, calls: usize, bytes: usize) -> bool {
        let (all, all_bytes) = (self.calls.len() + calls, self.bytes + bytes);
        let (mine_after, my_bytes_after) = (mine + calls, my_bytes + bytes);
        if mine_after > MAX_CALLS_PER_CALLER || my_bytes_after > MAX_BYTES / 4 {
            return false;
        }
        let small = mine < MAX_CALLS / 64 && my_bytes < MAX_BYTES / 64;
        let share = |max: usize| if small { max } else { max - max / RESERVE };
        all <= share(MAX_CALLS) && all_bytes <= share(MAX_BYTES)
    }

    /// The second after the one `at` falls in, counted from the record's first call (no call
    /// expires before it).
    fn second_after(&self, at: Instant) -> u64 {
        let epoch = self.epoch.unwrap_or(at);
        at.saturating_duration_since(epoch).as_secs() + 1
    }

    /// Forgets the calls that expired: each whole second passed costs one look at the first
    /// list, never a walk of the record.
    fn expire(&mut self, now: Instant) {
        let Some(epoch) = self.epoch else {
            return;
        };
        let passed = now.saturating_duration_since(epoch).as_secs();
        while let Some(first) = self.expiring.first_entry()
            && *first.key() <= passed
        {
            for (key, seq) in first.remove() {
                // The same key entered again later is another call, in another list.
                if self.calls.get(&key).is_some_and(|e| e.seq == seq) {
                    self.forget(&key);
                }
            }
        }
    }

    fn forget(&mut self, key: &Key) {
        let Some(entry) = self.calls.remove(key) else {
            return;
        };
        let kept = match entry.state {
            State::Finished(Kept::Shared(_, size)) => size,
            _ => 0,
        };
        self.bytes -= ENTRY_BYTES + kept;
        if let Some((calls, bytes)) = self.per_caller.get_mut(&key.caller) {
            *calls -= 1;
            *bytes -= ENTRY_BYTES + kept;
            if *calls == 0 {
                self.per_caller.remove(&key.caller);
            }
        }
    }

    /// Ends a running call: its reply kept if there is room, or interrupted.
    fn end(&mut self, key: &Key, reply: Option<&Reply>) {
        let Some(entry) = self.calls.get_mut(key) else {
            return;
        };
        let State::Running(notify) = &entry.state else {
            return;
        };
        let notify = notify.clone();
        let state = match reply {
            Some(Reply::Done(bytes)) if bytes.len() <= INLINE => {
                let mut inline = [0; INLINE];
                inline[..bytes.len()].copy_from_slice(bytes);
                State::Finished(Kept::Inline(bytes.len() as u8, inline))
            }
            Some(reply) => {
                let size = kept_bytes(reply);
                let (mine, my_bytes) = self
                    .per_caller
                    .get(&key.caller)
                    .copied()
                    .unwrap_or_default();
                // Its own entry is counted already: the reply is room for no new call.
                if self.has_room(mine, my_bytes, 0, size) {
                    if let Some((_, my_bytes)) = self.per_caller.get_mut(&key.caller) {
                        *my_bytes += size;
                    }
                    self.bytes += size;
                    State::Finished(Kept::Shared(Arc::new(reply.clone()), size))
                } else {
                    State::Finished(Kept::Gone(reply.size()))
                }
            }
            None => State::Interrupted,
        };
        if let Some(entry) = self.calls.get_mut(key) {
            entry.state = state;
        }
        notify.notify_waiters();
    }
}

/// A call entered as running. Dropped before [`finish`](Self::finish), the call is
/// interrupted: its handler stopped part-way.
pub(crate) struct Running {
    record: Arc<Record>,
    key: Option<Key>,
    expires: Instant,
}

impl Running {
    /// Keeps the call's reply for its retries, if there is room: a reply past the room left is
    /// still its first attempt's (`Dispatcher::handle` hands it over), only not kept.
    pub(crate) fn finish(mut self, reply: &Reply) {
        if let Some(key) = self.key.take() {
            self.record.lock().end(&key, Some(reply));
        }
    }

    /// When the record forgets the call: its handler may run until then, no longer.
    pub(crate) fn expires(&self) -> Instant {
        self.expires
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.record.lock().end(&key, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(caller: &str, call: u128) -> Key {
        Key {
            caller: caller.into(),
            function: "bank.deposit".into(),
            call,
        }
    }

    fn later(d: u64) -> Instant {
        Instant::now() + Duration::from_secs(d)
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_is_answered_from_the_record_after_the_call_ends_and_while_it_runs() {
        let record = Arc::new(Record::default());
        let Begin::Run(running) = record.begin(key("web-1", 7), Some(later(30))) else {
            panic!("a new call runs");
        };
        // A retry while it runs waits for its end.
        let Begin::Seen(recall) = record.begin(key("web-1", 7), Some(later(30))) else {
            panic!("seen");
        };
        let waiting = record.recall(recall, later(1));
        let ending = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            running.finish(&Reply::Done(vec![4, 2].into()));
        };
        let (reply, ()) = tokio::join!(waiting, ending);
        assert_eq!(
            reply,
            Reply::Recalled(Arc::new(Reply::Done(vec![4, 2].into())))
        );
        let Begin::Seen(recall) = record.begin(key("web-1", 7), None) else {
            panic!("still seen");
        };
        assert_eq!(
            record.recall(recall, later(1)).await,
            Reply::Recalled(Arc::new(Reply::Done(vec![4, 2].into())))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn another_callers_call_of_the_same_id_is_its_own() {
        let record = Arc::new(Record::default());
        let Begin::Run(running) = record.begin(key("web-1", 7), None) else {
            panic!();
        };
        running.finish(&Reply::Done(vec![1].into()));
        assert!(matches!(
            record.begin(key("evil-1", 7), None),
            Begin::Run(_)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_handler_stopped_part_way_leaves_the_call_interrupted() {
        let record = Arc::new(Record::default());
        let Begin::Run(running) = record.begin(key("web-1", 1), None) else {
            panic!();
        };
        drop(running);
        let Begin::Seen(recall) = record.begin(key("web-1", 1), None) else {
            panic!();
        };
        assert!(matches!(
            record.recall(recall, later(1)).await,
            Reply::Interrupted(_)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_ends_at_the_retrys_deadline() {
        let record = Arc::new(Record::default());
        let Begin::Run(_running) = record.begin(key("web-1", 1), None) else {
            panic!();
        };
        let Begin::Seen(recall) = record.begin(key("web-1", 1), None) else {
            panic!();
        };
        assert_eq!(
            record.recall(recall, later(2)).await,
            Reply::Expired,
            "still running at the deadline"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn calls_expire_after_their_budget_and_grace_and_the_record_is_bounded() {
        let record = Arc::new(Record::default());
        let Begin::Run(running) = record.begin(key("web-1", 1), Some(later(10))) else {
            panic!();
        };
        running.finish(&Reply::Done(vec![1].into()));
        tokio::time::advance(Duration::from_secs(10) + GRACE).await;
        assert!(
            matches!(record.begin(key("web-1", 1), None), Begin::Seen(_)),
            "kept to the end of its budget and grace"
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(
            matches!(record.begin(key("web-1", 1), None), Begin::Run(_)),
            "forgotten within a second after its budget and grace are over"
        );
        let mut refused = 0;
        for call in 0..MAX_CALLS_PER_CALLER as u128 + 10 {
            match record.begin(key("web-2", call + 100), Some(later(30))) {
                Begin::Run(running) => running.finish(&Reply::Done(Vec::new().into())),
                Begin::Full(_) => refused += 1,
                Begin::Seen(_) => panic!(),
            }
        }
        assert_eq!(refused, 10, "one caller holds at most a quarter");
        assert!(matches!(
            record.begin(key("web-3", 1), Some(later(30))),
            Begin::Run(_)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_reply_past_the_bytes_left_is_not_kept_and_its_retry_is_told() {
        let record = Arc::new(Record::default());
        let Begin::Run(running) = record.begin(key("web-1", 1), None) else {
            panic!();
        };
        running.finish(&Reply::Done(vec![0; MAX_BYTES / 4].into()));
        let Begin::Seen(recall) = record.begin(key("web-1", 1), None) else {
            panic!();
        };
        let Reply::Undeliverable(why) = record.recall(recall, later(1)).await else {
            panic!("not kept");
        };
        assert!(why.contains("ran here"), "{why}");
        assert_eq!(record.lock().bytes, ENTRY_BYTES, "only the entry's own");
    }

    #[tokio::test(start_paused = true)]
    async fn one_callers_replies_take_at_most_a_quarter_of_the_bytes() {
        let record = Arc::new(Record::default());
        let big = Reply::Done(vec![0; 8 << 20].into());
        let mut kept = 0;
        for call in 0..8 {
            let Begin::Run(running) = record.begin(key("hog", call), None) else {
                panic!();
            };
            running.finish(&big);
            let Begin::Seen(recall) = record.begin(key("hog", call), None) else {
                panic!();
            };
            kept += usize::from(matches!(
                record.recall(recall, later(1)).await,
                Reply::Recalled(_)
            ));
        }
        assert_eq!(
            kept, 1,
            "16 MiB of 64, and 8 MiB is more than half of it with its overhead"
        );
        let Begin::Run(running) = record.begin(key("web-1", 1), None) else {
            panic!();
        };
        running.finish(&big);
        let Begin::Seen(recall) = record.begin(key("web-1", 1), None) else {
            panic!();
        };
        assert!(matches!(
            record.recall(recall, later(1)).await,
            Reply::Recalled(_)
        ));
    }

    /// one call with a long budget, entered first, keeps every call entered
    /// after it from expiring (`expire` stops at the front of `order`); the per-caller bound is
    /// checked without looking further. A caller whose calls all ended and expired long ago is
    /// refused as if it held 65,536 calls.
    #[tokio::test(start_paused = true)]
    async fn one_long_call_does_not_keep_calls_entered_after_it_from_expiring() {
        let record = Arc::new(Record::default());
        // The hostile caller's one call: a budget of 10 min (the caller says so).
        let Begin::Run(running) = record.begin(key("evil-1", 1), Some(later(600))) else {
            panic!();
        };
        running.finish(&Reply::Done(vec![].into()));
        // An honest caller: 65,536 calls of 1 s budgets, all answered.
        for call in 0..MAX_CALLS_PER_CALLER as u128 {
            let Begin::Run(running) = record.begin(key("web-1", call), Some(later(1))) else {
                panic!("call {call}");
            };
            running.finish(&Reply::Done(vec![].into()));
        }
        // A minute later every one of them has expired (1 s + GRACE).
        tokio::time::advance(Duration::from_secs(60)).await;
        let next = record.begin(key("web-1", u128::MAX), Some(later(1)));
        let held = record.lock().calls.len();
        assert!(
            matches!(next, Begin::Run(_)),
            "refused as full; the record still holds {held} calls, all but one expired"
        );
    }

    /// Four members fill their quarters with fresh call ids: together they stop an eighth
    /// short, which is kept for callers that hold little; a fifth member that tries gets
    /// only a sixty-fourth of it.
    #[tokio::test(start_paused = true)]
    async fn members_filling_their_quarters_leave_the_reserve_to_callers_that_hold_little() {
        let record = Arc::new(Record::default());
        let mut run = 0;
        for member in ["evil-1", "evil-2", "evil-3", "evil-4", "evil-5"] {
            for call in 0..=MAX_CALLS_PER_CALLER as u128 {
                match record.begin(key(member, call), Some(later(600))) {
                    Begin::Run(running) => {
                        running.finish(&Reply::Done(vec![1; 8].into()));
                        run += 1;
                    }
                    Begin::Full(_) => break,
                    Begin::Seen(_) => panic!(),
                }
            }
        }
        assert_eq!(run, MAX_CALLS - MAX_CALLS / RESERVE + MAX_CALLS / 64);
        for call in 0..100 {
            let Begin::Run(running) = record.begin(key("web-1", call), Some(later(600))) else {
                panic!("an honest caller's call {call} was refused");
            };
            running.finish(&Reply::Done(vec![1; 8].into()));
        }
        let counted = record.lock().bytes;
        assert!(counted <= MAX_BYTES, "{counted}");
    }

    /// What is counted covers what the record's own structures hold.
    #[test]
    fn an_entry_is_counted_at_least_at_its_slot_and_list_place() {
        assert!(ENTRY_BYTES >= size_of::<(Key, Entry)>() + size_of::<(Key, u64)>());
        assert!(size_of::<Entry>() <= 48, "{}", size_of::<Entry>());
        assert!(kept_bytes(&Reply::Done(vec![0; 100].into())) >= 100 + size_of::<Reply>());
    }

    /// A caller that used one id for two functions gets neither the other's reply.
    #[tokio::test(start_paused = true)]
    async fn one_id_of_two_functions_is_two_calls() {
        let record = Arc::new(Record::default());
        let Begin::Run(running) = record.begin(key("web-1", 7), None) else {
            panic!();
        };
        running.finish(&Reply::Done(vec![1].into()));
        let other = Key {
            function: "bank.withdraw".into(),
            ..key("web-1", 7)
        };
        assert!(matches!(record.begin(other, None), Begin::Run(_)));
    }

    /// Retries of one call wait one at a time: a newer one takes over from one still waiting,
    /// which is answered `Expired`, so a flood of retries holds one wait.
    #[tokio::test(start_paused = true)]
    async fn a_newer_retry_of_a_call_takes_over_from_one_still_waiting() {
        let record = Arc::new(Record::default());
        let Begin::Run(running) = record.begin(key("web-1", 7), Some(later(30))) else {
            panic!();
        };
        let Begin::Seen(first) = record.begin(key("web-1", 7), None) else {
            panic!("seen");
        };
        let older = record.recall(first, later(10));
        let newer = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let second = record.seen(&key("web-1", 7)).expect("seen");
            let ending = async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                running.finish(&Reply::Done(vec![1].into()));
            };
            tokio::join!(record.recall(second, later(10)), ending).0
        };
        let started = Instant::now();
        let (older, newer) = tokio::join!(older, newer);
        assert_eq!(older, Reply::Expired, "the older wait ends");
        assert!(matches!(newer, Reply::Recalled(_)), "{newer:?}");
        assert_eq!(started.elapsed(), Duration::from_secs(2));
    }
}
