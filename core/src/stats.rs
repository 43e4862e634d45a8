//! What a manager counts: one snapshot type with the same field names in every
//! language, its JSON (the bindings' one encoder) and its Prometheus text (`ironlock status
//! --prometheus`). Every event is recorded once, here: in the manager's atomics and through the
//! `metrics` crate facade (a no-op until the application installs a recorder), so that any
//! exporter plugs in.
//!
//! No metric carries a URL, a password or a resource name: labels are fixed words.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::config::cut;
use crate::error::{Error, Result};

/// Upper bounds (seconds) of the latency histograms' buckets; the last bucket is +Inf.
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// One event a manager counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// An acquire call that returned a lock.
    Granted,
    /// An acquire call that failed because the lock is held elsewhere.
    Contended,
    /// An acquire call that failed for want of a quorum of eligible nodes.
    Unavailable,
    /// A round of an acquire (the first and every retry).
    Round,
    /// A retry: a round after the first of one acquire call.
    Retry,
    /// An extension a quorum granted.
    Extended,
    /// An extension that failed (the lock may still be valid, or lost).
    ExtendFailed,
    /// A release of a lock the manager granted.
    Released,
    /// A lock marked lost while held.
    Lost,
}

impl Event {
    fn index(self) -> usize {
        self as usize
    }

    /// Its counter through the `metrics` facade. Literal names and labels: the macro keeps each
    /// key in a static, so counting allocates nothing (a label given as a variable builds a key,
    /// with a vector of labels, on every call).
    fn count_metric(self) -> metrics::Counter {
        use metrics::counter;
        match self {
            Event::Granted => counter!("ironlock_acquires_total", "outcome" => "granted"),
            Event::Contended => counter!("ironlock_acquires_total", "outcome" => "contended"),
            Event::Unavailable => counter!("ironlock_acquires_total", "outcome" => "unavailable"),
            Event::Round => counter!("ironlock_rounds_total"),
            Event::Retry => counter!("ironlock_retries_total"),
            Event::Extended => counter!("ironlock_extensions_total", "outcome" => "granted"),
            Event::ExtendFailed => counter!("ironlock_extensions_total", "outcome" => "failed"),
            Event::Released => counter!("ironlock_releases_total"),
            Event::Lost => counter!("ironlock_locks_lost_total"),
        }
    }
}

const EVENTS: usize = 9;

/// A latency histogram with fixed buckets ([`LATENCY_BUCKETS`]), lock-free.
pub(crate) struct Histogram {
    name: &'static str,
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

impl Histogram {
    const fn new(name: &'static str) -> Self {
        Histogram {
            name,
            buckets: [const { AtomicU64::new(0) }; LATENCY_BUCKETS.len() + 1],
            sum_micros: AtomicU64::new(0),
        }
    }

    fn record(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|&le| secs <= le)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
        metrics::histogram!(self.name).record(secs);
    }

    fn snapshot(&self) -> Latency {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        Latency {
            count: counts.iter().sum(),
            sum_seconds: self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6,
            counts,
        }
    }
}

/// The manager's counters (one per manager, shared by its locks).
pub(crate) struct Recorder {
    events: [AtomicU64; EVENTS],
    acquire: Histogram,
    round: Histogram,
}

impl Recorder {
    pub(crate) const fn new() -> Self {
        Recorder {
            events: [const { AtomicU64::new(0) }; EVENTS],
            acquire: Histogram::new("ironlock_acquire_seconds"),
            round: Histogram::new("ironlock_round_seconds"),
        }
    }

    /// Counts one `event`, here and through the `metrics` facade.
    pub(crate) fn note(&self, event: Event) {
        self.note_n(event, 1);
    }

    /// Records `n` events of one kind at once.
    pub(crate) fn note_n(&self, event: Event, n: u64) {
        if n == 0 {
            return;
        }
        self.events[event.index()].fetch_add(n, Ordering::Relaxed);
        event.count_metric().increment(n);
    }

    /// Records how long one acquire call took, from the call to its grant or failure.
    pub(crate) fn acquire_took(&self, d: Duration) {
        self.acquire.record(d);
    }

    /// Records how long one acquire round took to be decided.
    pub(crate) fn round_took(&self, d: Duration) {
        self.round.record(d);
    }

    fn get(&self, event: Event) -> u64 {
        self.events[event.index()].load(Ordering::Relaxed)
    }

