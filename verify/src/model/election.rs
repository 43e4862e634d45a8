//! Leader election: the election's key is a lock key, a campaign is a fair, fenced acquire of it
//! (the lock's rounds, the fair queue's scripts in `model/fair.rs`), and the term is the grant's
//! fence. What is the election's own lives here: the leader record beside the key (`LEADER_FENCE`,
//! `LEADER_EXTEND`, `PROCLAIM`, `LEADER_RELEASE` in core's `scripts/election.rs`), the
//! leader's proclaims, the `leader()` read (core's `leader_of`), and the properties that are
//! about leaders rather than locks.
//!
//! The record's expiry follows the key's, in true time (a record that a node clock ahead drops
//! early only makes a read report nobody, which no property here forbids).

use super::{Held, Mutant, Node, Op, Redlock, State, Tick, Token};

/// A node's leader record: whose it is, its term, and how often its leader proclaimed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Record {
    /// The leader's token.
    pub token: Token,
    /// The term written with it.
    pub term: u64,
    /// The value's version (0: the campaign's value; each proclaim adds one).
    pub version: u8,
    /// True-time expiry (the key's time to live when it was written).
    pub until: Tick,
}

/// An election's script that is not a lock's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ElectionOp {
    /// `PROCLAIM`: where the key still holds the token, the record takes the new version
    /// (written afresh, with the term, where the record is not the token's).
    Proclaim {
        token: Token,
        term: u64,
        version: u8,
    },
}

/// A step of an election.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElectionStep {
    /// A valid leader advertises a new value on every node.
    Proclaim { client: u8 },
}

impl Node {
    /// The token under the key and that key's expiry, if set.
    fn key_of(&self) -> Option<(Token, Tick)> {
        self.holders.first().copied()
    }

    /// `LEADER_FENCE` after its key check passed: the record is the token's, with its term,
    /// version 0, living as long as the key.
    pub(super) fn write_record(&mut self, token: Token, term: u64) {
        let until = self.key_of().map_or(0, |k| k.1);
        self.record = Some(Record {
            token,
            term,
            version: 0,
            until,
        });
    }

    /// `LEADER_EXTEND` after the key was renewed (or re-seated) to `until`: the record with it,
    /// if it is the token's.
    pub(super) fn renew_record(&mut self, token: Token, until: Tick) {
        if let Some(r) = self.record.as_mut().filter(|r| r.token == token) {
            r.until = until;
        }
    }

    /// `LEADER_RELEASE`'s second half: the record goes if it is the token's.
    pub(super) fn drop_record(&mut self, token: Token) {
        if self.record.is_some_and(|r| r.token == token) {
            self.record = None;
        }
    }

    /// Time moved to `now`: a record whose time to live ran out goes.
    pub(super) fn expire_record(&mut self, now: Tick) {
        self.record = self.record.filter(|r| r.until > now);
    }
}

impl Redlock {
    /// A leader's resignation on one node (`LEADER_RELEASE`): the key if it holds the token (the
    /// mutant: whatever it holds), and the record if it is the token's.
    pub(super) fn resign_on(&self, nd: &mut Node, token: Token) {
        if self.is(Mutant::ResignDeletesForeignKey) {
            nd.holders.clear();
        } else {
            nd.holders.retain(|h| h.0 != token);
        }
        nd.drop_record(token);
    }

    /// Runs an election's script on its node (no reply: a proclaim's outcome changes only what
    /// the reads report, and the read is checked on every state).
    pub(super) fn election_request(&self, s: &mut State, node: u8, op: ElectionOp) {
        let nd = &mut s.nodes[usize::from(node)];
        let ElectionOp::Proclaim {
            token,
            term,
            version,
        } = op;
        let Some((_, until)) = nd.key_of().filter(|k| k.0 == token) else {
            return;
        };
        let r = match nd.record.filter(|r| r.token == token) {
            Some(r) => Record {
                version,
                until,
                ..r
            },
            None => Record {
                token,
                term,
                version,
                until,
            },
        };
        nd.record = Some(r);
    }

    /// The proclaims a valid leader may send now.
    pub(super) fn election_actions(&self, s: &State, out: &mut Vec<super::Action>) {
        if !self.p.election {
            return;
        }
        for (c, cl) in s.clients.iter().enumerate() {
            if cl.proclaims > 0 && cl.phase == super::Phase::Idle && s.valid(c) {
                out.push(super::Action::Election(ElectionStep::Proclaim {
                    client: c as u8,
                }));
            }
        }
    }

