//! The configurations CI checks, the mutants, and the runs that report them.

use std::time::{Duration, Instant};

use stateright::{Checker, HasDiscoveries, Model};

use crate::model::{Mutant, Params, Redlock};

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
        liveness: false,
        mutant: None,
    };
    let d = |ci: i16, more: i16| if deep { ci + more } else { ci };
    let one = u8::from(deep) + 1;
    vec![
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
            ..base
        },
    ]
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
    /// The first property that failed, with its counterexample (actions, in order).
    pub failure: Option<(&'static str, Vec<String>)>,
}

/// Checks `p` exhaustively (stops at the first counterexample).
pub fn run(p: Params, threads: usize) -> Outcome {
    let model = Redlock::new(p);
    let names: Vec<&'static str> = model.properties().iter().map(|p| p.name).collect();
    let started = Instant::now();
    let checker = model
        .clone()
        .checker()
        .threads(threads)
        .finish_when(HasDiscoveries::AnyFailures);
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
    names: &[&'static str],
    started: Instant,
) -> Outcome {
    let failure = names.iter().find_map(|&name| {
        checker.discovery(name).map(|path| {
            let actions = path
                .into_actions()
                .iter()
                .map(|a| model.format_action(a))
                .collect();
            (name, actions)
        })
    });
    Outcome {
        config: model.p.name,
        states: checker.state_count(),
        unique: checker.unique_state_count(),
        took: started.elapsed(),
        failure,
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
}
