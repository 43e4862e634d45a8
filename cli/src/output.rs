//! Everything ironlock itself prints: human messages and the progress line on stderr, JSON
//! objects (one per line) when `--json` is given. `run` writes its JSON events to stderr because
//! stdout belongs to the command; `status`, `release` and `check` write their one result object
//! to stdout.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ironlock::{Error, Report, Vote};
use serde_json::{Value, json};

/// How much to print, and where.
pub struct Output {
    quiet: bool,
    verbose: bool,
    json: bool,
    /// stderr is a terminal: the progress line may be drawn.
    tty: bool,
    /// A progress line is on screen and must be cleared before the next message.
    drawn: AtomicBool,
}

impl Output {
    pub fn new(quiet: bool, verbose: bool, json: bool) -> Self {
        Output {
            quiet,
            verbose,
            json,
            tty: std::io::stderr().is_terminal(),
            drawn: AtomicBool::new(false),
        }
    }

    /// True when results go out as JSON.
    pub fn json(&self) -> bool {
        self.json
    }

    /// True when human-readable results may be printed (not `--json`, not `-q`).
    pub fn human(&self) -> bool {
        !self.json && !self.quiet
    }

    /// A diagnostic that always matters (errors): shown unless `-q` or `--json`.
    pub fn error(&self, message: &str) {
        if self.human() {
            self.line(&format!("ironlock: {message}"));
        }
    }

    /// A detail shown only with `-v`.
    pub fn info(&self, message: &str) {
        if self.verbose && self.human() {
            self.line(&format!("ironlock: {message}"));
        }
    }

    /// One JSON event of `run`, on stderr, only with `--json`.
    pub fn event(&self, event: &str, mut fields: Value) {
        if !self.json {
            return;
        }
        if let Value::Object(map) = &mut fields {
            map.insert("event".into(), Value::from(event));
        }
        self.line(&fields.to_string());
    }

    /// Redraws the progress line in place; only on a terminal, never with `-q` or `--json`.
    pub fn progress(&self, text: &str) {
        if !(self.tty && self.human()) {
            return;
        }
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K{text}");
        let _ = err.flush();
        self.drawn.store(true, Ordering::Relaxed);
    }

    /// Removes the progress line, if one is drawn.
    pub fn clear_progress(&self) {
        if self.drawn.swap(false, Ordering::Relaxed) {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
    }

    fn line(&self, text: &str) {
        self.clear_progress();
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{text}");
    }
}

/// Milliseconds as a JSON-friendly float with microsecond precision.
pub fn millis(d: Duration) -> f64 {
    (d.as_micros() as f64) / 1000.0
}

/// A report as JSON: `{"elapsed_ms":…, "rounds":…, "nodes":[{"url","vote","error"}]}`, in the
/// core's one encoding ([`Report::to_json`]).
pub fn report_json(report: &Report) -> Value {
    serde_json::from_str(&report.to_json()).expect("the core writes valid JSON")
}

/// "3 for, 2 against" — only the votes that occurred, in a fixed order.
pub fn votes_summary(report: &Report) -> String {
    let order = [
        Vote::For,
        Vote::Against,
        Vote::NotEligible,
        Vote::Error,
        Vote::Timeout,
        Vote::Pending,
    ];
    let parts: Vec<String> = order
        .iter()
        .filter_map(|&v| {
            let n = report.count(v);
            (n > 0).then(|| format!("{n} {}", v.as_str().replace('_', " ")))
        })
        .collect();
    if parts.is_empty() {
        "no votes".to_owned()
    } else {
        parts.join(", ")
    }
}

/// An error as JSON, with the exit code it leads to.
pub fn error_json(err: &Error, exit_code: u8) -> Value {
    json!({
        "kind": err.kind().code(),
        "message": err.message(),
        "exit_code": exit_code,
        "report": err.report().map(report_json),
    })
}

/// Seconds with one decimal, for humans.
pub fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ironlock::NodeReport;

    fn report(votes: &[Vote]) -> Report {
        Report {
            nodes: votes
                .iter()
                .enumerate()
                .map(|(i, &vote)| NodeReport {
                    url: format!("redis://127.0.0.1:{}", 7000 + i).into(),
                    vote,
                    error: (vote == Vote::Error).then(|| "connection refused".to_owned()),
                })
                .collect(),
            elapsed: Duration::from_micros(1500),
            rounds: 2,
        }
    }

    #[test]
    fn summarises_votes_in_a_fixed_order() {
        let r = report(&[Vote::Against, Vote::For, Vote::NotEligible, Vote::For]);
        assert_eq!(votes_summary(&r), "2 for, 1 against, 1 not eligible");
        assert_eq!(votes_summary(&report(&[])), "no votes");
    }

    #[test]
    fn report_json_has_every_node() {
        let v = report_json(&report(&[Vote::For, Vote::Error]));
        assert_eq!(v["elapsed_ms"], 1.5);
        assert_eq!(v["rounds"], 2);
        assert_eq!(v["nodes"][1]["vote"], "error");
        assert_eq!(v["nodes"][1]["error"], "connection refused");
        assert_eq!(v["nodes"][0]["error"], Value::Null);
    }
}
