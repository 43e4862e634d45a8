//! Read-write locks: the node scripts (`READ_ACQUIRE`, `READ_EXTEND`, `READ_RELEASE`,
//! `WRITE_ACQUIRE`, `WRITE_RELEASE` in core's `scripts/rwlock.rs`) as atomic steps of a node, and
//! which request each kind of client sends. Everything else — rounds, votes and their tally,
//! validity, quarantine, re-seating, rollbacks, the network and its faults — is the lock's, in
//! `model.rs`.
//!
//! On a node a read-write lock is three keys. The lock key K (`Node::holders`) holds a writer's
//! token, exactly as a plain lock's key does (a plain lock and a writer exclude each other), or
//! [`READERS`] while readers hold it, living at least as long as the longest read. The readers
//! (`Node::readers`) are a sorted set of tokens scored with each read's expiry. A refused
//! writer's mark (`Node::mark`) holds back new readers for `queue_timeout`. Every expiry is in
//! the node's own clock: a key may go up to `skew` early, each independently.

use super::{Action, Ans, Msg, Mutant, Node, Op, Redlock, State, Tick, Token};

/// The value K holds while readers hold it (`READERS_VALUE`): no token equals it.
pub const READERS: Token = Token::MAX;

/// What a client of the one resource asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// A plain lock of the same name (its key is K).
    Lock,
    /// The read side: shared with other readers.
    Read,
    /// The write side: excludes readers, writers and plain locks.
    Write,
}

/// A read-write lock's script on one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RwOp {
    /// `READ_ACQUIRE`: admitted unless a token holds K, or (for a token not reading yet) a
    /// writer's mark is there.
    Read(Token),
    /// `WRITE_ACQUIRE`: K set to the token when nothing holds it; granted or refused, the writer
    /// leaves (or renews) its mark unless another writer's is there.
    Write(Token),
    /// `READ_EXTEND`: renews a read still there unless a token holds K; with `reseat`, admits an
    /// absent one again (the mark does not stop it).
    ReadExtend { token: Token, reseat: bool },
    /// `READ_RELEASE`: the read goes; K then expires with the last read left, or goes with the
    /// last one (a release and a rollback alike; no reply needed).
    ReadRelease(Token),
    /// `WRITE_RELEASE` with release=1 (a release, or a writer that gives up): K if it holds the
    /// token, and the token's mark. The rollback of a failed round (release=0) is
    /// [`Op::Release`]: it keeps the mark, the writer still waits.
    WriteRelease(Token),
}

/// A step of a read-write lock's keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RwStep {
    /// A node's clock, ahead by up to `skew`, drops a read whose expiry is due.
    ExpireRead { node: u8, token: Token },
    /// A node's clock, ahead by up to `skew`, drops a writer's mark that is due.
    ExpireMark { node: u8 },
}

impl Node {
    /// The value of K, if it is set.
    fn key(&self) -> Option<Token> {
        self.holders.first().map(|h| h.0)
    }

    fn reads(&self, t: Token) -> bool {
        self.readers.iter().any(|r| r.0 == t)
    }

    /// The scripts' `hold(ttl)`: (re)admits the read until `now + ttl` and, unless `keep_key`,
    /// sets K to [`READERS`] for `ttl` when it would expire sooner (whatever it held).
    fn hold(&mut self, t: Token, until: Tick, keep_key: bool) {
        self.readers.retain(|r| r.0 != t);
        self.readers.push((t, until));
        self.readers.sort_unstable();
        if !keep_key && self.holders.first().is_none_or(|h| h.1 < until) {
            self.holders = vec![(READERS, until)];
        }
    }

    /// Drops the reads and the mark whose expiry passed (time moved to `now`).
    pub(super) fn expire_rw(&mut self, now: Tick) {
        self.readers.retain(|r| r.1 > now);
        self.mark = self.mark.filter(|m| m.1 > now);
    }
}

impl Redlock {
    /// What client `c` asks for.
    pub(super) fn role(&self, c: u8) -> Role {
        self.p
            .roles
            .get(usize::from(c))
            .copied()
            .unwrap_or(Role::Lock)
    }