    /// Runs an [`ElectionStep`].
    pub(super) fn election_step(&self, s: &mut State, step: ElectionStep) {
        let ElectionStep::Proclaim { client } = step;
        let cl = &mut s.clients[usize::from(client)];
        let Some(Held {
            token, fence: term, ..
        }) = cl.held
        else {
            return;
        };
        cl.proclaims -= 1;
        let version = self.p.proclaims - cl.proclaims;
        self.broadcast(s, client, |_| {
            Some(Op::Election(ElectionOp::Proclaim {
                token,
                term,
                version,
            }))
        });
    }

    /// Nodes that count for nobody now: restarted or promoted within the quarantine.
    fn quarantined(&self, s: &State, i: usize) -> bool {
        let nd = &s.nodes[i];
        !self.eligible(s.now, nd.started, nd.promoted)
    }

    /// Whether a quorum of nodes back `token` now: they hold it under the key, or (in
    /// quarantine) count for nobody. `term`: they also keep a fence counter at least that.
    pub(super) fn backed(&self, s: &State, token: Token, term: Option<u64>) -> bool {
        let q = ironlock::quorum(s.nodes.len());
        let backing = (0..s.nodes.len())
            .filter(|&i| {
                let nd = &s.nodes[i];
                let holds = nd.holds(token) && term.is_none_or(|t| nd.counter >= t);
                holds || self.quarantined(s, i)
            })
            .count();
        backing >= q
    }

    /// At a leader's grant: a quorum granted it and wrote its term (ghost check).
    pub(super) fn check_grant(&self, s: &mut State, token: Token, term: u64) {
        if self.p.election && !self.backed(s, token, Some(term)) {
            s.grant_unbacked = true;
        }
    }

    /// Every candidate that believes it leads is backed by a quorum (its keys have not expired
    /// under it, nor been taken from it): it is told it lost before its validity ends.
    pub(super) fn leaders_backed(&self, s: &State) -> bool {
        (0..s.clients.len()).all(|c| {
            !s.valid(c)
                || s.clients[c]
                    .held
                    .as_ref()
                    .is_some_and(|h| self.backed(s, h.token, None))
        })
    }

    /// What a `leader()` read of the nodes in `answered` (a bit each) may report, as core's
    /// `leader_of` decides it: a token a quorum of them hold under the key (the mutant: any one
    /// of them) and that has a record among the nodes that hold it, with the term of the latest
    /// such record (largest term, then largest version).
    fn reads(&self, s: &State, answered: u8) -> Vec<(Token, u64)> {
        let need = if self.is(Mutant::ReadFromMinority) {
            1
        } else {
            ironlock::quorum(s.nodes.len())
        };
        let views: Vec<&Node> = (0..s.nodes.len())
            .filter(|i| answered & (1 << i) != 0)
            .map(|i| &s.nodes[i])
            .collect();
        let mut tokens: Vec<Token> = views
            .iter()
            .filter_map(|n| n.key_of())
            .map(|k| k.0)
            .collect();
        tokens.sort_unstable();
        tokens.dedup();
        tokens
            .into_iter()
            .filter(|&t| views.iter().filter(|n| n.holds(t)).count() >= need)
            .filter_map(|t| {
                views
                    .iter()
                    .filter(|n| n.holds(t))
                    .filter_map(|n| n.record.filter(|r| r.token == t))
                    .max_by_key(|r| (r.term, r.version))
                    .map(|r| (t, r.term))
            })
            .collect()
    }

    /// While a candidate believes it leads, no `leader()` read of a quorum of answering nodes
    /// reports another candidate, or this one with another term than its grant's.
    pub(super) fn reads_current(&self, s: &State) -> bool {
        let n = s.nodes.len();
        let q = ironlock::quorum(n);
        let leader = (0..s.clients.len())
            .find(|&c| s.valid(c))
            .and_then(|c| s.clients[c].held.as_ref());
        let Some(leader) = leader else { return true };
        (0u8..1 << n)
            .filter(|m| m.count_ones() as usize >= q)
            .all(|m| {
                self.reads(s, m)
                    .iter()
                    .all(|&(t, term)| (t, term) == (leader.token, leader.fence))
            })
    }
}
