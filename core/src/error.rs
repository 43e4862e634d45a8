//! One error type for every operation, with the per-node report that explains it.

use std::fmt;
use std::time::Duration;

/// What went wrong, in the vocabulary every binding maps exactly once (SPEC §5).
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
    /// The node URL with any password replaced by `***`.
    pub url: String,
    /// The node's vote.
    pub vote: Vote,
    /// The error text when the vote is `Error` or `Timeout` (passwords removed).
    pub error: Option<String>,
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
