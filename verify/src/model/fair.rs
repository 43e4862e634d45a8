//! The fair queue: a line of fair waiters per lock key on each node (`FAIR_ACQUIRE_SOURCE`,
//! `FAIR_LEAVE_SOURCE` in core's `scripts/fair.rs`), and what a fair client sends around its
//! rounds. The rounds themselves, their tally and validity are the lock's, in `model.rs`.

use super::{Ans, Mutant, Node, Op, Phase, Redlock, State, Tick, Token, token_client, token_of};

/// A fair waiter's entry in a node's queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Entry {
    /// Its ticket (the queue's order; ties go by token, as a sorted set orders its members).
    pub ticket: u64,
    /// The waiter.
    pub token: Token,
    /// The heartbeat's deadline: from then on the entry counts as dead.
    pub until: Tick,
}

/// What the fair leave script does with a waiter's entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QueueMode {
    /// A failed round's rollback: the key goes if ours; the place in line stays (a fresh
    /// heartbeat with the ticket).
    Requeue,
    /// A waiter that gives up or is cancelled: the key (if ours) and the entry go.
    Leave,
    /// After a grant, on a node that did not grant: the entry goes.
    Dequeue,
}

impl Node {
    pub(super) fn entry(&self, t: Token) -> Option<Entry> {
        self.queue.iter().copied().find(|e| e.token == t)
    }

    pub(super) fn dequeue(&mut self, t: Token) {
        self.queue.retain(|e| e.token != t);
    }

    /// The script's `join`: (re)registers the token with its ticket and a fresh heartbeat, raises
    /// the counter, and keeps the queue keys for `qt` from now.
    pub(super) fn join(&mut self, t: Token, ticket: u64, now: Tick, qt: Tick) {
        self.dequeue(t);
        let e = Entry {
            ticket,
            token: t,
            until: now + qt,
        };
        let at = self
            .queue
            .partition_point(|x| (x.ticket, x.token) < (ticket, t));
        self.queue.insert(at, e);
        self.tickets = self.tickets.max(ticket);
        self.queue_until = self.queue_until.max(now + qt);
    }
}

impl Redlock {
    /// A fair round failed: the keys go and the place in line stays on every node that did not
    /// refuse (a refusing node set nothing, and kept the entry it refreshed); a waiter out of
    /// rounds gives up instead and leaves the line everywhere.
    pub(super) fn fair_rollback(&self, s: &mut State, c: u8, token: Token, refused: u8) {
        let (ticket, last) = {
            let cl = &s.clients[c as usize];
            (cl.ticket, cl.attempts == 0)
        };
        if last {
            self.leave(s, c, token);
        } else {
            self.broadcast(s, c, |i| {
                (refused & (1 << i) == 0).then_some(Op::Queue {
                    token,
                    mode: QueueMode::Requeue,
                    ticket,
                })
            });
        }
        let cl = &mut s.clients[c as usize];
        cl.phase = Phase::Idle;
        cl.next_try = s.now + 1;
    }

    /// A fair waiter gives up: it leaves the line on every node (a round of its own, sent after
    /// whatever the last round sent).
    pub(super) fn leave(&self, s: &mut State, c: u8, token: Token) {
        s.clients[c as usize].round += 1;
        self.broadcast(s, c, |_| {
            Some(Op::Queue {
                token,
                mode: QueueMode::Leave,
                ticket: 0,
            })
        });
        let cl = &mut s.clients[c as usize];
        cl.in_line = false;
        cl.ticket = 0;
    }

    /// After a fair grant: the nodes that did not grant keep the entry, which would stall the
    /// line, so it is dequeued there — at once where the answer is known (a refusal, a vote not
    /// counted, a reply lost), when the late reply comes where the request is still out.
    /// `round` is the acquire's (a fenced grant is decided a round later, by its write-back).
    pub(super) fn fair_granted(&self, s: &mut State, c: u8, token: Token, yes: u8, round: u8) {
        let mut out = 0u8;
        for m in &mut s.net {
            if let (true, Op::FairAcquire { late, .. }) =
                (m.client == c && m.round == round, &mut m.op)
            {
                *late = true;
                out |= 1 << m.node;
            }
        }
        s.net.sort_unstable();
        let dequeue: Vec<bool> = (0..s.nodes.len())
            .map(|i| (yes | out) & (1 << i) == 0)
            .collect();
        self.broadcast(s, c, |i| {
            dequeue[i].then_some(Op::Queue {
                token,
                mode: QueueMode::Dequeue,
                ticket: 0,
            })
        });
        let cl = &mut s.clients[c as usize];
        cl.in_line = false;
        cl.ticket = 0;
        cl.served = true;
    }

