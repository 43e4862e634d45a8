//! One round: the same request to every node at once, votes counted as replies arrive, and the
//! arithmetic of quorum, drift and validity.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use std::pin::Pin;
use std::task::Poll;

use crate::alarm::Deadline;
use crate::error::{ErrorKind, NodeReport, Report, Vote};
use crate::node::{Failure, Node};

/// Q = floor(N / 2) + 1.
pub fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// The quorum of a semaphore with `limit` permits over `nodes` nodes:
/// Q = floor(limit × N / (limit + 1)) + 1, so that (limit + 1) × Q > limit × N and no
/// `limit + 1` holders can each be admitted by Q of the N nodes. Q(1) is the lock's majority;
/// N − Q nodes may be down.
pub fn semaphore_quorum(nodes: usize, limit: u32) -> usize {
    let (n, k) = (nodes as u128, u128::from(limit));
    (k * n / (k + 1) + 1) as usize
}

/// validity = ttl − elapsed − drift, or `None` when that is not positive.
pub fn validity(ttl: Duration, elapsed: Duration, drift: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)?
        .checked_sub(drift)
        .filter(|v| !v.is_zero())
}

/// drift = ttl × `factor` + `constant`: the clock drift allowed for between the nodes' expiry
/// clocks and the client's (the seeds' rule; `Config`'s `drift_factor` and `drift_constant`).
pub fn drift(ttl: Duration, factor: f64, constant: Duration) -> Duration {
    ttl.mul_f64(factor).saturating_add(constant)
}

/// How long a node that restarted (or whose master changed) stays out of the quorum: until every
/// lock it may have held has expired, `max_ttl` + its drift, plus `resolution` for the coarseness
/// of the age read from the node (`uptime_in_seconds` is floored to the second).
pub fn restart_quarantine(max_ttl: Duration, drift: Duration, resolution: Duration) -> Duration {
    max_ttl.saturating_add(drift).saturating_add(resolution)
}

/// The fencing token of a grant: one more than the largest counter the granting nodes returned,
/// and never below `floor` (the client's wall clock in µs, which covers counters lost by a node
/// that restarted empty, as long as clocks agree to well within the restart quarantine).
pub fn fence(max_counter: u64, floor: u64) -> u64 {
    max_counter.saturating_add(1).max(floor)
}

/// The outcome of an acquire round: granted iff a quorum of eligible nodes said yes
/// and validity is left; otherwise Contended when any node said another token holds a key and
/// no quorum was reached, else Unavailable (nodes down, timed out, quarantined, or too slow).
pub fn classify(
    nodes: usize,
    granted: usize,
    refused: usize,
    validity_left: bool,
) -> Result<(), ErrorKind> {
    classify_with(quorum(nodes), granted, refused, validity_left)
}

/// [`classify`] with the quorum `q` given (a semaphore's, [`semaphore_quorum`]).
pub(crate) fn classify_with(
    q: usize,
    granted: usize,
    refused: usize,
    validity_left: bool,
) -> Result<(), ErrorKind> {
    if granted >= q {
        if validity_left {
            Ok(())
        } else {
            Err(ErrorKind::Unavailable)
        }
    } else if refused > 0 {
        Err(ErrorKind::Contended)
    } else {
        Err(ErrorKind::Unavailable)
    }
}

/// The nodes that must be full for a failed permit round to be explained by `limit` permits held
/// elsewhere: each of those permits is held on `q` of the `n` nodes, and a node that
/// is not full holds at most `limit − 1`, so at least `limit × q − (limit − 1) × n` nodes are
/// full (always at least 1, as (limit + 1) × q > limit × n). Q(1) is the majority, and this is
/// `q` then: a lock held elsewhere fills a majority.
pub(crate) fn full_to_explain(n: usize, q: usize, limit: u32) -> usize {
    let (n, q, k) = (n as u128, q as u128, u128::from(limit.max(1)));
    (k * q).saturating_sub((k - 1) * n).max(1) as usize
}

