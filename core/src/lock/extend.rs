//! Extending a held lock: one extension round (re-seating restarted nodes, the loss rule) and
//! auto-extension until the lock is released or lost.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Kind, Lock, loss_margin, release, release_round};
use crate::config::quote_resources;
use crate::error::{Error, ErrorKind, Result, Vote};
use crate::keeper::{Keeper, Kept};
use crate::node::Node;
use crate::quorum::{self, Reply, Tally};
use crate::stats::Event;

pub(super) async fn extend(lock: &Lock, ttl: Duration) -> Result<()> {
    let inner = &lock.inner;
    let cluster = &inner.cluster;
    let config = &cluster.config;
    config.check_ttl("ttl", ttl)?;
    let extensions_before = {
        let st = lock.state();
        if st.released {
            return Err(lock.lost_error("it was released"));
        }
        if let Some(max) = config.max_extensions {
            if st.extensions >= max {
                return Err(Error::invalid(format!(
                    "extend: this lock reached max_extensions ({max})"
                )));
            }
        }
        st.extensions
    };
    if lock.is_lost() {
        return Err(lock.lost_error("it was lost earlier"));
    }
    if Instant::now() >= lock.deadline() {
        lock.mark_lost();
        return Err(lock.lost_error("its validity ran out before the extension"));
    }
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    // Re-seating (SPEC §12): a node whose data epoch moved on since it last held our keys
    // restarted and may have lost them; only such a node is asked to write them back.
    let seated = lock.state().seated.clone();
    let restarted: Vec<bool> = cluster
        .nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            seated
                .get(i)
                .is_some_and(|&e| e != 0 && node.data_epoch() != e)
        })
        .collect();
    let epochs: Vec<u64> = cluster.nodes.iter().map(|n| n.data_epoch()).collect();
    // A plain lock's (or a writer's) extension joins the node's next batch (`node::coalesce`);
    // the other kinds send their own script.
    let batched = matches!(inner.kind, Kind::Lock | Kind::Write);
    let cmds = (!batched).then(|| {
        let ttl = ttl_ms.to_string();
        let cmd = |reseat| {
            Arc::new(
                inner
                    .kind
                    .extend_cmd(&inner.keys, &inner.token, &ttl, reseat),
            )
        };
        (cmd(false), restarted.contains(&true).then(|| cmd(true)))
    });
    let before = lock.deadline();
    let t1 = Instant::now();
    let round = quorum::run(&cluster.nodes, Tally::Eligible, inner.quorum, t1, |node| {
        let reseat = restarted.get(cluster.index_of(&node)) == Some(&true);
        let cmd = cmds.as_ref().map(|(plain, reseating)| match reseating {
            Some(cmd) if reseat => cmd.clone(),
            _ => plain.clone(),
        });
        let lock = lock.clone();
        async move {
            let reply = match cmd {
                Some(cmd) => node.query::<i64>(&cmd).await,
                None => {
                    let inner = &lock.inner;
                    node.extend(&inner.keys, &inner.token, ttl_ms, reseat).await
                }
            };
            match reply {
                Ok(1) => Reply::Yes(0),
                Ok(2) => {
                    // Counted here, not in the round: a re-seat answered after the round was
                    // decided still happened.
                    node.counters.reseats.fetch_add(1, Ordering::Relaxed);
                    Reply::Reseated
                }
                Ok(_) => Reply::No,
                Err(f) => Reply::Failed(f),
            }
        }
    })
    .await;
    let drift = config.drift(ttl);
    let validity = quorum::validity(ttl, round.decided_at - t1, drift);
    let granted = round.granted >= inner.quorum && validity.is_some();
    if granted && round.decided_at >= before {
        // The quorum confirmed the extension only once the lock's validity had run out: in
        // that gap its keys may have expired on some nodes, another client may have held and
        // released the lock, and a late write of ours may have put our token back. Extending
        // now would bring the lock back to life over that other holder's critical section
        // (found by the protocol model, `scripts/verify`): it is lost, and the keys this
        // round extended are deleted.
        lock.mark_lost();
        cluster.stats.note(Event::ExtendFailed);
        release_round(
            &cluster.nodes,
            inner.kind,
            inner.quorum,
            &inner.keys,
            &inner.token,
            true,
            Tally::ReleaseAll,
        )
        .await;
        return Err(lock
            .lost_error("its validity ran out before a quorum confirmed the extension")
            .with_report(round.report));
    }
    {
        let mut st = lock.state();
        st.report = Arc::new(round.report.clone());
        if granted {
            // Only an answer moves a node's seat to its current data epoch. A request the round
            // did not wait for (`Pending`, `Timeout`) may have failed on the node (a re-seat
            // finding another client's key, say): its seat stays where it was, so that a restarted
            // node is asked to re-seat again rather than never (a re-seat that did happen answers
            // "extended" the next time).
            for (i, r) in round.report.nodes.iter().enumerate() {
                let answered_yes = matches!(r.vote, Vote::For | Vote::NotEligible | Vote::Reseated);
                if answered_yes && i < st.seated.len() {
                    st.seated[i] = epochs[i];
                }
            }
            // Another extension that succeeded while this one was out may have reached the
            // nodes after it: the keys then expire at that one's time or this one's, whichever
            // ran last on each node, so the lock ends at the earlier of the two.
            let deadline = t1 + ttl - drift - loss_margin(inner.kind, ttl);
            st.deadline = if st.extensions == extensions_before {
                deadline
            } else {
                deadline.min(st.deadline)
            };
            st.ttl = ttl;
            st.extensions += 1;
        }
    }
    if granted {
        cluster.stats.note(Event::Extended);
        inner.lost_tx.send_replace(false);
        return Ok(());
    }
    cluster.stats.note(Event::ExtendFailed);
    // A failed extension takes back the keys it re-seated, including re-seats the round did
    // not wait for (the delete queues behind them on the node's connection): they were written
    // for a lock that did not get its extension (SPEC §12).
    let reseated: Vec<Arc<Node>> = cluster
        .nodes
        .iter()
        .zip(&round.report.nodes)
        .zip(&restarted)
        .filter(|((_, r), restarted)| {
            **restarted && matches!(r.vote, Vote::Reseated | Vote::Pending | Vote::Timeout)
        })
        .map(|((n, _), _)| n.clone())
        .collect();
    if !reseated.is_empty() {
        release_round(
            &reseated,
            inner.kind,
            inner.quorum,
            &inner.keys,
            &inner.token,
            false,
            Tally::ReleaseAll,
        )
        .await;
    }
    if cluster.nodes.len() - round.refused < inner.quorum {
        lock.mark_lost();
        return Err(lock
            .lost_error("fewer than a quorum of nodes still hold its token")
            .with_report(round.report));
    }
    Err(Error::new(
        ErrorKind::Unavailable,
        format!(
            "could not extend {}: {} of {} nodes extended, quorum {}; the lock stays valid until its previous deadline{}",
            quote_resources(&inner.resources),
            round.granted,
            cluster.nodes.len(),
            inner.quorum,
            crate::error::with_summary(round.report.summary("extend", "no longer holds its token")),
        ),
    )
    .with_report(round.report))
}

