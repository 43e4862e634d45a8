//! The fair queue of an acquire: its place in line on each node (tickets, heartbeats), the
//! command of each fair round, and who takes the waiter out of a node's queue after a grant.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::acquire::unix_micros;
use crate::error::Vote;
use crate::lock::Kind;
use crate::node::Node;
use crate::request::AcquireRequest;
use crate::scripts;

/// How many rounds in a row (spanning a queue timeout) a fair waiter must fail to reach a quorum
/// before it steps out of line.
pub(crate) const STEP_OUT_ROUNDS: u32 = 3;

/// What [`scripts::FAIR_LEAVE_SOURCE`] does with a waiter's queue entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueueOp {
    /// The rollback of a failed round: the keys go, the place in line stays.
    Requeue,
    /// A waiter that gives up or is cancelled: the keys and the queue entries go.
    Leave,
    /// After a grant, where the grant left entries behind.
    Dequeue,
}

/// One fair round: its command, and who deals with the replies that come after the grant.
pub(crate) struct FairRound {
    pub(crate) cmd: redis::Cmd,
    pub(crate) late: LateReplies,
}

/// A fair round's replies, per node, between the round and its late replies: after a grant,
/// whichever sees a node's refusal last (the granted round, or the reply that came after it)
/// takes the waiter's entries out of that node's queue, once. A reply still out at the grant
/// is usually a grant too, which needs nothing: no dequeue is sent on speculation.
pub(crate) struct LateReplies(pub(crate) Vec<AtomicU8>);

impl LateReplies {
    const OPEN: u8 = 0;
    const FOR: u8 = 1;
    const NOT: u8 = 2;
    /// The round was granted before this node answered.
    const GRANTED: u8 = 3;

    pub(crate) fn new(n: usize) -> Self {
        LateReplies((0..n).map(|_| AtomicU8::new(Self::OPEN)).collect())
    }

