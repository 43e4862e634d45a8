//! The protocol as a state machine: clients and nodes are actors that exchange messages over a
//! network that loses, duplicates, delays and reorders them; nodes crash and restart with or
//! without their data, or change master (failover); time moves in ticks and each node's expiry
//! clock may run ahead of true time by up to `skew` ticks.
//!
//! Every number the protocol computes — quorum, a semaphore's quorum, drift, validity, the restart
//! quarantine and the fence — comes from `ironlock` itself (`ms` turns ticks into the
//! milliseconds its functions take). A tick is one millisecond to core.
//!
//! The model is built to grow: a lock is a semaphore with limit 1 here, and the node's admission
//! rule (`Node::admits`) is the one place an election (a semaphore of one whose fence is the
//! term) would plug in. A read-write lock gives each client a [`Role`]: its node scripts live in
//! `model/rw.rs` (the fair queue's in `model/fair.rs`), and its rounds, tally, validity and
//! exclusion check are the lock's, two reads being the one pair of holders that do not conflict.
//! An election is a fair, fenced lock whose fence is the term: its leader record, proclaims,
//! `leader()` read and leader properties live in `model/election.rs`.

mod election;
mod fair;
mod rw;
mod symmetry;

pub use election::{ElectionOp, ElectionStep, Record};
pub use fair::{Entry, QueueMode};
pub use rw::{Role, RwOp, RwStep};
pub use symmetry::canonical;

use std::fmt;
use std::time::Duration;

use stateright::{Model, Property};

/// A tick of model time.
pub type Tick = i16;

/// A safety mechanism switched off or weakened. The checker must find a counterexample for each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// A restarted node's "yes" counts at once (`restart_quarantine` off).
    NoQuarantine,
    /// An extension re-seats its key on every node where it is absent, not only on nodes whose
    /// `run_id` changed since the lock was seated there.
    ReseatWithoutRunIdCheck,
    /// A re-seat on a node still in quarantine counts as a vote.
    ReseatInQuarantineCounts,
    /// A semaphore takes a plain majority, not Q(limit).
    SemaphoreMajority,
    /// No drift allowance: validity = ttl − elapsed.
    DriftZero,
    /// The fence is computed but not written back to a quorum before the grant.
    FenceWithoutWriteBack,
    /// A master promoted from a replica counts at once (only restarts are quarantined).
    FailoverRuleOff,
    /// An extension a quorum confirms only after the lock's deadline still counts: the lock
    /// comes back to life (core's extend before the model found it).
    LapsedExtensionCounts,
    /// A fair acquire reads the head of the line without first dropping the entries whose
    /// heartbeat stopped: a dead waiter's entry goes only with the whole queue key, which the
    /// live waiters' heartbeats keep alive.
    FairNoSweep,
    /// A fair acquire lets any waiter in line take a free key, whatever its place (membership
    /// checked instead of the head).
    FairOrderIgnored,
    /// A new ticket is the client's clock alone, not above the node's ticket counter: a later
    /// waiter whose clock is behind gets an earlier ticket.
    FairTicketFromClock,
    /// `READ_ACQUIRE` admits a reader even when a writer's token is under the lock key.
    ReadUnderWriter,
    /// `WRITE_ACQUIRE` takes the lock key when only readers hold it (the readers' marker counts
    /// as free).
    WriteOverReaders,
    /// `READ_RELEASE` deletes the lock key even when other readers remain.
    ReadReleaseDropsKey,
    /// `READ_EXTEND` renews the reader's entry but not the lock key's expiry.
    ReadExtendKeepsKey,
    /// `READ_ACQUIRE` admits a new reader while a waiting writer's mark is there (no writer
    /// preference): readers that keep coming starve the writer.
    ReadIgnoresMark,
    /// An election's term is granted without its write-back to a quorum: a node that restarts
    /// empty hands a later candidate a counter below the last term.
    TermWithoutWriteBack,
    /// A leadership (its grant, extensions and write-back) counts one vote fewer than a
    /// majority.
    LeaderMinority,
    /// A resignation deletes the election's key whatever token it holds.
    ResignDeletesForeignKey,
    /// `leader()` reports a token that any one answering node holds, not a quorum of them.
    ReadFromMinority,
    /// A campaign takes a free key whatever its place in line (the queue is not consulted).
    CampaignSkipsLine,
    /// A leader's extension counts its new validity from when the round was decided, not from
    /// when it started: a late reply keeps the leader believing past its keys.
    LeaderValidityFromReply,
}

impl Mutant {
    /// Every mutant, in report order.
    pub const ALL: [Mutant; 22] = [
        Mutant::NoQuarantine,
        Mutant::ReseatWithoutRunIdCheck,
        Mutant::ReseatInQuarantineCounts,
        Mutant::SemaphoreMajority,
        Mutant::DriftZero,
        Mutant::FenceWithoutWriteBack,
        Mutant::FailoverRuleOff,
        Mutant::LapsedExtensionCounts,
        Mutant::FairNoSweep,
        Mutant::FairOrderIgnored,
        Mutant::FairTicketFromClock,
        Mutant::ReadUnderWriter,
        Mutant::WriteOverReaders,
        Mutant::ReadReleaseDropsKey,
        Mutant::ReadExtendKeepsKey,
        Mutant::ReadIgnoresMark,
        Mutant::TermWithoutWriteBack,
        Mutant::LeaderMinority,
        Mutant::ResignDeletesForeignKey,
        Mutant::ReadFromMinority,
        Mutant::CampaignSkipsLine,
        Mutant::LeaderValidityFromReply,
    ];