/// Whether a failed permit round was a split vote: enough eligible nodes answered that the
/// permit would have been granted had they agreed (`granted + full >= q`), and fewer of them
/// were full — even counting every node whose answer is `unknown` (error, timeout, not yet
/// answered) as full — than `explained` ([`full_to_explain`]): the seats were taken by
/// concurrent requests, not by permits held elsewhere, so a permit may be free.
pub(crate) fn split_vote(
    q: usize,
    explained: usize,
    granted: usize,
    full: usize,
    unknown: usize,
) -> bool {
    granted < q && full > 0 && granted + full >= q && full + unknown < explained
}

/// What a node answered, before eligibility is applied.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// Yes, with a payload (the fence counter for acquire, else 0).
    Yes(u64),
    /// Extend only: yes, after writing the keys back on a node that restarted.
    Reseated,
    /// No: held by someone else, or our token is gone.
    No,
    Failed(Failure),
}

/// The counted outcome of a round.
pub(crate) struct Round {
    pub(crate) report: Report,
    /// Eligible "yes" votes.
    pub(crate) granted: usize,
    /// "No" answers.
    pub(crate) refused: usize,
    /// Largest payload among eligible "yes" votes.
    pub(crate) max_payload: u64,
    /// When the outcome was decided (for validity).
    pub(crate) decided_at: Instant,
}

/// How the votes of a round are tallied.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tally {
    /// Acquire and extend: stop as soon as the outcome is decided (quorum reached, or out of
    /// reach with a refusal seen); a "yes" from a node in restart quarantine does not count.
    Eligible,
    /// A fair acquire: as `Eligible`, except that a round that failed waits a little for the
    /// replies still out (as long again as it took so far, at least [`FAIR_GRACE_MIN`], at most
    /// the node timeout), so that its rollback goes only to the nodes that may hold a key and
    /// not to every node that was merely slower than the refusals (a waiter's joining round
    /// fails by design, once per grant).
    Fair,
    /// A permit: as `Eligible`, except that a round that failed goes on until it is
    /// known whether the refusals explain it ([`split_vote`]; `explained` is
    /// [`full_to_explain`]): a split vote is told apart from a full semaphore, and retried.
    Permit { explained: usize },
    /// Release: stop once a quorum has deleted the keys (the lock is then gone: no quorum can
    /// see it any more), else wait for every node; every "yes" counts (quarantine is irrelevant
    /// to deleting our own keys). The deletes still outstanding finish in the background.
    Release,
    /// Release that waits for every node (administrative release: a complete report).
    ReleaseAll,
}

/// The shortest wait of a lost [`Tally::Fair`] round for its outstanding replies.
const FAIR_GRACE_MIN: Duration = Duration::from_millis(1);

