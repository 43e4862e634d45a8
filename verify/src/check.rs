//! The configurations CI checks, the mutants, and the runs that report them.

use std::time::{Duration, Instant};

use stateright::{Checker, Expectation, HasDiscoveries, Model};

use crate::model::{Mutant, Params, Redlock, Role};

/// The configurations, at CI's bounds or (`deep`) larger ones.
pub fn configs(deep: bool) -> Vec<Params> {
    let base = Params {
        name: "",
        nodes: 3,
        clients: 2,
        limit: 1,
        ttl: 3,
        skew: 1,
        node_timeout: 1,
        wall_skew: 1,
        max_time: 0,
        restarts: 0,
        failovers: 0,
        losses: 0,
        dups: 0,
        attempts: 2,
        extends: 0,
        fencing: false,
        fair: false,
        queue_timeout: 0,
        crashes: 0,
        liveness: false,
        roles: &[],
        election: false,
        proclaims: 0,
        mutant: None,
    };
    let d = |ci: i16, more: i16| if deep { ci + more } else { ci };
    let one = u8::from(deep) + 1;
    let mut configs = vec![
        // Node restarts, with and without data, while a lock is held and contended.
        Params {
            name: "restart",
            max_time: d(3, 1),
            restarts: 1,
            attempts: one,
            ..base.clone()
        },
        // A voter's master changes to a replica that lacks the holder's key and counter.
        Params {
            name: "failover",
            max_time: d(3, 1),
            failovers: 1,
            attempts: one,
            ..base.clone()
        },
        // Lost replies (the node acted, the client never heard), duplicated and late requests.
        Params {
            name: "messages",
            max_time: d(2, 1),
            losses: 1,
            dups: 1,
            attempts: 1,
            ..base.clone()
        },
        // Fencing: counters written back, client wall clocks a tick apart, a restart.
        Params {
            name: "fence",
            max_time: d(2, 1),
            restarts: u8::from(deep),
            attempts: one,
            fencing: true,
            ..base.clone()
        },
        // Long holds: extensions and re-seats across a restart.
        Params {
            name: "extend",
            ttl: 4,
            max_time: d(3, 1),
            restarts: 1,
            extends: 1,
            attempts: 1,
            ..base.clone()
        },
        // A semaphore of 2 over 3 nodes (Q(2) = 3) with 3 clients.
        Params {
            name: "semaphore",
            limit: 2,
            clients: 3,
            max_time: d(1, 1),
            attempts: 1,
            ..base.clone()
        },
        // Once faults stop, a free resource is granted (quarantine served, stale keys expired).
        Params {
            name: "liveness",
            clients: 1,
            max_time: 12,
            restarts: 2,
            losses: 1,
            attempts: 12,
            liveness: true,
            ..base.clone()
        },
        // Fair waiters: tickets, heartbeats that lapse (a client may pause between rounds),
        // early expiry by a node clock ahead, requeue, cancellation, re-acquire after a release.
        Params {
            name: "fair",
            fair: true,
            queue_timeout: 2,
            max_time: d(1, 1),
            attempts: 2,
            losses: u8::from(deep),
            restarts: u8::from(deep),
            ..base.clone()
        },
        // A fair waiter dies silently (in line or holding): the other is granted once its entry
        // and key expire.
        Params {
            name: "fair-liveness",
            fair: true,
            // The line holds only while a heartbeat outlives the gap to the waiter's next round
            // plus the clocks' drift (core pauses at most queue_timeout / 2 between a fair
            // waiter's rounds). Rounds here are a tick apart and drift is a whole tick: with a
            // third client, a 2-tick queue_timeout lets every entry lapse each tick, the waiters
            // race and one can spend all its attempts (a 172-step run, found at deep bounds);
            // 3 ticks keeps the line and the property holds.
            queue_timeout: 2 + i16::from(deep),
            max_time: 10,
            attempts: 10,
            crashes: 1,
            losses: 1,
            liveness: true,
            clients: 2 + u8::from(deep),
            ..base.clone()
        },
        // A read-write lock: two readers and a writer, two rounds each (a call keeps its token
        // from round to round: a writer's mark is it); deep: a tick more, one round.
        Params {
            name: "rw",
            clients: 3,
            roles: &[Role::Read, Role::Read, Role::Write],
            queue_timeout: 2,
            max_time: d(1, 1),
            attempts: 2 - u8::from(deep),
            ..base.clone()
        },
        // A reader, a writer and a plain lock of the same name; a node restarts, with or
        // without its data, and is quarantined; deep: they extend, re-seating.
        Params {
            name: "rw-lock",
            clients: 3,
            roles: &[Role::Read, Role::Write, Role::Lock],
            queue_timeout: 2,
            max_time: 1,
            restarts: 1,
            extends: u8::from(deep),
            attempts: 1,
            ..base.clone()
        },
        // A reader and a writer extend while keys expire (early, by a node clock ahead); the
        // reader re-seats its read on a node that restarted.
        Params {
            name: "rw-extend",
            roles: &[Role::Read, Role::Write],
            queue_timeout: 2,
            max_time: d(2, 1),
            restarts: 1,
            extends: 1,
            attempts: 1,
            ..base.clone()
        },
        // Readers that keep coming back (a new read each tick) and a writer: the writer's mark
        // holds new reads back until it is granted.
        Params {
            name: "rw-liveness",
            clients: 3,
            roles: &[Role::Read, Role::Read, Role::Write],
            // The mark holds while it outlives the gap to the writer's next round plus the
            // clocks' drift (core's writer tries at least twice per queue timeout). Rounds here
            // are a tick apart and drift is a whole tick: with 2 ticks every mark can lapse
            // before the writer's next round and a reader slips in each tick (a 90-step run).
            queue_timeout: 3,
            max_time: d(5, 3),
            attempts: d(5, 3) as u8,
            losses: 1 + u8::from(deep),
            liveness: true,
            ..base.clone()
        },
    ];
    let election = Params {
        fair: true,
        fencing: true,
        election: true,
        queue_timeout: 2,
        ..base.clone()
    };
    configs.extend([
        // Two candidates campaign twice each: a leader resigns and campaigns again, behind the
        // other in line; clients' wall clocks a tick apart (the term's floor). Deep: the leader
        // proclaims.
        Params {
            name: "election",
            max_time: 1,
            attempts: 2,
            proclaims: u8::from(deep),
            ..election.clone()
        },
        // A node restarts, with or without its data (its counter and record), and is
        // quarantined. Deep: the leader proclaims.
        Params {
            name: "election-restart",
            max_time: 1,
            restarts: 1,
            attempts: 1,
            proclaims: u8::from(deep),
            ..election.clone()
        },
        // A leader extends while keys expire early and the other candidate waits, then resigns
        // (late, perhaps: after its validity). Deep: a reply may be lost.
        Params {
            name: "election-extend",
            max_time: 2,
            attempts: 1,
            losses: u8::from(deep),
            extends: 1,
            ..election.clone()
        },
        // A leader dies without resigning, a reply is lost: every live candidate leads in turn.
        Params {
            name: "election-liveness",
            queue_timeout: 3,
            max_time: 10,
            attempts: 10,
            crashes: 1,
            losses: 1,
            liveness: true,
            clients: 2 + u8::from(deep),
            ..election
        },
    ]);
    if deep {
        // The writer's preference with a node restarted (quarantined, so neither side has a
        // node to spare) and a lost reply, over 8 ticks: a granted writer's round that fails
        // must leave its mark where it set the key (before, a 140-step run passed it over).
        configs.push(Params {
            name: "rw-liveness-restart",
            clients: 3,
            roles: &[Role::Read, Role::Read, Role::Write],
            queue_timeout: 3,
            max_time: 8,
            attempts: 8,
            restarts: 1,
            losses: 1,
            liveness: true,
            ..base
        });
    }
    configs
}