    /// The name `scripts/verify` prints.
    pub fn name(self) -> &'static str {
        match self {
            Mutant::NoQuarantine => "no-restart-quarantine",
            Mutant::ReseatWithoutRunIdCheck => "reseat-without-run-id-check",
            Mutant::ReseatInQuarantineCounts => "reseat-in-quarantine-counts",
            Mutant::SemaphoreMajority => "semaphore-majority-quorum",
            Mutant::DriftZero => "drift-allowance-0",
            Mutant::FenceWithoutWriteBack => "fence-without-write-back",
            Mutant::FailoverRuleOff => "failover-rule-off",
            Mutant::LapsedExtensionCounts => "lapsed-extension-counts",
            Mutant::FairNoSweep => "fair-dead-entry-blocks",
            Mutant::FairOrderIgnored => "fair-ticket-order-ignored",
            Mutant::FairTicketFromClock => "fair-ticket-from-clock",
            Mutant::ReadUnderWriter => "read-admitted-under-writer",
            Mutant::WriteOverReaders => "write-ignores-readers",
            Mutant::ReadReleaseDropsKey => "read-release-drops-key",
            Mutant::ReadExtendKeepsKey => "read-extend-keeps-key-ttl",
            Mutant::ReadIgnoresMark => "read-ignores-writer-mark",
            Mutant::TermWithoutWriteBack => "term-without-write-back",
            Mutant::LeaderMinority => "leader-by-minority",
            Mutant::ResignDeletesForeignKey => "resign-deletes-foreign-key",
            Mutant::ReadFromMinority => "leader-read-from-minority",
            Mutant::CampaignSkipsLine => "campaign-skips-line",
            Mutant::LeaderValidityFromReply => "leader-validity-from-reply",
        }
    }
}

/// One configuration of the model: sizes, times in ticks, fault budgets.
#[derive(Clone, Debug)]
pub struct Params {
    /// Name printed in reports.
    pub name: &'static str,
    /// Voters (N).
    pub nodes: u8,
    /// Clients contending for the one resource.
    pub clients: u8,
    /// Permits (1: a lock).
    pub limit: u32,
    /// ttl of every acquire and extend, and `max_ttl`.
    pub ttl: Tick,
    /// How far a node's expiry clock may run ahead of true time (the drift bound); also the
    /// client's `drift_constant` (drift factor 0: ticks are too coarse for a fraction).
    pub skew: Tick,
    /// A round's deadline after its requests left (`node_timeout`).
    pub node_timeout: Tick,
    /// How far a client's wall clock (the fence's floor) may be ahead of another's.
    pub wall_skew: Tick,
    /// Time horizon.
    pub max_time: Tick,
    /// Node restarts (each with or without its data).
    pub restarts: u8,
    /// Failovers (master changes that lose unreplicated data, counters included).
    pub failovers: u8,
    /// Messages lost.
    pub losses: u8,
    /// Messages duplicated.
    pub dups: u8,
    /// Acquire rounds per client.
    pub attempts: u8,
    /// Extensions per client.
    pub extends: u8,
    /// Acquire with fencing.
    pub fencing: bool,
    /// Every acquire is fair: it waits in line (a ticket and a heartbeat per node).
    pub fair: bool,
    /// How long a fair waiter's queue entry outlives its last heartbeat (`queue_timeout`).
    pub queue_timeout: Tick,
    /// Clients that die silently (they stop, their keys and queue entries stay behind).
    pub crashes: u8,
    /// Check that a client is granted by the end (faults bounded; rounds are taken at once).
    pub liveness: bool,
    /// A read-write lock: what each client asks for (empty: every client takes the plain lock).
    pub roles: &'static [Role],
    /// An election: every client is a candidate (a fair, fenced acquire whose fence is the
    /// term, with the leader record).
    pub election: bool,
    /// Proclaims per leader.
    pub proclaims: u8,
    /// The mechanism switched off, if any.
    pub mutant: Option<Mutant>,
}

/// Ticks as the durations core's arithmetic takes.
fn ms(t: Tick) -> Duration {
    Duration::from_millis(t.max(0) as u64)
}

fn ticks(d: Duration) -> Tick {
    d.as_millis() as Tick
}

/// The model: parameters and what they derive through core.
#[derive(Clone, Debug)]
pub struct Redlock {
    /// The configuration.
    pub p: Params,
    /// Quorum of a grant or extension.
    pub q: usize,
    /// drift(ttl), by core.
    pub drift: Tick,
    /// Restart / failover quarantine, by core.
    pub quarantine: Tick,
}

impl Redlock {
    /// Derives quorum, drift and quarantine from core.
    pub fn new(p: Params) -> Self {
        assert!(
            !p.fair || (p.limit == 1 && p.fencing == p.election),
            "the fair queue is modelled for a lock, fenced only in an election"
        );
        assert!(
            !p.election || (p.fair && p.roles.is_empty()),
            "an election is a fair, fenced lock"
        );
        assert!(
            p.roles.is_empty()
                || (p.roles.len() == usize::from(p.clients)
                    && p.limit == 1
                    && !p.fencing
                    && !p.fair),
            "read-write locks are modelled with a role per client, without fencing or fair queues"
        );
        let n = usize::from(p.nodes);
        let q = if p.mutant == Some(Mutant::LeaderMinority) {
            ironlock::quorum(n) - 1
        } else if p.limit == 1 || p.mutant == Some(Mutant::SemaphoreMajority) {
            ironlock::quorum(n)
        } else {
            ironlock::semaphore_quorum(n, p.limit)
        };
        let constant = if p.mutant == Some(Mutant::DriftZero) {
            0
        } else {
            p.skew
        };
        let drift = ticks(ironlock::drift(ms(p.ttl), 0.0, ms(constant)));
        // The quarantine always allows for the real drift (the mutant weakens only validity);
        // the uptime a node reports is exact here, so its resolution is one tick.
        let real_drift = ironlock::drift(ms(p.ttl), 0.0, ms(p.skew));
        let quarantine = ticks(ironlock::restart_quarantine(ms(p.ttl), real_drift, ms(1)));
        Redlock {
            p,
            q,
            drift,
            quarantine,
        }
    }

    fn is(&self, m: Mutant) -> bool {
        self.p.mutant == Some(m)
    }

    /// Core's validity of a round that started at `t1` and is decided `now`.
    fn validity(&self, t1: Tick, now: Tick) -> bool {
        ironlock::validity(ms(self.p.ttl), ms(now - t1), ms(self.drift)).is_some()
    }

    /// Whether a client counts a "yes" from a node with this history, now.
    fn eligible(&self, now: Tick, started: Tick, promoted: Tick) -> bool {
        if self.is(Mutant::NoQuarantine) {
            return true;
        }
        let restart_ok = now - started >= self.quarantine;
        let failover_ok = self.is(Mutant::FailoverRuleOff) || now - promoted >= self.quarantine;
        restart_ok && failover_ok
    }