    /// A queue entry's heartbeat expired on `node`; the ghost notes it when its waiter is still
    /// in line (the corner: a live waiter that lost its place there).
    pub(super) fn expire_entry(&self, s: &mut State, node: u8, t: Token) {
        let nd = &mut s.nodes[node as usize];
        let Some(e) = nd.entry(t) else { return };
        nd.dequeue(t);
        let c = token_client(t);
        let cl = &s.clients[c as usize];
        if cl.in_line && token_of(c, cl.seq) == t {
            s.lapse = Some((node, c, e.ticket));
        }
    }

    /// The fair acquire script on one node (`FAIR_ACQUIRE_SOURCE`): the key is set only when it
    /// is free and no live entry other than the token heads the line; a request that must wait
    /// (re)joins with its ticket (a new one above the node's counter and at least the client's
    /// clock) and is granted after all if that made it the head of a free key. A grant leaves
    /// the line. The ghost checks the rules on the line as it stood.
    pub(super) fn fair_acquire(
        &self,
        s: &mut State,
        node: u8,
        t: Token,
        given: u64,
        clock: u64,
    ) -> Ans {
        let now = s.now;
        let (ttl, qt) = (self.p.ttl, self.p.queue_timeout);
        let order_ignored = self.is(Mutant::FairOrderIgnored);
        let skips_line = self.is(Mutant::CampaignSkipsLine);
        let nd = &mut s.nodes[node as usize];
        // Entries whose heartbeat stopped are gone already (`Action::Tick` sweeps them), unless
        // the sweep is the mutant's: then only the queue key's expiry drops them.
        let heads = |nd: &Node| {
            if skips_line {
                true
            } else if order_ignored {
                nd.queue.is_empty() || nd.entry(t).is_some()
            } else {
                nd.queue.first().is_none_or(|e| e.token == t)
            }
        };
        let held = nd.holders.iter().any(|h| h.0 != t);
        let mut ticket = given;
        if held || !heads(nd) {
            if ticket == 0 {
                ticket = clock;
                if !self.is(Mutant::FairTicketFromClock) && nd.tickets >= ticket {
                    ticket = nd.tickets + 1;
                }
                // Ghost: a new ticket ranks after every live waiter in this line.
                if nd.queue.iter().any(|e| e.until > now && e.ticket >= ticket) {
                    s.ticket_broken = true;
                }
            }
            let nd = &mut s.nodes[node as usize];
            nd.join(t, ticket, now, qt);
            if s.lapse
                .is_some_and(|(n, c, _)| n == node && token_client(t) == c)
            {
                s.lapse = None;
            }
            let nd = &s.nodes[node as usize];
            if held || !heads(nd) {
                return Ans::Fair {
                    granted: false,
                    ticket,
                    counter: 0,
                };
            }
        }
        let nd = &mut s.nodes[node as usize];
        // Ghost: no live entry in this line ranks before the one that takes the key.
        let live = |e: &&Entry| e.until > now && e.token != t;
        let mine = nd.entry(t);
        let earlier = nd.queue.iter().filter(live).any(|e| match mine {
            Some(m) => (e.ticket, e.token) < (m.ticket, m.token),
            None => true,
        });
        if earlier {
            s.order_broken = true;
        }
        if let Some((n, c, lapsed)) = s.lapse {
            let later = mine.is_none_or(|m| m.ticket > lapsed);
            if n == node && c != token_client(t) && later {
                s.corner = true;
            }
        }
        let nd = &mut s.nodes[node as usize];
        nd.holders.retain(|h| h.0 != t);
        nd.add(t, now + ttl);
        nd.dequeue(t);
        Ans::Fair {
            granted: true,
            ticket,
            counter: nd.counter,
        }
    }

    /// The fair leave script on one node (`FAIR_LEAVE_SOURCE`).
    pub(super) fn fair_leave(
        &self,
        s: &mut State,
        node: u8,
        t: Token,
        mode: QueueMode,
        ticket: u64,
    ) {
        let now = s.now;
        let qt = self.p.queue_timeout;
        let nd = &mut s.nodes[node as usize];
        if mode != QueueMode::Dequeue {
            nd.holders.retain(|h| h.0 != t);
        }
        if mode == QueueMode::Requeue && ticket > 0 {
            nd.join(t, ticket, now, qt);
            if s.lapse
                .is_some_and(|(n, c, _)| n == node && token_client(t) == c)
            {
                s.lapse = None;
            }
        } else {
            nd.dequeue(t);
        }
    }
}
