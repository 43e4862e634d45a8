//! Why an acquire round that did not reach its quorum failed: the error kind and the words, per
//! primitive (a lock, a read or write, a permit), from how the nodes answered.

use crate::error::{ErrorKind, Report, Vote};
use crate::lock::Kind;
use crate::quorum::{full_to_explain, split_vote};

/// How the nodes of a failed round answered, for its error.
pub(crate) struct Counts {
    pub(crate) n: usize,
    /// Eligible "yes" votes.
    pub(crate) granted: usize,
    /// "No": held by another client, or full.
    pub(crate) full: usize,
    /// Error, timeout, or no answer before the round was decided.
    pub(crate) unknown: usize,
}

impl Counts {
    pub(crate) fn of(report: &Report, granted: usize) -> Counts {
        Counts {
            n: report.nodes.len(),
            granted,
            full: report.count(Vote::Against),
            unknown: report.count(Vote::Error)
                + report.count(Vote::Timeout)
                + report.count(Vote::Pending),
        }
    }
}

/// Why a lock round that did not reach a quorum failed: its kind and words; `None`
/// when a quorum granted (no validity left, then).
pub(crate) fn lock_failure(q: usize, c: &Counts, behind: bool) -> Option<(ErrorKind, String)> {
    if c.granted >= q {
        return None;
    }
    Some(if c.full == 0 {
        (
            ErrorKind::Unavailable,
            "no quorum of eligible nodes answered".to_owned(),
        )
    } else if behind {
        (
            ErrorKind::Contended,
            "the lock is held elsewhere or earlier fair waiters are in line".to_owned(),
        )
    } else {
        (
            ErrorKind::Contended,
            "the lock is held elsewhere".to_owned(),
        )
    })
}

/// Why a read or write round that did not reach a quorum failed (`behind`: a fair waiter that
/// earlier tickets held back).
pub(crate) fn rw_failure(
    kind: Kind,
    q: usize,
    c: &Counts,
    behind: bool,
) -> Option<(ErrorKind, String)> {
    if c.granted >= q {
        return None;
    }
    if c.full == 0 {
        return Some((
            ErrorKind::Unavailable,
            "no quorum of eligible nodes answered".to_owned(),
        ));
    }
    let why = if kind == Kind::Read {
        "a writer (or a plain lock of the same name) holds it, or a writer is waiting for it"
    } else {
        "readers, another writer or a plain lock of the same name hold it"
    };
    let line = if behind {
        ", or earlier fair waiters are in line"
    } else {
        ""
    };
    Some((ErrorKind::Contended, format!("{why}{line}")))
}