    fn wall(&self, client: u8, now: Tick) -> u64 {
        // Client 0's wall clock is ahead of the others' by wall_skew.
        let ahead = if client == 0 { self.p.wall_skew } else { 0 };
        (now + ahead).max(0) as u64 + 1
    }
}

/// A token: the client and its attempt.
pub type Token = u8;

fn token_of(client: u8, seq: u8) -> Token {
    client * 16 + seq
}

fn token_client(t: Token) -> u8 {
    t / 16
}

/// One node (a voter).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Node {
    /// `run_id` (changes on restart and on failover).
    pub run: u8,
    /// When this server started (its uptime's origin).
    pub started: Tick,
    /// When its master was promoted (failover); long ago at first.
    pub promoted: Tick,
    /// Holders of the resource: token and true-time expiry (at most `limit`).
    pub holders: Vec<(Token, Tick)>,
    /// The fence counter of the resource (never expires).
    pub counter: u64,
    /// The fair queue: entries (ticket, token, true-time heartbeat deadline), lowest first.
    pub queue: Vec<Entry>,
    /// The ticket counter: the largest ticket handed out while the queue keys lived.
    pub tickets: u64,
    /// When the queue keys (queue, heartbeats, counter) expire: a join only lengthens it.
    pub queue_until: Tick,
    /// A read-write lock's readers: token and true-time expiry, by token.
    pub readers: Vec<(Token, Tick)>,
    /// A waiting writer's mark: its token and true-time expiry.
    pub mark: Option<(Token, Tick)>,
    /// An election's leader record.
    pub record: Option<Record>,
}

impl Node {
    fn holds(&self, t: Token) -> bool {
        self.holders.iter().any(|&(h, _)| h == t)
    }

    /// The admission rule: a lock's key is free, or a semaphore has a seat left.
    fn admits(&self, limit: u32) -> bool {
        self.holders.len() < limit as usize
    }

    fn add(&mut self, t: Token, exp: Tick) {
        self.holders.push((t, exp));
        self.holders.sort_unstable();
    }

    /// A restart without persistence, or a failover: every key and counter is gone.
    fn lose_data(&mut self) {
        self.holders.clear();
        self.counter = 0;
        self.queue.clear();
        self.tickets = 0;
        self.readers.clear();
        self.mark = None;
        self.record = None;
    }
}

/// What a client asks of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// SET NX PX ttl (or a semaphore seat), returning the fence counter.
    Acquire(Token),
    /// PEXPIRE if still mine; with `reseat`, SET NX PX where absent.
    Extend { token: Token, reseat: bool },
    /// counter = max(counter, f) where the key still holds my token.
    Fence { token: Token, f: u64 },
    /// Compare-and-delete (no reply needed).
    Release(Token),
    /// The fair acquire script, with the ticket known so far (0: take one here, at least
    /// `clock`, the client's wall clock); `late` once its round was granted without it (a
    /// refusal, or no reply, then dequeues there).
    FairAcquire {
        token: Token,
        ticket: u64,
        clock: u64,
        late: bool,
    },
    /// The fair leave script (no reply needed).
    Queue {
        token: Token,
        mode: QueueMode,
        ticket: u64,
    },
    /// A read-write lock's script.
    Rw(RwOp),
    /// An election's script (no reply needed).
    Election(ElectionOp),
}

impl Op {
    /// Whether the client waits for an answer (a release does not: losing its reply is the
    /// same as delivering it late).
    fn replies(self) -> bool {
        !matches!(
            self,
            Op::Release(_)
                | Op::Queue { .. }
                | Op::Election(_)
                | Op::Rw(RwOp::ReadRelease(_) | RwOp::WriteRelease(_))
        )
    }

    /// Where a fair script stands among one client's fair scripts to one node (they share a
    /// connection, so they run in the order they were sent): its round, acquire before the leave
    /// scripts of that round. `None` for the other requests.
    fn fair_order(self, round: u8) -> Option<(u8, u8)> {
        match self {
            Op::FairAcquire { .. } => Some((round, 0)),
            Op::Queue { .. } => Some((round, 1)),
            _ => None,
        }
    }
}

/// A node's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ans {
    /// Done, with the fence counter (acquire).
    Yes(u64),
    /// Extend: written back after a restart.
    Reseated,
    /// Refused.
    No,
    /// The fair acquire script: granted or not, the ticket it saw (0: none taken), and the
    /// fence counter where it granted.
    Fair {
        granted: bool,
        ticket: u64,
        counter: u64,
    },
}

/// A request in flight, on the connection to one run of a node (lost if the node restarted).
/// Its reply reaches the client when the node runs it, or is lost ([`Action::LoseReply`]):
/// a late reply only makes a round decide later, which validity already pays for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Msg {
    /// Node.
    pub node: u8,
    /// The run the connection was made to.
    pub run: u8,
    /// Sender.
    pub client: u8,
    /// The sender's round.
    pub round: u8,
    /// The request.
    pub op: Op,
}

/// Votes of a round, as core's round engine counts them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tally {
    /// Counted "yes" (eligible), by node bit.
    pub yes: u8,
    /// Answered "yes" but not counted (quarantine), by node bit.
    pub not_eligible: u8,
    /// Refusals, by node bit.
    pub no: u8,
    /// Largest counter among counted "yes".
    pub max_counter: u64,
}

impl Tally {
    fn answered(&self) -> u32 {
        (self.yes | self.not_eligible | self.no).count_ones()
    }
}

/// Where a client is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Between rounds (holding or not).
    Idle,
    /// Acquire round out.
    Acquire {
        /// Its token.
        token: Token,
        /// Monotonic start.
        t1: Tick,
        /// Votes.
        tally: Tally,
        /// Each node's run when the requests left (the seats if granted).
        runs: Vec<u8>,
    },
    /// Fence write-back round out.
    Fence {
        /// Token.
        token: Token,
        /// The acquire's start (validity counts from it).
        t1: Tick,
        /// This round's start (its timeout).
        sent: Tick,
        /// The fence.
        f: u64,
        /// Votes.
        tally: Tally,
        /// Seats.
        runs: Vec<u8>,
        /// A fair acquire's round: its number, its counted "yes" and its refusals, by node bit
        /// (the line is left, or kept, once the write-back is decided).
        acquired: (u8, u8, u8),
    },
    /// Extension round out.
    Extend {
        /// Start.
        t1: Tick,
        /// Votes.
        tally: Tally,
        /// Runs when sent.
        runs: Vec<u8>,
        /// Nodes asked to re-seat, by bit.
        reseat: u8,
    },
}