    /// Whether clients `a` and `b` may not both be valid: only two reads may.
    pub(super) fn conflict(&self, a: u8, b: u8) -> bool {
        !(self.role(a) == Role::Read && self.role(b) == Role::Read)
    }

    /// The acquire request of client `c`.
    pub(super) fn acquire_op(&self, c: u8, token: Token) -> Op {
        match self.role(c) {
            Role::Lock => Op::Acquire(token),
            Role::Read => Op::Rw(RwOp::Read(token)),
            Role::Write => Op::Rw(RwOp::Write(token)),
        }
    }

    /// The extension request of client `c` (a writer's is a plain lock's: its key holds its
    /// token).
    pub(super) fn extend_op(&self, c: u8, token: Token, reseat: bool) -> Op {
        match self.role(c) {
            Role::Read => Op::Rw(RwOp::ReadExtend { token, reseat }),
            Role::Lock | Role::Write => Op::Extend { token, reseat },
        }
    }

    /// What undoes client `c`'s keys: a rollback, a lost lock's release, a re-seat taken back.
    /// A writer that gives up (`give_up`: its call failed) also takes its mark away.
    pub(super) fn undo_op(&self, c: u8, token: Token, give_up: bool) -> Op {
        match self.role(c) {
            Role::Read => Op::Rw(RwOp::ReadRelease(token)),
            Role::Write if give_up => Op::Rw(RwOp::WriteRelease(token)),
            Role::Lock | Role::Write => Op::Release(token),
        }
    }

    /// Whether one client's requests to one node run in the order they were sent, as they do on
    /// core's connection (one script call per request, so a rollback never overtakes the
    /// acquire it undoes): in a read-write lock's runs and an election's. (The plain lock's runs
    /// let the network reorder them; with a token per round, not per call, a reordered request
    /// only leaves a stale key behind. A read-write lock's call keeps its token, as core's does,
    /// and so does a campaign: a write-back must not overtake the rollback of its call's
    /// previous round.)
    fn ordered(&self) -> bool {
        !self.p.roles.is_empty() || self.p.election
    }

    /// Whether client `c` keeps its token from round to round of one acquire call: a fair
    /// waiter (its place in line) and a reader or writer (a writer's mark is its token).
    pub(super) fn keeps_token(&self, c: u8) -> bool {
        self.p.fair || matches!(self.role(c), Role::Read | Role::Write)
    }

    /// Where a request stands on its connection, when its connection keeps order: its round,
    /// then a request before the release or rollback that undoes it.
    pub(super) fn conn_order(&self, m: &Msg) -> Option<(u8, u8)> {
        m.op.fair_order(m.round).or_else(|| {
            self.ordered()
                .then_some((m.round, u8::from(!m.op.replies())))
        })
    }

    /// A holder's release, on every node at once (a slower node only keeps the keys longer, as
    /// a later release would). On an ordered connection the requests still out run first; the
    /// client comes back a tick later at the earliest (a reader that keeps coming, in the
    /// liveness run).
    pub(super) fn release_now(&self, s: &mut State, c: u8, token: Token) {
        if self.ordered() {
            s.clients[usize::from(c)].next_try = s.now + 1;
            let mut out: Vec<Msg> = s.net.iter().filter(|m| m.client == c).copied().collect();
            out.sort_by_key(|m| self.conn_order(m));
            for m in out {
                s.take(&m);
                let answer = self.on_request(s, m);
                // A campaign's late refusal is dequeued behind it, as its late reply would be.
                let refused = !matches!(answer, Some((Ans::Fair { granted: true, .. }, ..)));
                if let (
                    Op::FairAcquire {
                        token, late: true, ..
                    },
                    true,
                ) = (m.op, refused)
                {
                    s.nodes[usize::from(m.node)].dequeue(token);
                }
            }
        }
        let now = s.now;
        for nd in &mut s.nodes {
            match self.role(c) {
                Role::Lock if self.p.election => self.resign_on(nd, token),
                Role::Lock => nd.holders.retain(|h| h.0 != token),
                Role::Read => self.read_release(nd, token, now),
                Role::Write => write_release(nd, token),
            }
        }
    }