    /// The manager-level part of a snapshot; the caller adds the node and notifier counters.
    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            granted: self.get(Event::Granted),
            contended: self.get(Event::Contended),
            unavailable: self.get(Event::Unavailable),
            rounds: self.get(Event::Round),
            retries: self.get(Event::Retry),
            extensions: self.get(Event::Extended),
            extension_failures: self.get(Event::ExtendFailed),
            releases: self.get(Event::Released),
            lost: self.get(Event::Lost),
            acquire_latency: self.acquire.snapshot(),
            round_latency: self.round.snapshot(),
            ..Stats::default()
        }
    }
}

/// A latency histogram's snapshot: `counts[i]` calls took at most `LATENCY_BUCKETS[i]` seconds
/// and more than the bound before it; the last count is above the last bound.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Latency {
    /// Calls per bucket (not cumulative), `LATENCY_BUCKETS.len() + 1` of them.
    pub counts: Vec<u64>,
    /// Calls recorded.
    pub count: u64,
    /// Their total duration.
    pub sum_seconds: f64,
}

/// A manager's counters since it was created (`LockManager::stats`). The same fields, with the
/// same names, in every language: Python `manager.stats()` (a dict), Node `manager.stats()`, C
/// `ironlock_manager_stat()` / `ironlock_manager_stats_json()`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// Acquire calls that returned a lock.
    pub granted: u64,
    /// Acquire calls that failed because the lock is held elsewhere.
    pub contended: u64,
    /// Acquire calls that failed for want of a quorum of eligible nodes.
    pub unavailable: u64,
    /// Acquire rounds run (every try of every call).
    pub rounds: u64,
    /// Rounds after the first of their call.
    pub retries: u64,
    /// Waits ended early by a release notification.
    pub wakeups: u64,
    /// Extensions a quorum granted (by `extend` and by auto-extension).
    pub extensions: u64,
    /// Extensions that failed.
    pub extension_failures: u64,
    /// Releases of locks this manager granted.
    pub releases: u64,
    /// Locks marked lost while held.
    pub lost: u64,
    /// Keys written back on restarted nodes by extensions (re-seating), over every node.
    pub reseats: u64,
    /// Times a node entered restart quarantine on (re)connecting, over every node.
    pub quarantines: u64,
    /// Successful reconnections, over every node.
    pub reconnects: u64,
    /// Per-node votes by kind, summed over the nodes: counted "yes".
    pub votes_for: u64,
    /// "No" votes.
    pub votes_against: u64,
    /// Errors (including "not connected").
    pub votes_error: u64,
    /// Timeouts.
    pub votes_timeout: u64,
    /// "Yes" votes not counted because the node was in restart quarantine.
    pub votes_not_eligible: u64,
    /// Acquire calls, from the call to the grant or the failure.
    pub acquire_latency: Latency,
    /// Acquire rounds, from the first request to the decision.
    pub round_latency: Latency,
}

/// A counter: its field name, its help text and how to read it from a snapshot.
type Counter = (&'static str, &'static str, fn(&Stats) -> u64);

/// The counters, in the order of the JSON and of the C accessor's names.
const COUNTERS: [Counter; 18] = [
    ("granted", "acquire calls that returned a lock", |s| {
        s.granted
    }),
    (
        "contended",
        "acquire calls that failed: held elsewhere",
        |s| s.contended,
    ),
    (
        "unavailable",
        "acquire calls that failed: no quorum of eligible nodes",
        |s| s.unavailable,
    ),
    ("rounds", "acquire rounds run", |s| s.rounds),
    (
        "retries",
        "acquire rounds after the first of their call",
        |s| s.retries,
    ),
    (
        "wakeups",
        "waits ended early by a release notification",
        |s| s.wakeups,
    ),
    ("extensions", "extensions a quorum granted", |s| {
        s.extensions
    }),
    ("extension_failures", "extensions that failed", |s| {
        s.extension_failures
    }),
    ("releases", "releases of granted locks", |s| s.releases),
    ("lost", "locks lost while held", |s| s.lost),
    ("reseats", "keys re-seated on restarted nodes", |s| {
        s.reseats
    }),
    ("quarantines", "restart quarantines entered by nodes", |s| {
        s.quarantines
    }),
    ("reconnects", "node reconnections", |s| s.reconnects),
    ("votes_for", "node votes: counted yes", |s| s.votes_for),
    ("votes_against", "node votes: no", |s| s.votes_against),
    ("votes_error", "node votes: error", |s| s.votes_error),
    ("votes_timeout", "node votes: timeout", |s| s.votes_timeout),
    (
        "votes_not_eligible",
        "node votes: yes during restart quarantine",
        |s| s.votes_not_eligible,
    ),
];

impl Stats {
    /// A snapshot with every counter at zero and empty histograms of the right shape (a
    /// manager that has not connected yet).
    pub fn zero() -> Stats {
        Recorder::new().snapshot()
    }