/// A lock (or permit) a client holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Held {
    /// Token.
    pub token: Token,
    /// Validity deadline (true time = the client's monotonic clock).
    pub deadline: Tick,
    /// Fence (0 without fencing).
    pub fence: u64,
    /// Per node, the run it was last seated on.
    pub seats: Vec<u8>,
}

/// One client.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// Round state.
    pub phase: Phase,
    /// Current round number (replies of other rounds are ignored).
    pub round: u8,
    /// Acquire rounds left.
    pub attempts: u8,
    /// Extensions left.
    pub extends: u8,
    /// Tokens used.
    pub seq: u8,
    /// Earliest next acquire (retry delay).
    pub next_try: Tick,
    /// What it holds.
    pub held: Option<Held>,
    /// Another client was granted since this one's grant (its validity must never come back).
    pub superseded: bool,
    /// A fair acquire call is in progress (its token waits in line between rounds).
    pub in_line: bool,
    /// The largest ticket a node handed this fair waiter (0: none yet).
    pub ticket: u64,
    /// Granted at least once.
    pub served: bool,
    /// Died silently.
    pub crashed: bool,
    /// Proclaims left (an election's leader).
    pub proclaims: u8,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// True time.
    pub now: Tick,
    /// Voters.
    pub nodes: Vec<Node>,
    /// Clients.
    pub clients: Vec<Client>,
    /// Messages in flight (a sorted multiset).
    pub net: Vec<Msg>,
    /// Fault budgets left: restarts, failovers, losses, duplicates, client crashes.
    pub budget: [u8; 5],
    /// Largest fence granted so far.
    pub max_fence: u64,
    /// Some client was granted.
    pub granted_ever: bool,
    /// Violations seen (ghost state for the properties).
    pub exclusion_broken: bool,
    /// A grant's fence was not above every earlier grant's.
    pub fence_regressed: bool,
    /// A node let a fair waiter take the key while an earlier live ticket waited there.
    pub order_broken: bool,
    /// A node handed out a new ticket not above every live ticket in its line.
    pub ticket_broken: bool,
    /// The last heartbeat that expired while its waiter was still in line: (node, client,
    /// ticket); cleared when that waiter joins that node again.
    pub lapse: Option<(u8, u8, u64)>,
    /// The corner: a node let a later ticket take the key after an earlier waiter, still in line,
    /// lost its entry there to heartbeat expiry.
    pub corner: bool,
    /// A leader was granted without a quorum holding its key and its term.
    pub grant_unbacked: bool,
}

/// A step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Time moves on one tick (expiry, round timeouts).
    Tick,
    /// A request arrives and runs; its reply reaches the client.
    Deliver(Msg),
    /// A request arrives and runs; its reply is lost.
    LoseReply(Msg),
    /// A message is duplicated.
    Duplicate(Msg),
    /// A node's clock, ahead by up to `skew`, expires a holder early.
    ExpireEarly { node: u8, token: Token },
    /// kill -9 and restart, with (`persist`) or without the data.
    Restart { node: u8, persist: bool },
    /// The voter's master changes to a replica that lacks recent writes.
    Failover { node: u8 },
    /// A client starts an acquire round.
    Acquire { client: u8 },
    /// A holder starts an extension (only while valid).
    Extend { client: u8 },
    /// A holder releases.
    Release { client: u8 },
    /// A node's clock, ahead by up to `skew`, drops a queue entry whose heartbeat is due.
    ExpireEntry { node: u8, token: Token },
    /// A fair waiter gives up between rounds (its deadline, or a cancellation): it leaves the
    /// line on every node.
    Cancel { client: u8 },
    /// A client dies silently: its keys and queue entries stay until they expire.
    Crash { client: u8 },
    /// A read-write lock's keys expire.
    Rw(RwStep),
    /// An election's step.
    Election(ElectionStep),
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (verb, m) = match self {
            Action::Deliver(m) => ("deliver", m),
            Action::LoseReply(m) => ("deliver, reply lost:", m),
            Action::Duplicate(m) => ("duplicate", m),
            other => return write!(f, "{other:?}"),
        };
        write!(
            f,
            "{verb} c{}→n{} (run {}) {:?}",
            m.client, m.node, m.run, m.op
        )
    }
}

impl State {
    fn valid(&self, c: usize) -> bool {
        self.clients[c]
            .held
            .as_ref()
            .is_some_and(|h| self.now < h.deadline)
    }

    fn send(&mut self, m: Msg) {
        let at = self.net.partition_point(|x| *x < m);
        self.net.insert(at, m);
    }

    fn take(&mut self, m: &Msg) -> bool {
        match self.net.binary_search(m) {
            Ok(i) => {
                self.net.remove(i);
                true
            }
            Err(_) => false,
        }
    }

    /// Drops what can no longer matter: replies to rounds that are over, requests on a
    /// connection to a run that is gone. (Their delivery would change nothing.)
    fn prune(&mut self) {
        let nodes = &self.nodes;
        self.net.retain(|m| nodes[m.node as usize].run == m.run);
    }
}

impl Redlock {
    fn broadcast(&self, s: &mut State, client: u8, op: impl Fn(usize) -> Option<Op>) {
        let round = s.clients[client as usize].round;
        for i in 0..s.nodes.len() {
            if let Some(op) = op(i) {
                let run = s.nodes[i].run;
                s.send(Msg {
                    node: i as u8,
                    run,
                    client,
                    round,
                    op,
                });
            }
        }
    }

