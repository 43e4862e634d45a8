//! `ironlock leader NAME [--watch]`: who leads an election, from a quorum read; with `--watch`,
//! every change of leader in order until interrupted.

use ironlock::{Config, Leader, LockManager};
use serde_json::json;

use crate::exit;
use crate::output::{Output, millis, secs};
use crate::run::{Signals, signal_name};

pub async fn leader(name: &str, watch: bool, config: Config, out: &Output) -> u8 {
    let manager = match LockManager::new(config).await {
        Ok(m) => m,
        Err(e) => return crate::fail(out, &e, 1),
    };
    let election = manager.election(name);
    if !watch {
        return match election.leader().await {
            Ok(l) => {
                show(name, l.as_ref(), out);
                0
            }
            Err(e) => crate::fail(out, &e, 1),
        };
    }
    let mut signals = match Signals::new() {
        Ok(s) => s,
        Err(e) => {
            out.error(&format!("cannot install signal handlers: {e}"));
            return exit::INTERNAL;
        }
    };
    let mut observer = match election.observe() {
        Ok(o) => o,
        Err(e) => return crate::fail(out, &e, 1),
    };
    loop {
        tokio::select! {
            next = observer.next() => match next {
                Ok(l) => show(name, l.as_ref(), out),
                Err(e) => return crate::fail(out, &e, 1),
            },
            sig = signals.recv() => {
                out.event("interrupted", json!({"signal": signal_name(sig)}));
                return 0;
            }
        }
    }
}

/// One line (or, with `--json`, one JSON object) for the leader of `name`, or for none.
fn show(name: &str, leader: Option<&Leader>, out: &Output) {
    if out.json() {
        let v = match leader {
            Some(l) => json!({
                "election": name,
                "leader": true,
                "value": l.value,
                "term": l.term,
                "token": l.token,
                "holder_process": ironlock::holder_of(&l.token),
                "validity_ms": millis(l.validity),
            }),
            None => json!({"election": name, "leader": false}),
        };
        println!("{v}");
        return;
    }
    match leader {
        Some(l) => println!(
            "{name:?}: led by {:?} (term {}, valid for {}, token {})",
            l.value,
            l.term,
            secs(l.validity),
            l.token
        ),
        None => println!("{name:?}: no leader"),
    }
}