    /// The names of the counters (every field but the histograms), in a stable order.
    pub fn counter_names() -> impl Iterator<Item = &'static str> {
        COUNTERS.iter().map(|(name, _, _)| *name)
    }

    /// One counter by its field name, or `None` for a name that is not a counter.
    pub fn counter(&self, name: &str) -> Option<u64> {
        COUNTERS
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|(_, _, get)| get(self))
    }

    /// One counter by its field name, or an `InvalidArgument` error naming the argument `arg`,
    /// quoting at most ~80 characters of the unknown name and listing the known ones.
    pub fn counter_named(&self, arg: &str, name: &str) -> Result<u64> {
        self.counter(name).ok_or_else(|| {
            let known: Vec<&str> = Stats::counter_names().collect();
            Error::invalid(format!(
                "{arg}: no counter named {} (one of {})",
                cut(&format!("{name:?}")),
                known.join(", ")
            ))
        })
    }

    /// The snapshot as one JSON object: every counter by name, and each histogram as
    /// `{"buckets": [upper bounds in s], "counts": [...], "count": n, "sum_seconds": x}`.
    pub fn to_json(&self) -> String {
        let mut out = String::from("{");
        for (name, _, get) in COUNTERS {
            out += &format!("\"{name}\":{},", get(self));
        }
        let bounds: Vec<String> = LATENCY_BUCKETS.iter().map(|b| b.to_string()).collect();
        for (i, (name, h)) in [
            ("acquire_latency", &self.acquire_latency),
            ("round_latency", &self.round_latency),
        ]
        .into_iter()
        .enumerate()
        {
            let counts: Vec<String> = h.counts.iter().map(|c| c.to_string()).collect();
            out += &format!(
                "{}\"{name}\":{{\"buckets\":[{}],\"counts\":[{}],\"count\":{},\"sum_seconds\":{}}}",
                if i > 0 { "," } else { "" },
                bounds.join(","),
                counts.join(","),
                h.count,
                h.sum_seconds
            );
        }
        out + "}"
    }

    /// The snapshot in the Prometheus text exposition format (version 0.0.4), every name
    /// prefixed `ironlock_`; counters end in `_total`, histograms in `_seconds`.
    pub fn prometheus(&self) -> String {
        let mut out = String::new();
        for (name, help, get) in COUNTERS {
            out += &format!(
                "# HELP ironlock_{name}_total {help}\n# TYPE ironlock_{name}_total counter\nironlock_{name}_total {}\n",
                get(self)
            );
        }
        for (name, help, h) in [
            (
                "acquire",
                "acquire calls, call to outcome",
                &self.acquire_latency,
            ),
            (
                "round",
                "acquire rounds, first request to decision",
                &self.round_latency,
            ),
        ] {
            out += &format!(
                "# HELP ironlock_{name}_seconds {help}\n# TYPE ironlock_{name}_seconds histogram\n"
            );
            let mut cumulative = 0;
            for (i, c) in h.counts.iter().enumerate() {
                cumulative += c;
                let le = LATENCY_BUCKETS
                    .get(i)
                    .map_or_else(|| "+Inf".to_owned(), |b| b.to_string());
                out += &format!("ironlock_{name}_seconds_bucket{{le=\"{le}\"}} {cumulative}\n");
            }
            out += &format!(
                "ironlock_{name}_seconds_sum {}\nironlock_{name}_seconds_count {}\n",
                h.sum_seconds, h.count
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Counts what reaches the `metrics` facade, by key (`name{label=value}`).
    #[derive(Default)]
    struct Counting(Mutex<Vec<(String, Arc<std::sync::atomic::AtomicU64>)>>);

    impl metrics::Recorder for Counting {
        fn describe_counter(
            &self,
            _: metrics::KeyName,
            _: Option<metrics::Unit>,
            _: metrics::SharedString,
        ) {
        }
        fn describe_gauge(
            &self,
            _: metrics::KeyName,
            _: Option<metrics::Unit>,
            _: metrics::SharedString,
        ) {
        }
        fn describe_histogram(
            &self,
            _: metrics::KeyName,
            _: Option<metrics::Unit>,
            _: metrics::SharedString,
        ) {
        }
        fn register_counter(
            &self,
            key: &metrics::Key,
            _: &metrics::Metadata<'_>,
        ) -> metrics::Counter {
            let labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            let name = format!("{}{{{}}}", key.name(), labels.join(","));
            let mut all = self.0.lock().unwrap();
            let cell = match all.iter().find(|(n, _)| *n == name) {
                Some((_, c)) => c.clone(),
                None => {
                    let c = Arc::new(std::sync::atomic::AtomicU64::new(0));
                    all.push((name, c.clone()));
                    c
                }
            };
            metrics::Counter::from_arc(cell)
        }
        fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
            metrics::Gauge::noop()
        }
        fn register_histogram(
            &self,
            _: &metrics::Key,
            _: &metrics::Metadata<'_>,
        ) -> metrics::Histogram {
            metrics::Histogram::noop()
        }
    }

    #[test]
    fn each_event_is_counted_under_its_metric_name_and_outcome() {
        let sink = Counting::default();
        let r = Recorder::new();
        metrics::with_local_recorder(&sink, || {
            for (event, times) in [
                (Event::Granted, 3),
                (Event::Contended, 1),
                (Event::Unavailable, 2),
                (Event::Round, 5),
                (Event::Retry, 4),
                (Event::Extended, 6),
                (Event::ExtendFailed, 1),
                (Event::Released, 2),
                (Event::Lost, 1),
            ] {
                for _ in 0..times {
                    r.note(event);
                }
            }
        });
        let mut seen: Vec<(String, u64)> = sink
            .0
            .lock()
            .unwrap()
            .iter()
            .map(|(n, c)| (n.clone(), c.load(Ordering::Relaxed)))
            .collect();
        seen.sort();
        let expect = [
            ("ironlock_acquires_total{outcome=contended}", 1),
            ("ironlock_acquires_total{outcome=granted}", 3),
            ("ironlock_acquires_total{outcome=unavailable}", 2),
            ("ironlock_extensions_total{outcome=failed}", 1),
            ("ironlock_extensions_total{outcome=granted}", 6),
            ("ironlock_locks_lost_total{}", 1),
            ("ironlock_releases_total{}", 2),
            ("ironlock_retries_total{}", 4),
            ("ironlock_rounds_total{}", 5),
        ];
        let expect: Vec<(String, u64)> = expect.iter().map(|(n, c)| (n.to_string(), *c)).collect();
        assert_eq!(seen, expect);
        assert_eq!(r.get(Event::Granted), 3);
        assert_eq!(r.get(Event::Round), 5);
    }

    #[test]
    fn a_histogram_puts_each_duration_in_its_bucket_and_sums_them() {
        let r = Recorder::new();
        r.acquire_took(Duration::from_micros(100)); // on the first bound: first bucket
        r.acquire_took(Duration::from_micros(101));
        r.acquire_took(Duration::from_secs(11)); // above the last bound
        let s = r.snapshot().acquire_latency;
        assert_eq!(s.counts.len(), LATENCY_BUCKETS.len() + 1);
        assert_eq!((s.counts[0], s.counts[1], s.counts[16]), (1, 1, 1));
        assert_eq!(s.count, 3);
        assert!(
            (s.sum_seconds - 11.000201).abs() < 1e-9,
            "{}",
            s.sum_seconds
        );
    }

    #[test]
    fn every_counter_has_a_name_the_json_and_the_prometheus_text_use() {
        let r = Recorder::new();
        r.note(Event::Granted);
        r.note(Event::Granted);
        r.note(Event::Lost);
        r.round_took(Duration::from_millis(3));
        let s = r.snapshot();
        assert_eq!(s.counter("granted"), Some(2));
        assert_eq!(s.counter("lost"), Some(1));
        assert_eq!(s.counter("nope"), None);
        assert_eq!(s.counter_named("name", "lost").unwrap(), 1);
        let e = s.counter_named("name", &"x".repeat(10_000)).unwrap_err();
        assert!(
            e.message().starts_with("name: no counter named \"xxx"),
            "{e}"
        );
        assert!(e.message().contains("(10002 characters)"), "{e}");
        assert!(e.message().len() < 600, "{}", e.message().len());
        let json: serde_json::Value = serde_json::from_str(&s.to_json()).unwrap();
        for name in Stats::counter_names() {
            assert!(json[name].is_u64(), "{name} missing from {json}");
        }
        assert_eq!(json["granted"], 2);
        assert_eq!(json["round_latency"]["count"], 1);
        let text = s.prometheus();
        assert!(text.contains("ironlock_granted_total 2\n"), "{text}");
        assert!(
            text.contains("ironlock_round_seconds_bucket{le=\"0.005\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("ironlock_round_seconds_bucket{le=\"0.0025\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("ironlock_round_seconds_bucket{le=\"+Inf\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("ironlock_round_seconds_count 1\n"), "{text}");
        // Every sample line is `name value` or `name{labels} value`.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (name, value) = line.rsplit_once(' ').unwrap();
            assert!(name.starts_with("ironlock_"), "{line}");
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