    /// Rolls back an acquire everywhere (a release to every node).
    fn rollback(&self, s: &mut State, c: u8, token: Token, refused: u8) {
        let op = self.undo_op(c, token, s.clients[c as usize].attempts == 0);
        // A writer that gives up takes its mark away everywhere, refusing nodes included.
        let everywhere = matches!(op, Op::Rw(RwOp::WriteRelease(_)));
        self.broadcast(s, c, |i| {
            (everywhere || refused & (1 << i) == 0).then_some(op)
        });
        let cl = &mut s.clients[c as usize];
        cl.phase = Phase::Idle;
        cl.next_try = s.now + 1;
        cl.in_line &= cl.attempts > 0;
    }

    /// The grant: checks exclusion and fence order on the ghost state.
    fn grant(&self, s: &mut State, c: u8, token: Token, t1: Tick, fence: u64, runs: Vec<u8>) {
        let others_valid = (0..s.clients.len())
            .filter(|&o| o != c as usize && s.valid(o) && self.conflict(c, o as u8))
            .count();
        if others_valid >= self.p.limit as usize {
            s.exclusion_broken = true;
        }
        if self.p.limit == 1 {
            for (o, cl) in s.clients.iter_mut().enumerate() {
                if o != c as usize && cl.held.is_some() && self.conflict(c, o as u8) {
                    cl.superseded = true;
                }
            }
            if self.p.fencing {
                if fence <= s.max_fence {
                    s.fence_regressed = true;
                }
                s.max_fence = s.max_fence.max(fence);
            }
            self.check_grant(s, token, fence);
        }
        s.granted_ever = true;
        let cl = &mut s.clients[c as usize];
        cl.phase = Phase::Idle;
        cl.superseded = false;
        cl.in_line = false;
        cl.served |= self.p.liveness;
        cl.held = Some(Held {
            token,
            deadline: t1 + self.p.ttl - self.drift,
            fence,
            seats: runs,
        });
    }

    /// Decides a round once it can be decided (`timed_out`: its deadline passed).
    fn decide(&self, s: &mut State, c: u8, timed_out: bool) {
        let n = s.nodes.len() as u32;
        let q = self.q as u32;
        let now = s.now;
        let phase = s.clients[c as usize].phase.clone();
        let verdict = |t: &Tally| -> Option<bool> {
            let refused = t.no.count_ones();
            let failed = t.not_eligible.count_ones();
            if t.yes.count_ones() >= q {
                Some(true)
            } else if timed_out || t.answered() == n || (n - refused - failed < q && refused > 0) {
                Some(false)
            } else {
                None
            }
        };
        match phase {
            Phase::Idle => {}
            Phase::Acquire {
                token,
                t1,
                tally,
                runs,
            } => match verdict(&tally) {
                None => {}
                Some(true) if self.validity(t1, now) => {
                    let round = s.clients[c as usize].round;
                    let f = ironlock::fence(tally.max_counter, self.wall(c, now));
                    let unwritten = self.is(Mutant::FenceWithoutWriteBack)
                        || self.is(Mutant::TermWithoutWriteBack);
                    if !self.p.fencing || unwritten {
                        if self.p.fair {
                            self.fair_granted(s, c, token, tally.yes, round);
                        }
                        let f = if self.p.fencing { f } else { 0 };
                        self.grant(s, c, token, t1, f, runs);
                        return;
                    }
                    let cl = &mut s.clients[c as usize];
                    cl.round += 1;
                    cl.phase = Phase::Fence {
                        token,
                        t1,
                        sent: now,
                        f,
                        tally: Tally::default(),
                        runs,
                        acquired: (round, tally.yes, tally.no),
                    };
                    self.broadcast(s, c, |_| Some(Op::Fence { token, f }));
                }
                Some(_) if self.p.fair => self.fair_rollback(s, c, token, tally.no),
                Some(_) => self.rollback(s, c, token, tally.no),
            },
            Phase::Fence {
                token,
                t1,
                f,
                tally,
                runs,
                acquired: (round, yes, refused),
                ..
            } => match verdict(&tally) {
                None => {}
                Some(true) if self.validity(t1, now) => {
                    // A fair waiter leaves the line once its grant is decided, write-back
                    // included; a failed write-back keeps its place, as a failed round does.
                    if self.p.fair {
                        self.fair_granted(s, c, token, yes, round);
                    }
                    self.grant(s, c, token, t1, f, runs);
                }
                Some(_) if self.p.fair => self.fair_rollback(s, c, token, refused),
                Some(_) => self.rollback(s, c, token, tally.no),
            },
            Phase::Extend {
                t1,
                tally,
                runs,
                reseat,
            } => {
                let Some(ok) = verdict(&tally) else { return };
                let others_valid = (0..s.clients.len())
                    .filter(|&o| o != c as usize && s.valid(o) && self.conflict(c, o as u8))
                    .count();
                let cl = &mut s.clients[c as usize];
                let held = cl.held.as_mut().expect("extending without a lock");
                let undo = self.undo_op(c, held.token, false);
                cl.phase = Phase::Idle;
                // A lock whose deadline passed before its extension was decided may have been
                // granted to another meanwhile: it is lost, whatever the votes say.
                let lapsed =
                    now >= held.deadline && self.p.mutant != Some(Mutant::LapsedExtensionCounts);
                if ok && self.validity(t1, now) && !lapsed {
                    // Valid again from t1: nobody else may have been granted meanwhile.
                    if others_valid >= self.p.limit as usize || (self.p.limit == 1 && cl.superseded)
                    {
                        s.exclusion_broken = true;
                    }
                    let from = if self.is(Mutant::LeaderValidityFromReply) {
                        now
                    } else {
                        t1
                    };
                    held.deadline = from + self.p.ttl - self.drift;
                    let answered_yes = tally.yes | tally.not_eligible;
                    for (i, seat) in held.seats.iter_mut().enumerate() {
                        if answered_yes & (1 << i) != 0 {
                            *seat = runs[i];
                        }
                    }
                    return;
                }
                // Failed: take back the re-seats (every re-seated node that did not refuse).
                let lost = n - tally.no.count_ones() < q || lapsed;
                if lost {
                    cl.held = None;
                }
                let back = reseat & !tally.no;
                if lost {
                    self.broadcast(s, c, |_| Some(undo));
                } else {
                    self.broadcast(s, c, |i| (back & (1 << i) != 0).then_some(undo));
                }
            }
        }
    }

