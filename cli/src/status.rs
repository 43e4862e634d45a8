//! `ironlock status` (who holds a resource on each node) and `ironlock release` (delete a lock
//! whose token you know).

use ironlock::{Config, Holder, LockManager};
use serde_json::json;

use crate::exit;
use crate::output::{self, Output, millis, secs};

/// What every node said about one resource.
struct Check {
    manager: LockManager,
    holders: Vec<Holder>,
    quorum: usize,
    answered: usize,
}

impl Check {
    /// Connects and asks every node who holds `resource`; on failure, the exit code.
    async fn run(resource: &str, config: Config, out: &Output) -> Result<Check, u8> {
        let manager = LockManager::new(config)
            .await
            .map_err(|e| crate::fail(out, &e, 1))?;
        let holders = manager
            .inspect(resource)
            .await
            .map_err(|e| crate::fail(out, &e, 1))?;
        let quorum = manager.quorum();
        let answered = holders.iter().filter(|h| h.error.is_none()).count();
        Ok(Check {
            manager,
            holders,
            quorum,
            answered,
        })
    }

    /// 0 when a quorum of nodes answered, otherwise `UNAVAILABLE`.
    fn code(&self) -> u8 {
        if self.answered >= self.quorum {
            0
        } else {
            exit::UNAVAILABLE
        }
    }
}

/// The token a quorum of nodes agree on (the lock's current holder) and on how many nodes.
fn holder(holders: &[Holder], quorum: usize) -> Option<(&str, usize)> {
    holders
        .iter()
        .filter_map(|h| h.token.as_deref())
        .find_map(|t| {
            let n = holders
                .iter()
                .filter(|o| o.token.as_deref() == Some(t))
                .count();
            (n >= quorum).then_some((t, n))
        })
}

/// The semaphore of the same name as the nodes see it: the limit most of them record, its
/// quorum Q(limit), and each token with the nodes that hold it, most first.
struct Permits<'a> {
    limit: Option<u32>,
    quorum: Option<usize>,
    tokens: Vec<(&'a str, usize)>,
}

impl<'a> Permits<'a> {
    /// `None` when no node holds a permit.
    fn of(holders: &'a [Holder]) -> Option<Permits<'a>> {
        let mut tokens: Vec<(&str, usize)> = Vec::new();
        for p in holders.iter().flat_map(|h| &h.permits) {
            match tokens.iter_mut().find(|(t, _)| *t == p.token) {
                Some((_, n)) => *n += 1,
                None => tokens.push((&p.token, 1)),
            }
        }
        if tokens.is_empty() {
            return None;
        }
        tokens.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let mut limits: Vec<(u32, usize)> = Vec::new();
        for l in holders.iter().filter_map(|h| h.limit) {
            match limits.iter_mut().find(|(k, _)| *k == l) {
                Some((_, n)) => *n += 1,
                None => limits.push((l, 1)),
            }
        }
        let limit = limits.iter().max_by_key(|(_, n)| *n).map(|(l, _)| *l);
        Some(Permits {
            limit,
            quorum: limit.map(|l| ironlock::semaphore_quorum(holders.len(), l)),
            tokens,
        })
    }

    /// The permits a quorum of nodes hold (all of them when the limit is not known).
    fn held(&self) -> Vec<&'a str> {
        let q = self.quorum.unwrap_or(0);
        self.tokens
            .iter()
            .filter(|(_, n)| *n >= q)
            .map(|(t, _)| *t)
            .collect()
    }