    /// Records node `i`'s reply; true when the round was granted without it and the node did
    /// not grant (the caller dequeues there).
    pub(crate) fn left_behind(&self, i: usize, granted: bool) -> bool {
        let mine = if granted { Self::FOR } else { Self::NOT };
        self.0.get(i).is_some_and(|slot| {
            slot.compare_exchange(Self::OPEN, mine, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
                && !granted
        })
    }

    /// At a grant: the nodes that answered without granting (or failed), and those whose reply
    /// arrived unseen with a refusal; replies still out are left to [`Self::left_behind`].
    pub(crate) fn settle(&self, votes: &[Vote]) -> Vec<usize> {
        votes
            .iter()
            .zip(&self.0)
            .enumerate()
            .filter(|(_, (vote, slot))| match vote {
                Vote::For => false,
                Vote::Pending => slot
                    .compare_exchange(
                        Self::OPEN,
                        Self::GRANTED,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_err_and(|seen| seen != Self::FOR),
                _ => true,
            })
            .map(|(i, _)| i)
            .collect()
    }
}

/// Takes a granted fair request's entries out of the queues of `nodes`, in the background.
pub(crate) fn dequeue_on(req: &Arc<AcquireRequest>, nodes: Vec<Arc<Node>>) {
    let Some(rt) = nodes.first().map(|n| n.runtime().clone()) else {
        return;
    };
    let req = req.clone();
    rt.spawn(async move { req.leave_queue(&nodes, QueueOp::Dequeue).await });
}

/// A fair round's request to one node, while its reply is out.
pub(crate) struct Unanswered {
    pub(crate) round: Arc<FairRound>,
    pub(crate) i: usize,
    pub(crate) node: Arc<Node>,
    pub(crate) req: Arc<AcquireRequest>,
    pub(crate) answered: bool,
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        let granted_without = !self.answered
            && self.round.late.0.get(self.i).is_some_and(|slot| {
                slot.compare_exchange(
                    LateReplies::GRANTED,
                    LateReplies::NOT,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            });
        if granted_without {
            dequeue_on(&self.req, vec![self.node.clone()]);
        }
    }
}

/// A fair acquire's place in line: the queue, heartbeat and ticket keys of each lock key, and
/// the ticket (0 until a node has handed one out; then the largest seen, so that every node
/// ranks the waiter alike from its second round on).
pub(crate) struct Fair {
    /// The lock keys, their queue keys, heartbeat keys and ticket counter keys.
    pub(crate) keys: Vec<String>,
    pub(crate) timeout: Duration,
    pub(crate) ticket: AtomicU64,
    /// A node refused because an earlier ticket was in line (not only because of a holder).
    pub(crate) behind: AtomicBool,
    /// Nodes of the last round on which the waiter headed the queue behind the holder.
    pub(crate) next_on: AtomicUsize,
    /// Since when (the start of the first of them) and for how many rounds in a row the
    /// waiter's rounds reached fewer nodes than the quorum.
    pub(crate) unreachable: Mutex<Option<(Instant, u32)>>,
    /// The last round stepped the waiter out of line (see [`Fair::out_of_reach`]).
    pub(crate) out: AtomicBool,
}

impl Fair {
    pub(crate) fn new(keys: &[String], timeout: Duration) -> Fair {
        let mut all = keys.to_vec();
        all.extend(keys.iter().map(|k| scripts::queue_key(k)));
        all.extend(keys.iter().map(|k| scripts::beats_key(k)));
        all.extend(keys.iter().map(|k| scripts::ticket_key(k)));
        Fair {
            keys: all,
            timeout,
            ticket: AtomicU64::new(0),
            behind: AtomicBool::new(false),
            next_on: AtomicUsize::new(0),
            unreachable: Mutex::new(None),
            out: AtomicBool::new(false),
        }
    }

    /// Notes whether the round that started at `started` reached fewer nodes than the quorum,
    /// and says whether the waiter steps out of line: at least [`STEP_OUT_ROUNDS`] such rounds
    /// in a row, the first of them a whole queue timeout ago.
    pub(crate) fn out_of_reach(&self, out_of_reach: bool, started: Instant) -> bool {
        let mut u = self.unreachable.lock().unwrap_or_else(|p| p.into_inner());
        let out = if out_of_reach {
            let (since, rounds) = u.get_or_insert((started, 0));
            *rounds += 1;
            *rounds >= STEP_OUT_ROUNDS && Instant::now().duration_since(*since) >= self.timeout
        } else {
            *u = None;
            false
        };
        self.out.store(out, Ordering::Release);
        out
    }

    /// Whether the last round stepped the waiter out of line (see [`Fair::out_of_reach`]).
    pub(crate) fn stepped_out(&self) -> bool {
        self.out.load(Ordering::Acquire)
    }

    /// The ticket by which this process ranks the waiter among its own fair waiters: a waiter
    /// out of line comes after every other (the wake-up of a release goes to one that can use
    /// it).
    pub(crate) fn rank(&self) -> u64 {
        if self.stepped_out() {
            u64::MAX
        } else {
            self.ticket()
        }
    }

    /// Notes a node's refusal: 0 = held, and this waiter is next; 1 = free, but earlier tickets
    /// wait; 2 = held, and earlier tickets wait.
    pub(crate) fn refused(&self, why: i64) {
        if why == 0 {
            self.next_on.fetch_add(1, Ordering::AcqRel);
        } else {
            self.behind.store(true, Ordering::Release);
        }
    }

    /// Whether a quorum of the last round's nodes had this waiter next in line (resets).
    pub(crate) fn is_next(&self, quorum: usize) -> bool {
        self.next_on.swap(0, Ordering::AcqRel) >= quorum
    }

    pub(crate) fn was_behind(&self) -> bool {
        self.behind.swap(false, Ordering::AcqRel)
    }

    pub(crate) fn ticket(&self) -> u64 {
        self.ticket.load(Ordering::Acquire)
    }

    pub(crate) fn saw_ticket(&self, ticket: i64) {
        if ticket > 0 {
            self.ticket.fetch_max(ticket as u64, Ordering::AcqRel);
        }
    }

    pub(crate) fn timeout_ms(&self) -> String {
        self.timeout.as_millis().max(1).to_string()
    }

    /// This round's fair acquire: the ticket known so far (0 in the first round).
    pub(crate) fn acquire_cmd(&self, req: &AcquireRequest) -> redis::Cmd {
        let n = req.keys.len().to_string();
        let mut keys = self.keys.clone();
        if req.fencing {
            keys.extend(req.keys.iter().map(|k| scripts::fence_key(k)));
        }
        let ttl_ms = req.ttl.as_millis().to_string();
        let flag = if req.fencing { "1" } else { "0" };
        let ticket = self.ticket().to_string();
        let clock = unix_micros().to_string();
        let timeout = self.timeout_ms();
        let mut args = vec![
            &req.token,
            ttl_ms.as_str(),
            timeout.as_str(),
            n.as_str(),
            flag,
            ticket.as_str(),
            clock.as_str(),
        ];
        let (limit, mark_ms);
        // Each script's own keys come after the queue's (and the fence counters).
        let script = match req.kind {
            Kind::Lock | Kind::Leader => &scripts::FAIR_ACQUIRE,
            // A fair lock of the lock key that leaves its mark, as a writer does.
            Kind::Write => {
                mark_ms = req.mark_ttl.as_millis().max(1).to_string();
                args.push(mark_ms.as_str());
                keys.push(scripts::writer_mark_key(&req.keys[0]));
                &scripts::FAIR_ACQUIRE
            }
            Kind::Read => {
                keys.push(scripts::readers_key(&req.keys[0]));
                keys.push(scripts::writer_mark_key(&req.keys[0]));
                &crate::rwlock::FAIR_READ_ACQUIRE
            }
            Kind::Permit { limit: l } => {
                limit = l.to_string();
                args.push(limit.as_str());
                keys.push(scripts::limit_key(&req.keys[0]));
                &scripts::SEM_FAIR_ACQUIRE
            }
        };
        scripts::evalsha(script, &keys, &args)
    }

    pub(crate) fn leave_cmd(&self, req: &AcquireRequest, mode: QueueOp) -> redis::Cmd {
        let n = req.keys.len().to_string();
        let ticket = self.ticket().to_string();
        let mode = match mode {
            QueueOp::Requeue => "requeue",
            QueueOp::Leave => "leave",
            QueueOp::Dequeue => "dequeue",
        };
        let mut keys = self.keys.clone();
        let kind = match req.kind {
            Kind::Lock | Kind::Leader => "lock",
            Kind::Permit { .. } => "permit",
            Kind::Read => {
                keys.push(scripts::readers_key(&req.keys[0]));
                "read"
            }
            Kind::Write => {
                keys.push(scripts::writer_mark_key(&req.keys[0]));
                "write"
            }
        };
        let timeout = self.timeout_ms();
        scripts::evalsha(
            &scripts::FAIR_LEAVE,
            &keys,
            &[&req.token, mode, &timeout, &n, &ticket, kind],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_dequeues_each_node_that_did_not_grant_exactly_once() {
        let late = LateReplies::new(5);
        // Node 2 answered "no" before the grant but unseen by the round; 3 and 4 are still out.
        assert!(!late.left_behind(2, false));
        let votes = [
            Vote::For,
            Vote::Against,
            Vote::Pending,
            Vote::Pending,
            Vote::Pending,
        ];
        assert_eq!(late.settle(&votes), vec![1, 2]);
        // The late replies: a grant needs nothing, a refusal is dequeued by its reply.
        assert!(!late.left_behind(3, true));
        assert!(late.left_behind(4, false));
        // A failed round's late replies dequeue nothing (its rollback covered them).
        let failed = LateReplies::new(2);
        assert!(!failed.left_behind(0, false) && !failed.left_behind(1, true));
    }

    #[test]
    fn a_fair_waiter_steps_out_only_after_rounds_out_of_reach_for_a_queue_timeout() {
        let timeout = Duration::from_millis(40);
        let fair = Fair::new(&["k".to_owned()], timeout);
        fair.saw_ticket(7);
        let t0 = Instant::now();
        // Rounds out of reach, but fewer than a queue timeout ago: the waiter keeps its place.
        assert!(!fair.out_of_reach(true, t0));
        assert!(!fair.out_of_reach(true, t0));
        assert!(!fair.out_of_reach(true, t0));
        assert!(!fair.stepped_out());
        assert_eq!(fair.rank(), 7);
        // A round that reaches a quorum starts the count again.
        assert!(!fair.out_of_reach(false, t0));
        std::thread::sleep(timeout);
        let t1 = Instant::now();
        assert!(!fair.out_of_reach(true, t1));
        std::thread::sleep(timeout);
        // Two rounds spanning the timeout are not enough: one slow round must not count.
        assert!(!fair.out_of_reach(true, Instant::now()));
        assert!(fair.out_of_reach(true, Instant::now()));
        assert!(fair.stepped_out());
        assert_eq!(fair.rank(), u64::MAX, "last of its process's line");
        // Back in reach: back in line with its ticket.
        assert!(!fair.out_of_reach(false, Instant::now()));
        assert!(!fair.stepped_out());
        assert_eq!(fair.rank(), 7);
    }
}