    /// Runs a request on its node; the answer, with the node's run, start and promotion.
    fn on_request(&self, s: &mut State, m: Msg) -> Option<(Ans, Tick, Tick)> {
        let Msg { node, op, .. } = m;
        match op {
            Op::FairAcquire {
                token,
                ticket,
                clock,
                ..
            } => {
                let ans = self.fair_acquire(s, node, token, ticket, clock);
                let nd = &s.nodes[node as usize];
                return Some((ans, nd.started, nd.promoted));
            }
            Op::Queue {
                token,
                mode,
                ticket,
            } => {
                self.fair_leave(s, node, token, mode, ticket);
                return None;
            }
            Op::Rw(op) => return self.rw_request(s, node, op),
            Op::Election(op) => {
                self.election_request(s, node, op);
                return None;
            }
            _ => {}
        }
        let election = self.p.election;
        let now = s.now;
        let ttl = self.p.ttl;
        let limit = self.p.limit;
        let nd = &mut s.nodes[node as usize];
        let ans = match op {
            Op::Acquire(t) => {
                if !nd.holds(t) && nd.admits(limit) {
                    nd.add(t, now + ttl);
                    Ans::Yes(nd.counter)
                } else {
                    Ans::No
                }
            }
            Op::Extend { token, reseat } => {
                let ans = if let Some(h) = nd.holders.iter_mut().find(|h| h.0 == token) {
                    h.1 = now + ttl;
                    Ans::Yes(0)
                } else if reseat && nd.admits(limit) {
                    nd.add(token, now + ttl);
                    Ans::Reseated
                } else {
                    Ans::No
                };
                if ans != Ans::No {
                    nd.renew_record(token, now + ttl);
                }
                ans
            }
            Op::Fence { token, f } => {
                if nd.holds(token) {
                    nd.counter = nd.counter.max(f);
                    if election {
                        nd.write_record(token, f);
                    }
                    Ans::Yes(0)
                } else {
                    Ans::No
                }
            }
            Op::Release(t) => {
                nd.holders.retain(|h| h.0 != t);
                nd.drop_record(t);
                return None;
            }
            Op::FairAcquire { .. } | Op::Queue { .. } | Op::Rw(_) | Op::Election(_) => {
                return None;
            }
        };
        Some((ans, nd.started, nd.promoted))
    }

    fn on_reply(&self, s: &mut State, m: Msg, (ans, started, promoted): (Ans, Tick, Tick)) {
        let Msg {
            client,
            node,
            round,
            ..
        } = m;
        let cl = &mut s.clients[client as usize];
        if cl.round != round || cl.crashed {
            return; // the round is over
        }
        if let (Ans::Fair { ticket, .. }, true) = (ans, cl.in_line) {
            cl.ticket = cl.ticket.max(ticket);
        }
        let now = s.now;
        let counts = match ans {
            Ans::No | Ans::Fair { granted: false, .. } => None,
            Ans::Reseated if self.is(Mutant::ReseatInQuarantineCounts) => Some(true),
            _ => Some(self.eligible(now, started, promoted)),
        };
        let bit = 1u8 << node;
        let tally = match &mut s.clients[client as usize].phase {
            Phase::Acquire { tally, .. }
            | Phase::Fence { tally, .. }
            | Phase::Extend { tally, .. } => tally,
            Phase::Idle => return,
        };
        if (tally.yes | tally.not_eligible | tally.no) & bit != 0 {
            return; // a duplicate of an answer already counted
        }
        match counts {
            None => tally.no |= bit,
            Some(false) => tally.not_eligible |= bit,
            Some(true) => {
                tally.yes |= bit;
                if let Ans::Yes(c) | Ans::Fair { counter: c, .. } = ans {
                    tally.max_counter = tally.max_counter.max(c);
                }
            }
        }
        self.decide(s, client, false);
    }

    /// Whether a client can start something now.
    fn client_can(&self, s: &State, c: usize) -> [bool; 3] {
        let cl = &s.clients[c];
        if cl.crashed {
            return [false; 3];
        }
        let idle = cl.phase == Phase::Idle;
        // A liveness run's fair client makes one acquire call; otherwise a client may call again
        // after a release (the releaser must not jump the line).
        let done =
            self.p.liveness && cl.served && (self.p.fair || self.role(c as u8) == Role::Write);
        let acquire = idle && cl.held.is_none() && cl.attempts > 0 && s.now >= cl.next_try && !done;
        let extend = idle && cl.extends > 0 && s.valid(c);
        let release = idle && cl.held.is_some();
        [acquire, extend, release]
    }
}

