//! `ironlock status` (who holds a resource on each node) and `ironlock release` (delete a lock
//! whose token you know).

use ironlock::{Config, LockManager};
use serde_json::json;

use crate::exit;
use crate::output::{self, Output, millis, secs};

pub async fn status(resource: &str, key_prefix: &str, config: Config, out: &Output) -> u8 {
    let manager = match LockManager::new(config).await {
        Ok(m) => m,
        Err(e) => return crate::fail(out, &e, 1),
    };
    let holders = match manager.inspect(resource).await {
        Ok(h) => h,
        Err(e) => return crate::fail(out, &e, 1),
    };
    let quorum = manager.quorum();
    let answered = holders.iter().filter(|h| h.error.is_none()).count();
    // The token a quorum of nodes agree on: the lock's current holder.
    let mut holder: Option<(&str, usize)> = None;
    for h in &holders {
        if let Some(t) = h.token.as_deref() {
            let n = holders
                .iter()
                .filter(|o| o.token.as_deref() == Some(t))
                .count();
            if n >= quorum && holder.is_none() {
                holder = Some((t, n));
            }
        }
    }
    let code = if answered >= quorum {
        0
    } else {
        exit::UNAVAILABLE
    };
    if out.json() {
        let v = json!({
            "resource": resource,
            "key": format!("{key_prefix}{resource}"),
            "quorum": quorum,
            "answered": answered,
            "holder": holder.map(|(t, _)| t),
            "nodes": holders.iter().map(|h| json!({
                "url": h.url,
                "token": h.token,
                "ttl_ms": h.ttl.map(millis),
                "error": h.error,
            })).collect::<Vec<_>>(),
        });
        println!("{v}");
    } else if out.human() {
        let summary = match holder {
            Some((t, n)) => format!("held by {t} on {n} of {} nodes", holders.len()),
            None if answered < quorum => format!(
                "unknown: only {answered} of {} nodes answered",
                holders.len()
            ),
            None if holders.iter().all(|h| h.token.is_none()) => "free".to_owned(),
            None => "not held by a quorum".to_owned(),
        };
        println!("{resource:?}: {summary} (quorum {quorum})");
        let width = holders.iter().map(|h| h.url.len()).max().unwrap_or(0);
        for h in &holders {
            let what = match (&h.error, &h.token) {
                (Some(e), _) => format!("error: {e}"),
                (None, Some(t)) => format!(
                    "{t}  ttl {}",
                    h.ttl.map(secs).unwrap_or_else(|| "none".to_owned())
                ),
                (None, None) => "free".to_owned(),
            };
            println!("  {:width$}  {what}", h.url);
        }
    }
    code
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