/// Why a permit round that did not reach Q(limit) failed. Full nodes make it
/// Contended, as a lock held elsewhere does; but only as many full nodes as `limit` permits
/// held elsewhere would fill ([`full_to_explain`]) show that every permit is held. Fewer, when
/// enough nodes answered to grant it had they agreed, is a split vote among concurrent
/// requests: a permit may be free, and a retry may get it.
pub(crate) fn permit_failure(
    q: usize,
    limit: u32,
    c: &Counts,
    behind: bool,
) -> Option<(ErrorKind, String)> {
    let n = c.n;
    if c.granted >= q {
        return None;
    }
    if c.full == 0 {
        // SPEC §11: the quorum grows with the limit; say how many nodes it takes.
        return Some((
            ErrorKind::Unavailable,
            format!(
                "not enough eligible nodes answered: a limit of {limit} needs {q} of the {n} nodes to admit it, so at most {} may be down",
                n - q
            ),
        ));
    }
    let explained = full_to_explain(n, q, limit);
    let (g, f, u) = (c.granted, c.full, c.unknown);
    let why = if behind {
        format!("all {limit} permits are held or promised to earlier fair waiters")
    } else if f >= explained {
        format!("all {limit} permits are held elsewhere")
    } else if split_vote(q, explained, g, f, u) {
        format!(
            "the nodes disagreed: {g} of {n} admitted it and {f} of {n} {} full, fewer than the {explained} that {limit} permits held elsewhere would fill: concurrent requests took the seats, so a permit may be free; retry",
            if f == 1 { "was" } else { "were" }
        )
    } else if g + f < q {
        format!(
            "{f} of {n} nodes {} full and too few others could admit it: a limit of {limit} needs {q} of the {n} nodes to admit it, so at most {} may be down",
            if f == 1 { "was" } else { "were" },
            n - q
        )
    } else {
        format!(
            "all {limit} permits may be held elsewhere: {f} of {n} nodes {} full and {u} did not answer",
            if f == 1 { "was" } else { "were" }
        )
    };
    Some((ErrorKind::Contended, why))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::error::NodeReport;
    use crate::quorum;

    fn report(votes: &[Vote]) -> Report {
        Report {
            nodes: votes
                .iter()
                .enumerate()
                .map(|(i, &vote)| NodeReport {
                    url: format!("redis://n{i}").into(),
                    vote,
                    error: None,
                })
                .collect(),
            elapsed: Duration::from_millis(1),
            rounds: 1,
        }
    }

    fn counts(n: usize, granted: usize, full: usize, unknown: usize) -> Counts {
        Counts {
            n,
            granted,
            full,
            unknown,
        }
    }

    #[test]
    fn a_failed_rounds_counts_put_errors_timeouts_and_the_unanswered_together() {
        use Vote::{Against, Error, For, NotEligible, Pending, Timeout};
        let c = Counts::of(
            &report(&[For, Against, Against, Error, Timeout, Pending, NotEligible]),
            1,
        );
        assert_eq!((c.n, c.granted, c.full, c.unknown), (7, 1, 2, 3));
        let c = Counts::of(&report(&[Timeout, Timeout, Against]), 0);
        assert_eq!((c.n, c.full, c.unknown), (3, 1, 2));
        let c = Counts::of(&report(&[Pending, Pending, For]), 1);
        assert_eq!((c.full, c.unknown), (0, 2));
    }

    #[test]
    fn a_lock_round_without_a_quorum_is_contended_only_when_a_node_refused() {
        // A quorum granted: the failure is elsewhere (no validity left).
        assert_eq!(lock_failure(3, &counts(5, 3, 2, 0), false), None);
        let (kind, why) = lock_failure(3, &counts(5, 2, 0, 3), false).unwrap();
        assert_eq!(kind, ErrorKind::Unavailable, "{why}");
        let (kind, why) = lock_failure(3, &counts(5, 2, 1, 2), false).unwrap();
        assert_eq!(
            (kind, why.as_str()),
            (ErrorKind::Contended, "the lock is held elsewhere")
        );
        let (kind, why) = lock_failure(3, &counts(5, 0, 5, 0), true).unwrap();
        assert_eq!(kind, ErrorKind::Contended);
        assert!(why.contains("earlier fair waiters"), "{why}");
    }

    #[test]
    fn a_read_or_write_round_without_a_quorum_names_what_holds_it() {
        assert_eq!(rw_failure(Kind::Read, 2, &counts(3, 2, 1, 0), false), None);
        assert_eq!(rw_failure(Kind::Write, 2, &counts(3, 3, 0, 0), false), None);
        let (kind, _) = rw_failure(Kind::Write, 2, &counts(3, 1, 0, 2), false).unwrap();
        assert_eq!(kind, ErrorKind::Unavailable);
        let (kind, why) = rw_failure(Kind::Read, 2, &counts(3, 1, 2, 0), false).unwrap();
        assert_eq!(kind, ErrorKind::Contended);
        assert!(why.starts_with("a writer (or a plain lock"), "{why}");
        let (kind, why) = rw_failure(Kind::Write, 2, &counts(3, 0, 2, 1), false).unwrap();
        assert_eq!(kind, ErrorKind::Contended);
        assert_eq!(
            why,
            "readers, another writer or a plain lock of the same name hold it"
        );
        let (_, why) = rw_failure(Kind::Write, 2, &counts(3, 0, 3, 0), true).unwrap();
        assert!(
            why.ends_with(", or earlier fair waiters are in line"),
            "{why}"
        );
    }

    #[test]
    fn a_permit_round_tells_a_full_semaphore_from_a_split_vote_and_from_nodes_down() {
        // N = 5, limit 2: Q = 4; two permits held elsewhere fill at least 3 nodes.
        let q = quorum::semaphore_quorum(5, 2);
        assert_eq!((q, full_to_explain(5, q, 2)), (4, 3));
        assert_eq!(permit_failure(q, 2, &counts(5, 4, 1, 0), false), None);
        let (kind, why) = permit_failure(q, 2, &counts(5, 3, 0, 2), false).unwrap();
        assert_eq!(kind, ErrorKind::Unavailable);
        assert!(
            why.contains("needs 4 of the 5 nodes") && why.contains("at most 1 may be down"),
            "{why}"
        );
        let full = |g, f, u| permit_failure(q, 2, &counts(5, g, f, u), false).unwrap();
        let (kind, why) = full(0, 3, 2);
        assert_eq!(kind, ErrorKind::Contended);
        assert_eq!(why, "all 2 permits are held elsewhere");
        let (kind, why) = full(2, 3, 0);
        assert_eq!(
            (kind, why.as_str()),
            (ErrorKind::Contended, "all 2 permits are held elsewhere")
        );
        // 3 admitted, 2 full (fewer than 3): the seats went to concurrent requests.
        let (kind, why) = full(3, 2, 0);
        assert_eq!(kind, ErrorKind::Contended);
        assert!(
            why.starts_with("the nodes disagreed: 3 of 5 admitted it and 2 of 5 were full"),
            "{why}"
        );
        // Too few answers to be admitted had they agreed.
        let (_, why) = full(1, 2, 2);
        assert!(
            why.starts_with("2 of 5 nodes were full and too few others"),
            "{why}"
        );
        let (_, why) = full(0, 1, 4);
        assert!(
            why.starts_with("1 of 5 nodes was full and too few others"),
            "{why}"
        );
        // Enough answers, but an unknown node could be the missing full one: not provably split.
        let (_, why) = full(2, 2, 1);
        assert_eq!(
            why,
            "all 2 permits may be held elsewhere: 2 of 5 nodes were full and 1 did not answer"
        );
        // N = 9, limit 2: Q = 7, explained by 5 full. 3 admitted and 3 full are 6 answers that
        // could not make 7 even had they agreed: too few, not "may be held elsewhere".
        let q9 = quorum::semaphore_quorum(9, 2);
        assert_eq!((q9, full_to_explain(9, q9, 2)), (7, 5));
        let (_, why) = permit_failure(q9, 2, &counts(9, 3, 3, 3), false).unwrap();
        assert!(
            why.starts_with("3 of 9 nodes were full and too few others"),
            "{why}"
        );
        // A fair waiter behind others: its refusals may be its place in line.
        let (kind, why) = permit_failure(q, 2, &counts(5, 0, 5, 0), true).unwrap();
        assert_eq!(kind, ErrorKind::Contended);
        assert!(why.contains("promised to earlier fair waiters"), "{why}");
    }
}