impl Model for Redlock {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let n = usize::from(self.p.nodes);
        let long_ago = -4 * self.quarantine;
        let node = Node {
            run: 0,
            started: long_ago,
            promoted: long_ago,
            holders: Vec::new(),
            counter: 0,
            queue: Vec::new(),
            tickets: 0,
            queue_until: 0,
            readers: Vec::new(),
            mark: None,
            record: None,
        };
        let client = Client {
            phase: Phase::Idle,
            round: 0,
            attempts: self.p.attempts,
            extends: self.p.extends,
            seq: 0,
            next_try: 0,
            held: None,
            superseded: false,
            in_line: false,
            ticket: 0,
            served: false,
            crashed: false,
            proclaims: self.p.proclaims,
        };
        vec![State {
            now: 0,
            nodes: vec![node; n],
            clients: vec![client; usize::from(self.p.clients)],
            net: Vec::new(),
            budget: [
                self.p.restarts,
                self.p.failovers,
                self.p.losses,
                self.p.dups,
                self.p.crashes,
            ],
            max_fence: 0,
            granted_ever: false,
            exclusion_broken: false,
            fence_regressed: false,
            order_broken: false,
            ticket_broken: false,
            lapse: None,
            corner: false,
            grant_unbacked: false,
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        if s.exclusion_broken
            || s.fence_regressed
            || s.order_broken
            || s.ticket_broken
            || s.grant_unbacked
        {
            return; // the property already failed: nothing to explore past it
        }
        let mut urgent = false;
        for (c, _) in s.clients.iter().enumerate() {
            let [acquire, extend, release] = self.client_can(s, c);
            let client = c as u8;
            if acquire {
                out.push(Action::Acquire { client });
                urgent = true;
            }
            if extend {
                out.push(Action::Extend { client });
            }
            if release && !self.p.liveness {
                out.push(Action::Release { client });
            }
            // A fair (or read-write) liveness run's holder releases at once: the next waiter's
            // turn, or the next reader's.
            if release && self.p.liveness && (self.p.fair || !self.p.roles.is_empty()) {
                out.push(Action::Release { client });
                urgent = true;
            }
            let cl = &s.clients[c];
            if self.p.fair && !cl.crashed {
                if cl.in_line && cl.phase == Phase::Idle && !self.p.liveness {
                    out.push(Action::Cancel { client });
                }
                if s.budget[4] > 0 {
                    out.push(Action::Crash { client });
                }
            }
        }
        let mut last: Option<&Msg> = None;
        for m in &s.net {
            if last == Some(m) {
                continue;
            }
            last = Some(m);
            // One client's fair scripts to one node share a connection: they run in order (so do
            // all of a read-write liveness run's requests).
            if let Some(mine) = self.conn_order(m) {
                let earlier = s.net.iter().any(|o| {
                    (o.node, o.run, o.client) == (m.node, m.run, m.client)
                        && self.conn_order(o).is_some_and(|theirs| theirs < mine)
                });
                if earlier {
                    continue;
                }
            }
            out.push(Action::Deliver(*m));
            urgent = true;
            // A lost request is a request delivered after the horizon (never, here).
            if s.budget[2] > 0 && m.op.replies() {
                out.push(Action::LoseReply(*m));
            }
            if s.budget[3] > 0 {
                out.push(Action::Duplicate(*m));
            }
        }
        for (i, nd) in s.nodes.iter().enumerate() {
            let node = i as u8;
            for &(token, exp) in &nd.holders {
                if s.now >= exp - self.p.skew {
                    out.push(Action::ExpireEarly { node, token });
                }
            }
            if !self.is(Mutant::FairNoSweep) {
                for e in &nd.queue {
                    if s.now >= e.until - self.p.skew {
                        out.push(Action::ExpireEntry {
                            node,
                            token: e.token,
                        });
                    }
                }
            }
            if s.budget[0] > 0 {
                out.push(Action::Restart {
                    node,
                    persist: false,
                });
                out.push(Action::Restart {
                    node,
                    persist: true,
                });
            }
            if s.budget[1] > 0 {
                out.push(Action::Failover { node });
            }
        }
        self.rw_actions(s, out);
        self.election_actions(s, out);
        // Liveness runs take every enabled step before time moves (no client dawdles).
        if s.now < self.p.max_time && !(self.p.liveness && urgent) {
            out.push(Action::Tick);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick => {
                s.now += 1;
                let now = s.now;
                for nd in &mut s.nodes {
                    nd.holders.retain(|h| h.1 > now);
                    nd.expire_rw(now);
                    nd.expire_record(now);
                }
                for i in 0..s.nodes.len() {
                    let sweep = !self.is(Mutant::FairNoSweep);
                    let nd = &s.nodes[i];
                    let dead: Vec<Token> = if now >= nd.queue_until {
                        nd.queue.iter().map(|e| e.token).collect()
                    } else if sweep {
                        nd.queue
                            .iter()
                            .filter(|e| e.until <= now)
                            .map(|e| e.token)
                            .collect()
                    } else {
                        Vec::new()
                    };
                    for t in dead {
                        self.expire_entry(&mut s, i as u8, t);
                    }
                    let nd = &mut s.nodes[i];
                    if now >= nd.queue_until {
                        nd.tickets = 0;
                    }
                }
                for c in 0..s.clients.len() {
                    let start = match s.clients[c].phase {
                        Phase::Acquire { t1, .. } | Phase::Extend { t1, .. } => Some(t1),
                        Phase::Fence { sent, .. } => Some(sent),
                        Phase::Idle => None,
                    };
                    if start.is_some_and(|t| now > t + self.p.node_timeout) {
                        self.decide(&mut s, c as u8, true);
                    }
                }
            }
            Action::Deliver(m) | Action::LoseReply(m) => {
                if !s.take(&m) {
                    return None;
                }
                let crashed = s.clients[m.client as usize].crashed;
                let answer = self.on_request(&mut s, m);
                if let (
                    false,
                    Op::FairAcquire {
                        token, late: true, ..
                    },
                ) = (crashed, m.op)
                {
                    // A late reply of a granted round: a refusal (or no reply at all) leaves an
                    // entry behind on that node, which the client dequeues.
                    let granted = matches!(answer, Some((Ans::Fair { granted: true, .. }, ..)));
                    if !granted || matches!(action, Action::LoseReply(_)) {
                        let run = s.nodes[m.node as usize].run;
                        s.send(Msg {
                            run,
                            op: Op::Queue {
                                token,
                                mode: QueueMode::Dequeue,
                                ticket: 0,
                            },
                            ..m
                        });
                    }
                }
                match (answer, &action) {
                    (Some(a), Action::Deliver(_)) => self.on_reply(&mut s, m, a),
                    (Some(_), _) => s.budget[2] -= 1,
                    (None, _) => {}
                }
            }
            Action::Duplicate(m) => {
                s.send(m);
                s.budget[3] -= 1;
            }
            Action::ExpireEarly { node, token } => {
                s.nodes[node as usize].holders.retain(|h| h.0 != token);
            }
            Action::ExpireEntry { node, token } => self.expire_entry(&mut s, node, token),
            Action::Rw(step) => self.rw_step(&mut s, step),
            Action::Election(step) => self.election_step(&mut s, step),
            Action::Cancel { client } => {
                let cl = &mut s.clients[client as usize];
                let token = token_of(client, cl.seq);
                cl.attempts = 0;
                self.leave(&mut s, client, token);
            }
            Action::Crash { client } => {
                s.budget[4] -= 1;
                let cl = &mut s.clients[client as usize];
                cl.crashed = true;
                cl.in_line = false;
                cl.phase = Phase::Idle;
                cl.round += 1;
            }
            Action::Restart { node, persist } => {
                s.budget[0] -= 1;
                let now = s.now;
                let nd = &mut s.nodes[node as usize];
                nd.run += 1;
                nd.started = now;
                if !persist {
                    nd.lose_data();
                }
            }
            Action::Failover { node } => {
                s.budget[1] -= 1;
                let now = s.now;
                let nd = &mut s.nodes[node as usize];
                nd.run += 1;
                nd.promoted = now;
                nd.lose_data();
            }
            Action::Acquire { client } => {
                let now = s.now;
                let runs: Vec<u8> = s.nodes.iter().map(|n| n.run).collect();
                let clock = self.wall(client, now);
                let fair = self.p.fair;
                let calls = self.keeps_token(client);
                let cl = &mut s.clients[client as usize];
                cl.attempts -= 1;
                // A fair call keeps its token (its place in line) from round to round, and so
                // does a read-write lock's (core's call has one token; the writer's mark is it).
                if !(calls && cl.in_line) {
                    cl.seq += 1;
                }
                cl.in_line = calls;
                cl.round += 1;
                let token = token_of(client, cl.seq);
                let ticket = cl.ticket;
                cl.phase = Phase::Acquire {
                    token,
                    t1: now,
                    tally: Tally::default(),
                    runs,
                };
                if fair {
                    self.broadcast(&mut s, client, |_| {
                        Some(Op::FairAcquire {
                            token,
                            ticket,
                            clock,
                            late: false,
                        })
                    });
                } else {
                    let op = self.acquire_op(client, token);
                    self.broadcast(&mut s, client, |_| Some(op));
                }
            }
            Action::Extend { client } => {
                let now = s.now;
                let runs: Vec<u8> = s.nodes.iter().map(|n| n.run).collect();
                let every = self.is(Mutant::ReseatWithoutRunIdCheck);
                let cl = &mut s.clients[client as usize];
                let held = cl.held.as_ref().expect("extend without a lock");
                let token = held.token;
                let mut reseat = 0u8;
                for (i, &seat) in held.seats.iter().enumerate() {
                    if every || seat != runs[i] {
                        reseat |= 1 << i;
                    }
                }
                cl.extends -= 1;
                cl.round += 1;
                cl.phase = Phase::Extend {
                    t1: now,
                    tally: Tally::default(),
                    runs,
                    reseat,
                };
                self.broadcast(&mut s, client, |i| {
                    Some(self.extend_op(client, token, reseat & (1 << i) != 0))
                });
            }
            Action::Release { client } => {
                let cl = &mut s.clients[client as usize];
                // A release runs on every node at once: a slower one only keeps the key
                // longer, as a later release would (rollbacks, below, are messages).
                let token = cl.held.take().expect("release without a lock").token;
                cl.round += 1;
                self.release_now(&mut s, client, token);
            }
        }
        s.prune();
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut props = vec![if self.p.election {
            Property::always(
                "one leader: never two candidates that believe they lead, and a leader superseded by a later grant never believes again",
                |_, s: &State| !s.exclusion_broken,
            )
        } else if self.p.roles.is_empty() {
            Property::always(
                "exclusion: never more valid holders than the limit, and a holder superseded by a later grant is never valid again",
                |_, s: &State| !s.exclusion_broken,
            )
        } else {
            Property::always(
                "rw exclusion: a write is never valid while another client's read, write or plain lock is, nor a read while a plain lock is; a holder superseded by a later conflicting grant is never valid again",
                |_, s: &State| !s.exclusion_broken,
            )
        }];
        if self.p.election {
            props.push(Property::always(
                "terms strictly increase: a grant's term is larger than every earlier grant's",
                |_, s: &State| !s.fence_regressed,
            ));
            props.push(Property::always(
                "granted by a quorum: a candidate believes it leads only once a quorum of nodes hold its key and its term",
                |_, s: &State| !s.grant_unbacked,
            ));
            props.push(Property::always(
                "told in time: while a candidate believes it leads, a quorum of nodes still hold its key (or, quarantined, count for nobody)",
                |m: &Redlock, s: &State| m.leaders_backed(s),
            ));
            props.push(Property::always(
                "leader read: while a candidate believes it leads, no read of a quorum reports another leader, nor this one with another term than its grant's",
                |m: &Redlock, s: &State| m.reads_current(s),
            ));
        } else if self.p.fencing {
            props.push(Property::always(
                "fences strictly increase across grants",
                |_, s: &State| !s.fence_regressed,
            ));
        }
        if self.p.fair {
            props.push(Property::always(
                "ticket order: a node lets a fair waiter take the key only when no live entry in its line holds an earlier ticket",
                |_, s: &State| !s.order_broken,
            ));
            props.push(Property::always(
                "line order: a node's new ticket ranks after every live entry in its line",
                |_, s: &State| !s.ticket_broken,
            ));
        }
        if self.p.fair && self.p.liveness {
            props.push(Property::always(
                "fair liveness: once faults stop, every waiter that did not die is granted (a dead waiter's entry expires)",
                |m: &Redlock, s: &State| {
                    let mut next = Vec::new();
                    m.actions(s, &mut next);
                    !next.is_empty() || s.clients.iter().all(|c| c.crashed || c.served)
                },
            ));
        } else if self.p.fair && !self.p.election {
            props.push(Property::sometimes(
                "corner: a waiter still in line loses its entry on a node to heartbeat expiry, and that node lets a later ticket take the key",
                |_, s: &State| s.corner,
            ));
        } else if self.p.liveness && !self.p.roles.is_empty() {
            props.push(Property::always(
                "writer preference: a waiting writer is granted while new readers keep coming",
                |m: &Redlock, s: &State| {
                    let mut next = Vec::new();
                    m.actions(s, &mut next);
                    let writer =
                        |(c, cl): (usize, &Client)| m.role(c as u8) != Role::Write || cl.served;
                    !next.is_empty() || s.clients.iter().enumerate().all(writer)
                },
            ));
        } else if self.p.liveness {
            props.push(Property::always(
                "liveness: a free resource is granted once faults stop",
                |m: &Redlock, s: &State| {
                    let mut next = Vec::new();
                    m.actions(s, &mut next);
                    !next.is_empty() || s.granted_ever
                },
            ));
        }
        props
    }

    fn within_boundary(&self, s: &State) -> bool {
        s.now <= self.p.max_time
    }

    fn format_action(&self, action: &Action) -> String {
        action.to_string()
    }
}
