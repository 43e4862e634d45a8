//! One error type for every operation, with the per-node report that explains it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// What went wrong, in the vocabulary every binding maps exactly once (the same kinds, and the
/// same [`ErrorKind::code`] strings, in Rust, C, Python and Node).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// No quorum, and at least one node answered that another token holds a key.
    Contended,
    /// No quorum, and no node said the lock is held: nodes down, timed out, not eligible,
    /// or the round took longer than the ttl allows.
    Unavailable,
    /// The lock expired, was released, or was taken over.
    Lost,
    /// Bad input; the message names the argument.
    InvalidArgument,
    /// A node URL cannot be used at all (bad scheme, unresolvable host).
    Connection,
    /// A bug in ironlock (including a caught panic in a binding).
    Internal,
}

impl ErrorKind {
    /// The stable upper-case code used by the Node binding and in logs.
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::Contended => "CONTENDED",
            ErrorKind::Unavailable => "UNAVAILABLE",
            ErrorKind::Lost => "LOST",
            ErrorKind::InvalidArgument => "INVALID_ARGUMENT",
            ErrorKind::Connection => "CONNECTION",
            ErrorKind::Internal => "INTERNAL",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// How one node answered in one round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Vote {
    /// The node did what was asked (set, extended or deleted the keys).
    For,
    /// The node refused: another token holds a key (acquire) or our token is gone (extend, release).
    Against,
    /// The node answered with an error, or is not connected.
    Error,
    /// The node did not answer within `node_timeout`.
    Timeout,
    /// The node said yes but is quarantined after a restart; its vote does not count.
    NotEligible,
    /// The outcome was decided before this node answered; its reply is drained in the background.
    Pending,
    /// Extend only: the node had restarted and lost the keys; the extension wrote them back
    /// (re-seating, the `reseat` setting). It counts as "for" unless the node is still in
    /// restart quarantine (then `error` says so).
    Reseated,
}

impl Vote {
    /// Lower-case name used in reports of every binding.
    pub fn as_str(self) -> &'static str {
        match self {
            Vote::For => "for",
            Vote::Against => "against",
            Vote::Error => "error",
            Vote::Timeout => "timeout",
            Vote::NotEligible => "not_eligible",
            Vote::Pending => "pending",
            Vote::Reseated => "reseated",
        }
    }
}

impl fmt::Display for Vote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One node's part in a round. The URL never contains a password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeReport {
    /// The node URL with any password replaced by `***` (shared by every report of the node:
    /// a round allocates no copy of it).
    pub url: Arc<str>,
    /// The node's vote.
    pub vote: Vote,
    /// The error text when the vote is `Error` or `Timeout` (passwords removed), or why a "yes"
    /// (`NotEligible`, `Reseated`) did not count.
    pub error: Option<String>,
}

impl NodeReport {
    /// Whether this node's vote counted towards the quorum.
    pub fn counted(&self) -> bool {
        match self.vote {
            Vote::For => true,
            Vote::Reseated => self.error.is_none(),
            _ => false,
        }
    }

    /// Whether the node may hold the keys with our token after this round: it said "yes"
    /// (counted or not), or the round did not wait for its answer (`Pending`, `Timeout`).
    pub fn may_hold(&self) -> bool {
        matches!(
            self.vote,
            Vote::For | Vote::NotEligible | Vote::Reseated | Vote::Pending | Vote::Timeout
        )
    }
}

/// What every node said in the last round of an operation, and how long that round took.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    /// One entry per configured node, in configuration order.
    pub nodes: Vec<NodeReport>,
    /// Monotonic time from sending the first request to deciding the outcome.
    pub elapsed: Duration,
    /// Rounds run by the operation (1 for extend and release).
    pub rounds: u32,
}

impl Report {
    /// Number of nodes whose vote is `vote`.
    pub fn count(&self, vote: Vote) -> usize {
        self.nodes.iter().filter(|n| n.vote == vote).count()
    }
}