/// Sends `request(node)` to all nodes at once and counts the replies as they arrive.
///
/// Every request is polled (so written to its connection's pipeline) before the outcome can be
/// decided: a rollback issued after this returns is therefore queued behind the request it
/// undoes on every connection. One deadline (on the manager's alarm, `alarm.rs`) bounds the
/// round: a node that has not answered `node_timeout` after the requests were handed to their
/// connections votes `Timeout` (all requests leave together, so this is each node's own
/// timeout). Replies still outstanding when the outcome is decided are drained by a background
/// task until that same deadline.
pub(crate) async fn run<F, Fut>(
    nodes: &[Arc<Node>],
    tally: Tally,
    q: usize,
    started: Instant,
    request: F,
) -> Round
where
    F: Fn(Arc<Node>) -> Fut,
    Fut: Future<Output = Reply> + Send + 'static,
{
    let n = nodes.len();
    let mut reports: Vec<NodeReport> = nodes
        .iter()
        .map(|node| NodeReport {
            url: node.display.clone(),
            vote: Vote::Pending,
            error: None,
        })
        .collect();
    let mut pending: Vec<Option<Pin<Box<Fut>>>> = nodes
        .iter()
        .map(|node| Some(Box::pin(request(node.clone()))))
        .collect();
    let (mut granted, mut refused, mut failed, mut max_payload) = (0usize, 0usize, 0usize, 0u64);
    let node_timeout = nodes
        .first()
        .map_or(Duration::ZERO, |node| node.node_timeout());
    // Armed once every request has been polled (handed to its connection) for the first time,
    // on the manager's alarm (one timer for all rounds, `alarm.rs`).
    let mut deadline: Option<Deadline> = None;
    let mut timed_out = false;
    // Tally::Fair: how long a lost round still waits for the replies that are out.
    let mut grace: Option<tokio::time::Instant> = None;
    let mut grace_timer = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
    std::future::poll_fn(|cx| {
        for (i, slot) in pending.iter_mut().enumerate() {
            let Some(fut) = slot else { continue };
            let Poll::Ready(reply) = fut.as_mut().poll(cx) else {
                continue;
            };
            *slot = None;
            let node = &nodes[i];
            let counters = &node.counters;
            let r = &mut reports[i];
            match reply {
                Reply::Yes(_) | Reply::Reseated => {
                    let reseated = matches!(reply, Reply::Reseated);
                    let counts_eligible =
                        matches!(tally, Tally::Eligible | Tally::Fair | Tally::Permit { .. });
                    if !counts_eligible || node.eligible() {
                        granted += 1;
                        if let Reply::Yes(payload) = reply {
                            max_payload = max_payload.max(payload);
                        }
                        r.vote = if reseated { Vote::Reseated } else { Vote::For };
                        counters.votes_for.fetch_add(1, Ordering::Relaxed);
                    } else {
                        failed += 1;
                        r.vote = if reseated {
                            Vote::Reseated
                        } else {
                            Vote::NotEligible
                        };
                        r.error = Some(node.quarantine_text());
                        counters.not_eligible.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Reply::No => {
                    refused += 1;
                    r.vote = Vote::Against;
                    counters.votes_against.fetch_add(1, Ordering::Relaxed);
                }
                Reply::Failed(f) => {
                    failed += 1;
                    r.vote = match f {
                        Failure::Timeout => {
                            counters.timeouts.fetch_add(1, Ordering::Relaxed);
                            Vote::Timeout
                        }
                        Failure::Error(_) => {
                            counters.errors.fetch_add(1, Ordering::Relaxed);
                            Vote::Error
                        }
                    };
                    r.error = Some(f.text());
                }
            }
        }
        let answered = granted + refused + failed;
        // A failed round waits for a refusal (or for every node) so that the error kind does
        // not depend on reply order: Contended needs one "held elsewhere" answer.
        let failed_for_sure = n - refused - failed < q;
        let lost = failed_for_sure && refused > 0;
        if tally == Tally::Fair && lost && grace.is_none() {
            let waited = Instant::now().saturating_duration_since(started);
            let at = tokio::time::Instant::now() + waited.max(FAIR_GRACE_MIN).min(node_timeout);
            grace_timer.as_mut().reset(at);
            grace = Some(at);
        }
        let decided = match tally {
            Tally::Eligible => granted >= q || lost,
            Tally::Permit { explained } => {
                // Settled once the refusals explain the failure, or once it can no longer be
                // a split (too few eligible answers), or once it is one whatever the rest say.
                let out = n - answered;
                let settled = refused >= explained
                    || granted + refused + out < q
                    || (granted + refused >= q && refused + failed + out < explained);
                granted >= q || (lost && settled)
            }
            Tally::Fair => granted >= q || (lost && grace_timer.as_mut().poll(cx).is_ready()),
            Tally::Release => granted >= q,
            Tally::ReleaseAll => false,
        };
        if decided || answered == n {
            return Poll::Ready(());
        }
        let deadline = deadline.get_or_insert_with(|| {
            nodes[0]
                .alarm()
                .deadline(tokio::time::Instant::now() + node_timeout)
        });
        if deadline.poll_elapsed(cx).is_ready() {
            timed_out = true;
            return Poll::Ready(());
        }
        Poll::Pending
    })
    .await;
    let decided_at = Instant::now();
    if timed_out {
        for (i, slot) in pending.iter_mut().enumerate() {
            if slot.take().is_some() {
                nodes[i].counters.timeouts.fetch_add(1, Ordering::Relaxed);
                reports[i].vote = Vote::Timeout;
                reports[i].error = Some(Failure::Timeout.text());
            }
        }
    }
    if pending.iter().any(Option::is_some) {
        // Late replies still matter to Redis (they set or delete keys), not to the outcome.
        // Each is counted on its node until it is answered or times out, so that a process
        // about to exit can wait for them (`LockManager::flush`).
        let rest: Vec<_> = pending
            .into_iter()
            .zip(nodes)
            .filter_map(|(slot, node)| slot.map(|fut| (node.draining(), fut)))
            .collect();
        let until = deadline.map_or_else(|| tokio::time::Instant::now() + node_timeout, |d| d.at());
        let alarm = Arc::clone(nodes[0].alarm());
        let late =
            futures_util::future::join_all(rest.into_iter().map(|(guard, fut)| async move {
                fut.await;
                drop(guard);
            }));
        nodes[0]
            .runtime()
            .spawn(async move { alarm.timeout_at(until, late).await });
    }
    Round {
        report: Report {
            nodes: reports,
            elapsed: decided_at - started,
            rounds: 1,
        },
        granted,
        refused,
        max_payload,
        decided_at,
    }
}

/// A round of one script whose reply is 1 when the node did what was asked (extend, the fence
/// write-back): 1 is a "yes", any other integer a "no".
pub(crate) async fn run_flag(
    nodes: &[Arc<Node>],
    q: usize,
    started: Instant,
    cmd: Arc<redis::Cmd>,
) -> Round {
    run(nodes, Tally::Eligible, q, started, |node| {
        let cmd = cmd.clone();
        async move {
            match node.query::<i64>(&cmd).await {
                Ok(1) => Reply::Yes(0),
                Ok(_) => Reply::No,
                Err(f) => Reply::Failed(f),
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorum_is_a_strict_majority() {
        assert_eq!([1, 2, 3, 4, 5, 6, 7].map(quorum), [1, 2, 2, 3, 3, 4, 4]);
    }

    #[test]
    fn semaphore_quorum_leaves_no_room_for_one_holder_more() {
        assert_eq!(semaphore_quorum(5, 1), 3);
        assert_eq!(semaphore_quorum(5, 2), 4);
        assert_eq!(semaphore_quorum(5, 3), 4);
        assert_eq!(semaphore_quorum(5, 4), 5);
        assert_eq!(semaphore_quorum(3, 2), 3);
        assert_eq!(semaphore_quorum(1, 1000), 1);
        for n in 1..=9usize {
            assert_eq!(semaphore_quorum(n, 1), quorum(n), "Q(1) is the majority");
            for k in 1..=64u32 {
                let q = semaphore_quorum(n, k);
                assert!(q <= n, "n={n} k={k}");
                // k + 1 holders need (k + 1) × q seats; the n nodes have k × n.
                assert!((k as usize + 1) * q > k as usize * n, "n={n} k={k} q={q}");
                // and q is the smallest such.
                assert!(
                    q == 1 || (k as usize + 1) * (q - 1) <= k as usize * n,
                    "n={n} k={k}"
                );
            }
        }
    }

    #[test]
    fn a_split_vote_is_a_failure_the_full_nodes_do_not_explain() {
        // N = 3, limit 2: Q = 3, and two permits held elsewhere fill all 3 nodes.
        let q = semaphore_quorum(3, 2);
        assert_eq!((q, full_to_explain(3, q, 2)), (3, 3));
        // Three requesters, each admitted by 2 nodes and refused by 1: split.
        assert!(split_vote(q, 3, 2, 1, 0));
        // Every node full: the permits are held elsewhere.
        assert!(!split_vote(q, 3, 0, 3, 0));
        // A node that did not answer may be full: not provably a split.
        assert!(!split_vote(q, 3, 1, 1, 1) && !split_vote(q, 3, 0, 2, 1));
        // Even when the answers alone would make a split: one unknown could fill the gap.
        assert!(!split_vote(q, 3, 1, 2, 1) && split_vote(q, 3, 1, 2, 0));
        // N = 5, limit 2: Q = 4; two holders on 4 nodes each fill at least 3 nodes.
        let q = semaphore_quorum(5, 2);
        assert_eq!(full_to_explain(5, q, 2), 3);
        assert!(split_vote(q, 3, 3, 2, 0));
        assert!(!split_vote(q, 3, 2, 3, 0));
        // Too few eligible answers to be granted even had they agreed: not a split.
        assert!(!split_vote(q, 3, 2, 1, 0));
        // A round that reached its quorum is no split, whatever else the nodes said.
        assert!(!split_vote(q, 3, q, 1, 0) && !split_vote(q, 3, q + 1, 1, 0));
        // Limit 1 is the lock's majority: a majority of refusals explains the failure.
        for n in 1..=9 {
            assert_eq!(full_to_explain(n, quorum(n), 1), quorum(n));
        }
        // The bound is what `limit` holders on q nodes each fill, and never 0.
        for n in 1..=9usize {
            for k in 1..=40u32 {
                let q = semaphore_quorum(n, k);
                let f = full_to_explain(n, q, k);
                assert!((1..=n).contains(&f), "n={n} k={k}");
                let k = k as usize;
                assert!(f * k + (n - f) * (k - 1) >= k * q, "n={n} k={k}");
                assert!(
                    f == 1 || (f - 1) * k + (n - f + 1) * (k - 1) < k * q,
                    "n={n} k={k}"
                );
            }
        }
    }

    #[test]
    fn classify_grants_on_a_quorum_with_validity_and_otherwise_names_the_cause() {
        use ErrorKind::{Contended, Unavailable};
        assert_eq!(classify(3, 2, 0, true), Ok(()));
        assert_eq!(classify(3, 3, 0, true), Ok(()));
        assert_eq!(classify(5, 3, 2, true), Ok(()));
        // A quorum whose round outlived the ttl: no validity left.
        assert_eq!(classify(3, 2, 1, false), Err(Unavailable));
        // No quorum: held elsewhere if any node said so, else the nodes are unavailable.
        assert_eq!(classify(3, 1, 1, true), Err(Contended));
        assert_eq!(classify(5, 2, 3, true), Err(Contended));
        assert_eq!(classify(3, 1, 0, true), Err(Unavailable));
        assert_eq!(classify(3, 0, 0, true), Err(Unavailable));
        assert_eq!(classify(1, 1, 0, true), Ok(()));
        assert_eq!(classify(1, 0, 1, true), Err(Contended));
    }

    #[test]
    fn drift_quarantine_and_fence_follow_their_rules() {
        let ms = Duration::from_millis;
        assert_eq!(drift(ms(10_000), 0.01, ms(2)), ms(102));
        assert_eq!(drift(ms(3), 0.0, ms(1)), ms(1));
        assert_eq!(restart_quarantine(ms(2000), ms(22), ms(1000)), ms(3022));
        // The counter wins while it is ahead of the clock, the clock floor once counters are lost.
        assert_eq!(fence(41, 7), 42);
        assert_eq!(fence(0, 1_000), 1_000);
        assert_eq!(fence(u64::MAX, 0), u64::MAX);
    }

    #[test]
    fn validity_subtracts_elapsed_and_drift() {
        let ms = Duration::from_millis;
        assert_eq!(validity(ms(1000), ms(100), ms(12)), Some(ms(888)));
        assert_eq!(validity(ms(1000), ms(990), ms(12)), None);
        assert_eq!(validity(ms(1000), ms(988), ms(12)), None);
    }
}