/// Auto-extension with the release-on-loss policy: once the lock is lost, its keys
/// are deleted wherever they still hold its token.
pub(super) async fn keep_alive(lock: Lock) {
    extend_while_held(&lock, None).await;
    release_lost(lock).await;
}

/// The lock's own auto-extension for a lock the keeper handed over (`keeper.rs`): extends it as
/// [`keep_alive`] does and hands it back after its first successful extension.
pub(crate) async fn keep_alive_own(kept: Arc<Kept>) {
    if extend_while_held(&kept.lock, Some(&kept)).await {
        return;
    }
    release_lost(kept.lock.clone()).await;
}

/// The loss policy of auto-extension: a lost lock's keys are deleted wherever they still hold
/// its token.
pub(crate) async fn release_lost(lock: Lock) {
    if lock.is_lost() && !lock.is_released() {
        // Behind the tasks woken meanwhile: locks whose deadlines fell together are told they
        // are lost before any of their keys is deleted.
        tokio::task::yield_now().await;
        release(&lock).await;
    }
}

/// Extends the lock before each deadline until it is released or lost; with `back`, only until
/// its first successful extension, after which it goes back to the keeper (returns true then).
async fn extend_while_held(lock: &Lock, back: Option<&Arc<Kept>>) -> bool {
    let mut rx = lock.inner.lost_tx.subscribe();
    loop {
        if lock.is_lost() || lock.is_released() {
            return false;
        }
        let ttl = lock.ttl();
        let at = crate::keeper::due(lock);
        tokio::select! {
            _ = tokio::time::sleep_until(at.into()) => {}
            changed = rx.changed() => {
                if changed.is_err() { return false; }
                continue;
            }
        }
        if lock.is_lost() || lock.is_released() {
            return false;
        }
        if Instant::now() >= lock.deadline() {
            lock.mark_lost();
            return false;
        }
        match extend(lock, ttl).await {
            Ok(()) => {
                if let Some(kept) = back {
                    Keeper::queue_again(&lock.inner.cluster, kept);
                    return true;
                }
            }
            Err(e) if e.kind() == ErrorKind::Lost => return false,
            Err(e) if e.kind() == ErrorKind::InvalidArgument => {
                // max_extensions reached: the lock runs out at its deadline.
                tokio::time::sleep_until(lock.deadline().into()).await;
                if !lock.is_released() {
                    lock.mark_lost();
                }
                return false;
            }
            Err(e) => {
                tracing::warn!(error = %e, "auto-extension failed; retrying");
                let pause = (crate::keeper::threshold(lock) / 4)
                    .clamp(Duration::from_millis(5), Duration::from_millis(500));
                let until = (Instant::now() + pause).min(lock.deadline());
                tokio::time::sleep_until(until.into()).await;
            }
        }
    }
}