impl Report {
    /// One line saying why the nodes that did not vote "for" did not, for error messages:
    /// "3 of 3 nodes are in restart quarantine (restarted 2 s ago; counted again in 59 s; see restart_quarantine)" or
    /// "2 of 5 nodes did not grant: connection refused (redis://…:7002), timeout (…)", followed by
    /// "; 1 of 5 nodes had not answered when the outcome was decided" when the round did not
    /// wait for every node. With the nodes that voted "for" (and counted), its counts add up to
    /// every node of the report. `verb` names the operation ("grant", "extend"); `against` is
    /// what a "no" means for it ("held by another client" for acquire) unless the node's report
    /// says why. Empty when every node voted "for".
    pub fn summary(&self, verb: &str, against: &str) -> String {
        let n = self.nodes.len();
        let others: Vec<&NodeReport> = self
            .nodes
            .iter()
            .filter(|r| !r.counted() && r.vote != Vote::Pending)
            .collect();
        let mut parts = Vec::with_capacity(2);
        let quarantined = |r: &&NodeReport| matches!(r.vote, Vote::NotEligible | Vote::Reseated);
        if others.is_empty() {
            // Every node that answered counted.
        } else if others.iter().all(quarantined) {
            let why = others[0]
                .error
                .as_deref()
                .unwrap_or("in restart quarantine");
            // "in restart quarantine: …" or "in failover quarantine: …" names the state; any
            // other reason (the same server as another node) is said as it is.
            let (state, why) = ["in restart quarantine", "in failover quarantine"]
                .iter()
                .find_map(|s| Some((*s, why.strip_prefix(s)?.strip_prefix(": ")?)))
                .unwrap_or(("not counted", why));
            let verb = if others.len() == 1 { "is" } else { "are" };
            parts.push(format!(
                "{} of {n} nodes {verb} {state} ({why})",
                others.len()
            ));
        } else {
            let each: Vec<String> = others
                .iter()
                .map(|r| {
                    let why = match (r.vote, r.error.as_deref()) {
                        (Vote::Against, Some(e)) => e.to_owned(),
                        (Vote::Against, None) => against.to_owned(),
                        (Vote::Timeout, _) => "timeout".to_owned(),
                        (_, Some(e)) => e.strip_prefix("not connected: ").unwrap_or(e).to_owned(),
                        (v, None) => v.as_str().to_owned(),
                    };
                    format!("{why} ({})", r.url)
                })
                .collect();
            parts.push(format!(
                "{} of {n} nodes did not {verb}: {}",
                others.len(),
                each.join(", ")
            ));
        }
        let pending = self.count(Vote::Pending);
        if pending > 0 {
            parts.push(format!(
                "{pending} of {n} nodes had not answered when the outcome was decided"
            ));
        }
        parts.join("; ")
    }

    /// The report as JSON, the one encoding every binding and the CLI use:
    /// `{"elapsed_ms":1.234,"rounds":1,"nodes":[{"url":"…","vote":"for","error":null},…]}`
    /// (`elapsed_ms` with microsecond precision; `vote` as [`Vote::as_str`]).
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(48 + self.nodes.len() * 64);
        self.write_json(&mut out);
        out
    }

    fn write_json(&self, out: &mut String) {
        use fmt::Write as _;
        let elapsed_ms = self.elapsed.as_micros() as f64 / 1000.0;
        let _ = write!(
            out,
            "{{\"elapsed_ms\":{elapsed_ms},\"rounds\":{},\"nodes\":[",
            self.rounds
        );
        for (i, n) in self.nodes.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str("{\"url\":");
            json_string(out, &n.url);
            let _ = write!(out, ",\"vote\":\"{}\",\"error\":", n.vote.as_str());
            match &n.error {
                Some(e) => json_string(out, e),
                None => out.push_str("null"),
            }
            out.push('}');
        }
        out.push_str("]}");
    }
}

/// `": summary"`, or nothing when the summary is empty (for messages).
pub(crate) fn with_summary(summary: String) -> String {
    if summary.is_empty() {
        summary
    } else {
        format!(": {summary}")
    }
}

/// Appends `s` as a JSON string literal.
fn json_string(out: &mut String, s: &str) {
    use fmt::Write as _;
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "round {} in {:?}:", self.rounds, self.elapsed)?;
        for n in &self.nodes {
            write!(f, " {}={}", n.url, n.vote)?;
            if let Some(e) = &n.error {
                write!(f, " ({e})")?;
            }
            f.write_str(";")?;
        }
        Ok(())
    }
}

/// An ironlock error: a kind, a message, and (for Redis operations) the per-node report.
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    report: Option<Box<Report>>,
}

/// Shorthand for `std::result::Result<T, ironlock::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A new error without a report.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            report: None,
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidArgument, message)
    }

    pub(crate) fn with_report(mut self, report: Report) -> Self {
        self.report = Some(Box::new(report));
        self
    }

    /// The error's kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message without the report.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The per-node report of the round that failed, when Redis was involved.
    pub fn report(&self) -> Option<&Report> {
        self.report.as_deref()
    }

    /// The same error with the core's setting names in its message and per-node errors spelled
    /// as a binding's callers give them ([`crate::respell`]): "set tls_client_cert" becomes
    /// "set ssl_certfile" in Python, "set tls.cert" in Node.
    pub fn respelled(mut self, names: &[(&str, &str)]) -> Error {
        self.message = crate::respell(&self.message, names);
        if let Some(report) = self.report.as_deref_mut() {
            for n in &mut report.nodes {
                if let Some(e) = &n.error {
                    n.error = Some(crate::respell(e, names));
                }
            }
        }
        self
    }
}