/// What one exhaustive run found.
pub struct Outcome {
    /// Configuration name.
    pub config: &'static str,
    /// States generated, and distinct states.
    pub states: usize,
    /// Distinct states.
    pub unique: usize,
    /// Wall time.
    pub took: Duration,
    /// The first property that failed, with its counterexample (actions, in order); a
    /// situation the model must reach but did not fails with an empty path.
    pub failure: Option<(&'static str, Vec<String>)>,
    /// Situations reached, each with the length of the first path found to it.
    pub reached: Vec<(&'static str, usize)>,
    /// Stopped by the budget before the state space was exhausted (no counterexample found).
    pub cut: bool,
}

/// The longest one configuration may run (`--budget`): a run cut there explored part of its
/// state space only.
pub static BUDGET: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();

/// Checks `p` exhaustively (stops at the first counterexample, or at the [`BUDGET`]).
pub fn run(p: Params, threads: usize) -> Outcome {
    let model = Redlock::new(p);
    let names: Vec<(&'static str, Expectation)> = model
        .properties()
        .iter()
        .map(|p| (p.name, p.expectation.clone()))
        .collect();
    let started = Instant::now();
    let checker = model
        .clone()
        .checker()
        .threads(threads)
        .finish_when(HasDiscoveries::AnyFailures);
    let checker = match BUDGET.get() {
        Some(b) => checker.timeout(*b),
        None => checker,
    };
    if std::env::var_os("VERIFY_BFS").is_some() {
        outcome(&model, checker.spawn_bfs().join(), &names, started)
    } else {
        // Depth-first with node symmetry: far fewer states (BFS has no symmetry reduction).
        let checker = checker
            .symmetry_fn(crate::model::canonical)
            .spawn_dfs()
            .join();
        outcome(&model, checker, &names, started)
    }
}

fn outcome(
    model: &Redlock,
    checker: impl Checker<Redlock>,
    names: &[(&'static str, Expectation)],
    started: Instant,
) -> Outcome {
    let path_of = |name| {
        checker.discovery(name).map(|path| {
            path.into_actions()
                .iter()
                .map(|a| model.format_action(a))
                .collect::<Vec<String>>()
        })
    };
    let mut broken = None;
    let mut unreached = None;
    let mut reached = Vec::new();
    for (name, expectation) in names {
        match (expectation, path_of(name)) {
            (Expectation::Sometimes, Some(path)) => reached.push((*name, path.len())),
            (Expectation::Sometimes, None) => unreached = unreached.or(Some((*name, Vec::new()))),
            (_, Some(path)) => broken = broken.or(Some((*name, path))),
            (_, None) => {}
        }
    }
    // A run cut by the budget proves nothing about what it did not reach.
    let took = started.elapsed();
    let cut = broken.is_none() && BUDGET.get().is_some_and(|b| took >= *b);
    if cut {
        unreached = None;
    }
    // A counterexample comes first: the run stopped at it, before it could reach the rest.
    let failure = broken.or(unreached);
    Outcome {
        config: model.p.name,
        states: checker.state_count(),
        unique: checker.unique_state_count(),
        took,
        failure,
        reached,
        cut,
    }
}

/// The configurations a mutant is checked against, most telling first.
pub fn targets(m: Mutant) -> &'static [&'static str] {
    match m {
        Mutant::NoQuarantine => &["restart"],
        Mutant::FailoverRuleOff => &["failover"],
        Mutant::DriftZero => &["restart", "messages"],
        Mutant::FenceWithoutWriteBack => &["fence"],
        Mutant::ReseatWithoutRunIdCheck
        | Mutant::ReseatInQuarantineCounts
        | Mutant::LapsedExtensionCounts => &["extend"],
        Mutant::SemaphoreMajority => &["semaphore"],
        Mutant::FairOrderIgnored | Mutant::FairTicketFromClock => &["fair"],
        Mutant::FairNoSweep => &["fair-liveness"],
        Mutant::ReadUnderWriter | Mutant::WriteOverReaders | Mutant::ReadReleaseDropsKey => &["rw"],
        Mutant::ReadExtendKeepsKey => &["rw-extend"],
        Mutant::ReadIgnoresMark => &["rw-liveness"],
        Mutant::TermWithoutWriteBack | Mutant::LeaderMinority | Mutant::CampaignSkipsLine => {
            &["election"]
        }
        Mutant::ReadFromMinority => &["election-restart"],
        Mutant::ResignDeletesForeignKey | Mutant::LeaderValidityFromReply => &["election-extend"],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unmutated_semaphore_passes_and_its_majority_mutant_fails() {
        let p = configs(false)
            .into_iter()
            .find(|p| p.name == "semaphore")
            .unwrap();
        assert!(run(p.clone(), 1).failure.is_none());
        let m = run(
            Params {
                mutant: Some(Mutant::SemaphoreMajority),
                ..p
            },
            1,
        );
        assert!(m.failure.is_some());
    }

    #[test]
    fn a_waiting_writer_is_granted_and_the_rw_mutants_are_caught() {
        let p = configs(false)
            .into_iter()
            .find(|p| p.name == "rw-liveness")
            .unwrap();
        assert!(run(p.clone(), 1).failure.is_none());
        for m in [Mutant::ReadIgnoresMark, Mutant::WriteOverReaders] {
            let o = run(
                Params {
                    mutant: Some(m),
                    ..p.clone()
                },
                1,
            );
            assert!(o.failure.is_some_and(|(_, path)| !path.is_empty()), "{m:?}");
        }
    }

    #[test]
    fn a_dead_fair_waiter_expires_from_the_line_and_its_mutant_blocks_it_forever() {
        let p = configs(false)
            .into_iter()
            .find(|p| p.name == "fair-liveness")
            .unwrap();
        assert!(run(p.clone(), 1).failure.is_none());
        let m = run(
            Params {
                mutant: Some(Mutant::FairNoSweep),
                ..p
            },
            1,
        );
        assert!(m.failure.is_some_and(|(_, path)| !path.is_empty()));
    }
}