    /// One line: how many permits are held, of what limit, and by whom.
    fn line(&self, nodes: usize) -> String {
        let each = |tokens: &[(&str, usize)]| {
            tokens
                .iter()
                .map(|(t, n)| format!("{t} on {n} of {nodes} nodes"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (Some(limit), Some(q)) = (self.limit, self.quorum) else {
            return format!(
                "semaphore (limit not recorded): permits {}",
                each(&self.tokens)
            );
        };
        let (held, partial): (Vec<_>, Vec<_>) = self.tokens.iter().partition(|(_, n)| *n >= q);
        let mut line = format!(
            "semaphore (limit {limit}, quorum {q}): {} of {limit} permits held",
            held.len()
        );
        if !held.is_empty() {
            line += &format!(": {}", each(&held));
        }
        if !partial.is_empty() {
            line += &format!("; on fewer than {q} nodes: {}", each(&partial));
        }
        line
    }
}

/// The readers of the read-write lock of the name that a quorum of nodes hold, most nodes first.
fn readers(holders: &[Holder], quorum: usize) -> Vec<&str> {
    let mut tokens: Vec<(&str, usize)> = Vec::new();
    for r in holders.iter().flat_map(|h| &h.readers) {
        match tokens.iter_mut().find(|(t, _)| *t == r.token) {
            Some((_, n)) => *n += 1,
            None => tokens.push((&r.token, 1)),
        }
    }
    tokens.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    tokens
        .iter()
        .filter(|(_, n)| *n >= quorum)
        .map(|(t, _)| *t)
        .collect()
}

pub async fn status(resource: &str, key_prefix: &str, config: Config, out: &Output) -> u8 {
    let check = match Check::run(resource, config, out).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let (holders, quorum, answered) = (&check.holders, check.quorum, check.answered);
    let holder = holder(holders, quorum);
    let permits = Permits::of(holders);
    let read_by = readers(holders, quorum);
    let code = check.code();
    let key = format!("{key_prefix}{resource}");
    if out.json() {
        let v = json!({
            "resource": resource,
            "key": key,
            "quorum": quorum,
            "answered": answered,
            "holder": holder.map(|(t, _)| t),
            "holder_process": holder.and_then(|(t, _)| ironlock::holder_of(t)),
            "semaphore": permits.as_ref().map(|p| json!({
                "key": ironlock::scripts::semaphore_key(&key),
                "limit": p.limit,
                "quorum": p.quorum,
                "held": p.held(),
                "permits": p.tokens.iter().map(|(t, n)| json!({"token": t, "nodes": n}))
                    .collect::<Vec<_>>(),
            })),
            "readers": read_by,
            "nodes": holders.iter().map(|h| json!({
                "url": h.url,
                "token": h.token,
                "ttl_ms": h.ttl.map(millis),
                "permits": h.permits.iter().map(|p| json!({
                    "token": p.token,
                    "ttl_ms": millis(p.ttl),
                })).collect::<Vec<_>>(),
                "limit": h.limit,
                "readers": h.readers.iter().map(|p| json!({
                    "token": p.token,
                    "ttl_ms": millis(p.ttl),
                })).collect::<Vec<_>>(),
                "writer_waiting": h.writer_waiting,
                "error": h.error,
            })).collect::<Vec<_>>(),
        });
        println!("{v}");
    } else if out.human() {
        let n = holders.len();
        let lock_free = holders
            .iter()
            .all(|h| h.token.is_none() && h.readers.is_empty());
        let summary = match holder {
            Some((t, k)) => Some(match ironlock::holder_of(t) {
                Some(who) => format!("held by {who} (token {t}) on {k} of {n} nodes"),
                None => format!("held by {t} on {k} of {n} nodes"),
            }),
            None if !read_by.is_empty() => Some(format!(
                "read by {} reader{} (each on at least {quorum} of {n} nodes)",
                read_by.len(),
                if read_by.len() == 1 { "" } else { "s" }
            )),
            None if answered < quorum => {
                Some(format!("unknown: only {answered} of {n} nodes answered"))
            }
            // A semaphore's name: its permits say it all.
            None if lock_free && permits.is_some() => None,
            None if lock_free => Some("free".to_owned()),
            None => Some("not held by a quorum".to_owned()),
        };
        if let Some(summary) = summary {
            println!("{resource:?}: {summary} (quorum {quorum})");
        }
        if let Some(p) = &permits {
            println!("{resource:?}: {}", p.line(n));
        }
        let width = holders.iter().map(|h| h.url.len()).max().unwrap_or(0);
        for h in holders {
            let mut what = Vec::new();
            if let Some(e) = &h.error {
                what.push(format!("error: {e}"));
            }
            if let Some(t) = &h.token {
                let ttl = h.ttl.map(secs).unwrap_or_else(|| "none".to_owned());
                what.push(format!("{t}  ttl {ttl}"));
            }
            if !h.permits.is_empty() {
                let each: Vec<String> = h
                    .permits
                    .iter()
                    .map(|p| format!("{} ttl {}", p.token, secs(p.ttl)))
                    .collect();
                let limit = h.limit.map(|l| format!(" of {l}")).unwrap_or_default();
                what.push(format!(
                    "{} permit{}{limit}: {}",
                    h.permits.len(),
                    if h.permits.len() == 1 { "" } else { "s" },
                    each.join(", ")
                ));
            }
            if !h.readers.is_empty() {
                let each: Vec<String> = h
                    .readers
                    .iter()
                    .map(|p| format!("{} ttl {}", p.token, secs(p.ttl)))
                    .collect();
                let s = if h.readers.len() == 1 { "" } else { "s" };
                what.push(format!(
                    "{} reader{s}: {}",
                    h.readers.len(),
                    each.join(", ")
                ));
            }
            if let Some(w) = &h.writer_waiting {
                what.push(format!("writer waiting: {w}"));
            }
            if what.is_empty() {
                what.push("free".to_owned());
            }
            println!("  {:width$}  {}", h.url, what.join("; "));
        }
    }
    code
}

/// `ironlock status --prometheus`: Prometheus text (exposition format 0.0.4) with the resource's
/// state, each node's state (labelled by its URL, password redacted) and the counters of the
/// manager that made the check. The exit code is as for `status`.
pub async fn prometheus(resource: &str, key_prefix: &str, config: Config, out: &Output) -> u8 {
    let check = match Check::run(resource, config, out).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let key = prom_label(&format!("{key_prefix}{resource}"));
    let mut text = String::new();
    let mut gauge = |name: &str, help: &str, rows: Vec<(String, String)>| {
        text += &format!("# HELP ironlock_{name} {help}\n# TYPE ironlock_{name} gauge\n");
        for (labels, value) in rows {
            if labels.is_empty() {
                text += &format!("ironlock_{name} {value}\n");
            } else {
                text += &format!("ironlock_{name}{{{labels}}} {value}\n");
            }
        }
    };
    let held = holder(&check.holders, check.quorum).map_or(0, |(_, n)| n);
    gauge(
        "resource_held",
        "1 if a quorum of nodes hold the same token for the key",
        vec![(format!("key=\"{key}\""), u8::from(held > 0).to_string())],
    );
    gauge(
        "resource_holding_nodes",
        "nodes that hold the quorum's token for the key (0 if no quorum agrees)",
        vec![(format!("key=\"{key}\""), held.to_string())],
    );
    let permits = Permits::of(&check.holders).map_or(0, |p| p.held().len());
    gauge(
        "semaphore_permits_held",
        "permits of the semaphore of the same name held by its quorum (each on Q(limit) nodes)",
        vec![(format!("key=\"{key}\""), permits.to_string())],
    );
    gauge(
        "quorum",
        "nodes needed for a quorum",
        vec![(String::new(), check.quorum.to_string())],
    );
    let nodes = check.manager.node_status();
    let per_node = |f: &dyn Fn(&ironlock::NodeStatus) -> String| {
        nodes
            .iter()
            .map(|n| (format!("node=\"{}\"", prom_label(&n.url)), f(n)))
            .collect::<Vec<_>>()
    };
    gauge(
        "node_up",
        "1 if the node is connected",
        per_node(&|n| u8::from(n.connected).to_string()),
    );
    gauge(
        "node_eligible",
        "1 if the node's votes count (connected, out of restart quarantine)",
        per_node(&|n| u8::from(n.eligible).to_string()),
    );
    gauge(
        "node_quarantine_seconds",
        "time left in restart quarantine",
        per_node(&|n| n.quarantine_remaining.as_secs_f64().to_string()),
    );
    gauge(
        "node_uptime_seconds",
        "server uptime",
        per_node(&|n| n.uptime.as_secs().to_string()),
    );
    print!("{text}{}", check.manager.stats().prometheus());
    check.code()
}

/// A label value in the exposition format: backslash, double quote and newline escaped.
fn prom_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

pub async fn release(resource: &str, token: &str, config: Config, out: &Output) -> u8 {
    let manager = match LockManager::new(config).await {
        Ok(m) => m,
        Err(e) => return crate::fail(out, &e, 1),
    };
    let released = match manager.release_token(&[resource], token).await {
        Ok(r) => r,
        Err(e) => return crate::fail(out, &e, 1),
    };
    let nodes = released.report.nodes.len();
    if out.json() {
        let v = json!({
            "resource": resource,
            "held": released.held,
            "deleted_on": released.deleted_on,
            "report": output::report_json(&released.report),
        });
        println!("{v}");
    } else if out.human() {
        if released.held {
            println!(
                "released {resource:?} on {} of {nodes} nodes",
                released.deleted_on
            );
        } else {
            println!(
                "{resource:?} was not held with that token by a quorum (deleted on {} of {nodes} nodes)",
                released.deleted_on
            );
        }
    }
    if !released.held {
        // Unreachable nodes are the other reason nothing was released by a quorum.
        for n in released.report.nodes.iter().filter(|n| n.error.is_some()) {
            out.error(&format!(
                "  {}: {}",
                n.url,
                n.error.as_deref().unwrap_or_default()
            ));
        }
    }
    out.info(&format!("{}", released.report));
    if released.held { 0 } else { 1 }
}