impl Error {
    /// The error as JSON: `{"code":"CONTENDED","message":"…","report":{…}}` (`report` as
    /// [`Report::to_json`], or `null`).
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(96);
        out.push_str("{\"code\":\"");
        out.push_str(self.kind.code());
        out.push_str("\",\"message\":");
        json_string(&mut out, &self.message);
        out.push_str(",\"report\":");
        match &self.report {
            Some(r) => r.write_json(&mut out),
            None => out.push_str("null"),
        }
        out.push('}');
        out
    }

    /// The `Internal` error for a Rust panic a binding caught at its boundary (the payload of
    /// `std::panic::catch_unwind`), in the same words in every language.
    pub fn from_panic(payload: &(dyn std::any::Any + Send)) -> Error {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic payload".to_owned());
        Error::new(
            ErrorKind::Internal,
            format!("internal error: a Rust panic was caught at the binding boundary: {what}"),
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(r) = &self.report {
            write!(f, " [{r}]")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("message", &self.message)
            .field("report", &self.report)
            .finish()
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(votes: &[(Vote, Option<&str>)]) -> Report {
        Report {
            nodes: votes
                .iter()
                .enumerate()
                .map(|(i, (vote, error))| NodeReport {
                    url: format!("redis://h:{i}").into(),
                    vote: *vote,
                    error: error.map(str::to_owned),
                })
                .collect(),
            elapsed: Duration::from_millis(1),
            rounds: 1,
        }
    }

    /// The "K of N" counts of a summary.
    fn counts(summary: &str) -> Vec<(usize, usize)> {
        let words: Vec<&str> = summary.split_whitespace().collect();
        words
            .windows(3)
            .filter(|w| w[1] == "of")
            .filter_map(|w| Some((w[0].parse().ok()?, w[2].parse().ok()?)))
            .collect()
    }

    #[test]
    fn a_summary_accounts_for_every_node_of_the_report() {
        use Vote::*;
        let quarantine = Some("in restart quarantine: restarted 2 s ago; counted again in 59 s");
        let cases: Vec<Vec<(Vote, Option<&str>)>> = vec![
            // "0 of 3 nodes granted": one refusal decided the round, two replies were out.
            vec![(Against, None), (Pending, None), (Pending, None)],
            vec![(For, None), (For, None), (Against, None)],
            vec![(For, None), (NotEligible, quarantine), (Pending, None)],
            vec![
                (NotEligible, quarantine),
                (NotEligible, quarantine),
                (Pending, None),
            ],
            vec![
                (For, None),
                (Against, Some("in use with limit 2")),
                (Error, Some("not connected: connection refused")),
                (Timeout, Some("timed out")),
                (NotEligible, quarantine),
                (Pending, None),
                (Reseated, None),
                (Reseated, Some("in restart quarantine: restarted 1 s ago")),
            ],
            vec![(For, None), (Pending, None)],
            vec![(For, None), (For, None)],
        ];
        for votes in cases {
            let r = report(&votes);
            let s = r.summary("grant", "full");
            let counted = r.nodes.iter().filter(|n| n.counted()).count();
            let said = counts(&s);
            assert!(said.iter().all(|&(_, n)| n == votes.len()), "{s}");
            let total: usize = said.iter().map(|&(k, _)| k).sum();
            assert_eq!(counted + total, votes.len(), "{votes:?}: {s:?}");
            assert_eq!(s.is_empty(), counted == votes.len(), "{s:?}");
        }
        let r = report(&[(Against, None), (Pending, None), (Pending, None)]);
        assert_eq!(
            r.summary("grant", "full"),
            "1 of 3 nodes did not grant: full (redis://h:0); 2 of 3 nodes had not answered when the outcome was decided"
        );
        // A refusal that says why is named by its reason.
        let r = report(&[(For, None), (Against, Some("in use with limit 2"))]);
        assert_eq!(
            r.summary("grant", "full"),
            "1 of 2 nodes did not grant: in use with limit 2 (redis://h:1)"
        );
    }

    #[test]
    fn one_json_encoding_with_elapsed_and_rounds() {
        let report = Report {
            nodes: vec![
                NodeReport {
                    url: "redis://a:***@h:1".into(),
                    vote: Vote::For,
                    error: None,
                },
                NodeReport {
                    url: "redis://h:2".into(),
                    vote: Vote::Error,
                    error: Some("say \"no\"\n\u{1}".into()),
                },
            ],
            elapsed: Duration::from_micros(1234),
            rounds: 3,
        };
        assert_eq!(
            report.to_json(),
            r#"{"elapsed_ms":1.234,"rounds":3,"nodes":[{"url":"redis://a:***@h:1","vote":"for","error":null},{"url":"redis://h:2","vote":"error","error":"say \"no\"\n\u0001"}]}"#
        );
        let e = Error::new(ErrorKind::Contended, "held \\ elsewhere").with_report(report);
        let json = e.to_json();
        assert!(
            json.starts_with(
                r#"{"code":"CONTENDED","message":"held \\ elsewhere","report":{"elapsed_ms":1.234"#
            ),
            "{json}"
        );
        assert_eq!(
            Error::new(ErrorKind::Lost, "x").to_json(),
            r#"{"code":"LOST","message":"x","report":null}"#
        );
        let p = std::panic::catch_unwind(|| panic!("boom {}", 1)).unwrap_err();
        let e = Error::from_panic(&*p);
        assert_eq!(e.kind(), ErrorKind::Internal);
        assert!(e.message().ends_with("boom 1"), "{e}");
    }
}