    /// `READ_RELEASE`: the read goes; if K holds [`READERS`], it expires with the last read left
    /// or goes with the last one.
    fn read_release(&self, nd: &mut Node, t: Token, now: Tick) {
        nd.readers.retain(|r| r.0 != t);
        if nd.key() != Some(READERS) {
            return;
        }
        let last = nd.readers.iter().map(|r| r.1).max();
        match last {
            Some(until) if !self.is(Mutant::ReadReleaseDropsKey) => {
                nd.holders = vec![(READERS, until.max(now + 1))];
            }
            _ => nd.holders.clear(),
        }
    }

    /// Runs a read-write script on its node; the answer (none for a release), with the node's
    /// start and promotion.
    pub(super) fn rw_request(
        &self,
        s: &mut State,
        node: u8,
        op: RwOp,
    ) -> Option<(Ans, Tick, Tick)> {
        let now = s.now;
        let (ttl, qt) = (self.p.ttl, self.p.queue_timeout);
        let nd = &mut s.nodes[usize::from(node)];
        // A writer's token (or a plain lock's) under K.
        let written = nd.key().is_some_and(|v| v != READERS);
        let ans = match op {
            RwOp::Read(t) => {
                let waits = !nd.reads(t) && nd.mark.is_some() && !self.is(Mutant::ReadIgnoresMark);
                if (written && !self.is(Mutant::ReadUnderWriter)) || waits {
                    Ans::No
                } else {
                    nd.hold(t, now + ttl, false);
                    Ans::Yes(nd.counter)
                }
            }
            RwOp::Write(t) => {
                let free = match nd.key() {
                    None => true,
                    Some(v) => v == t || (v == READERS && self.is(Mutant::WriteOverReaders)),
                };
                // Granted or refused, the writer leaves (or renews) its mark, unless another
                // writer's is there (its release or giving up takes it away).
                if nd.mark.is_none_or(|m| m.0 == t) {
                    nd.mark = Some((t, now + qt));
                }
                if free {
                    nd.holders = vec![(t, now + ttl)];
                    Ans::Yes(nd.counter)
                } else {
                    Ans::No
                }
            }
            RwOp::ReadExtend { token, reseat } => {
                let keep_key = self.is(Mutant::ReadExtendKeepsKey);
                if written {
                    Ans::No
                } else if nd.reads(token) {
                    nd.hold(token, now + ttl, keep_key);
                    Ans::Yes(0)
                } else if reseat {
                    nd.hold(token, now + ttl, keep_key);
                    Ans::Reseated
                } else {
                    Ans::No
                }
            }
            RwOp::ReadRelease(t) => {
                self.read_release(nd, t, now);
                return None;
            }
            RwOp::WriteRelease(t) => {
                write_release(nd, t);
                return None;
            }
        };
        Some((ans, nd.started, nd.promoted))
    }

    /// The early expiries of reads and marks that a node's clock, ahead by up to `skew`, may
    /// already see due.
    pub(super) fn rw_actions(&self, s: &State, out: &mut Vec<Action>) {
        for (i, nd) in s.nodes.iter().enumerate() {
            let node = i as u8;
            for &(token, until) in &nd.readers {
                if s.now >= until - self.p.skew {
                    out.push(Action::Rw(RwStep::ExpireRead { node, token }));
                }
            }
            if nd.mark.is_some_and(|m| s.now >= m.1 - self.p.skew) {
                out.push(Action::Rw(RwStep::ExpireMark { node }));
            }
        }
    }

    /// Runs a [`RwStep`].
    pub(super) fn rw_step(&self, s: &mut State, step: RwStep) {
        match step {
            RwStep::ExpireRead { node, token } => {
                s.nodes[usize::from(node)].readers.retain(|r| r.0 != token);
            }
            RwStep::ExpireMark { node } => s.nodes[usize::from(node)].mark = None,
        }
    }
}

/// `WRITE_RELEASE` with release=1: K if it holds the token, and the token's mark.
fn write_release(nd: &mut Node, t: Token) {
    nd.holders.retain(|h| h.0 != t);
    if nd.mark.is_some_and(|m| m.0 == t) {
        nd.mark = None;
    }
}
