//! Leader elections: `NativeElection` (a manager's election of one name), the leadership a
//! campaign grants (`NativeLeadership`), who leads (`NativeLeader`) and the stream of changes of
//! leader (`NativeObserver`). Each call is one core call: `campaign`, `proclaim` and `resign`
//! settle through the manager's completion function as `acquire`, `extend` and `release` do;
//! `leader`, an observer's `next` and `waitLost` return napi Promises, as the rarer calls do.

use std::sync::Arc;

use napi::bindgen_prelude::{BigInt, Object};
use napi::{Env, Result};
use napi_derive::napi;
use tokio::sync::watch;

use crate::complete::{Completer, Done};
use crate::error::{boundary, in_node_words, to_napi};
use crate::lock::NativeLock;
use crate::manager::{CancelToken, Core, unless_cancelled};
use crate::runtime::{EnvScope, until_set};
use crate::settings::millis;

/// Who leads an election, from a quorum read.
#[napi(object)]
pub struct NativeLeader {
    /// The value the leader advertises, as last proclaimed.
    pub value: String,
    /// The leader's term: the fencing token of its grant (every later leader's is larger).
    pub term: BigInt,
    /// The leader's token (its lock token).
    pub token: String,
    /// How long the leadership stays valid at most, in whole milliseconds.
    pub validity_ms: f64,
}

impl From<ironlock::Leader> for NativeLeader {
    fn from(l: ironlock::Leader) -> Self {
        NativeLeader {
            value: l.value,
            term: BigInt::from(l.term),
            token: l.token,
            validity_ms: l.validity.as_millis() as f64,
        }
    }
}

/// One step of an observer: the next leader (`leader`, null when nobody leads), or the end of
/// the stream (`end`: the observer was stopped or the manager closed).
#[napi(object)]
pub struct LeaderChange {
    /// True once the stream has ended (then `leader` is null).
    pub end: bool,
    /// The new leader; null when nobody leads.
    pub leader: Option<NativeLeader>,
}

impl LeaderChange {
    fn ended() -> Self {
        LeaderChange {
            end: true,
            leader: None,
        }
    }
}

/// The leader election `name` of a manager (`NativeManager#election`).
#[napi]
pub struct NativeElection {
    core: Arc<Core>,
    scope: Arc<EnvScope>,
    name: String,
}

impl NativeElection {
    /// The election `name`; INVALID_ARGUMENT (`name: …`) for a name the core refuses.
    pub(crate) fn new(core: Arc<Core>, scope: Arc<EnvScope>, name: String) -> Result<Self> {
        ironlock::validate_election_name(&name).map_err(to_napi)?;
        Ok(NativeElection { core, scope, name })
    }
}

#[napi]
impl NativeElection {
    /// The election's name, as given.
    #[napi(getter)]
    pub fn name(&self) -> String {
        self.name.clone()
    }

    /// Waits in line until this candidate leads (at most `waitMs` when given: then CONTENDED),
    /// and settles `id` with a `NativeLeadership`, kept alive in the background; ABORTED when
    /// `cancel` fires first (the candidate leaves the line on every node). Throws at once for
    /// an invalid duration.
    #[napi(catch_unwind)]
    pub fn campaign(
        &self,
        id: u32,
        value: String,
        ttl_ms: f64,
        wait_ms: Option<f64>,
        cancel: Option<&CancelToken>,
    ) -> Result<bool> {
        boundary(|| {
            let ttl = millis("durationMs", ttl_ms)?;
            let wait = wait_ms.map(|w| millis("options.wait", w)).transpose()?;
            let cancelled = cancel.map(CancelToken::subscribe);
            let exited = self.scope.exited();
            let (manager, completer) = self.core.with_completer()?;
            let scope = Arc::clone(&self.scope);
            let name = self.name.clone();
            let stashed = completer.clone().run(id, async move {
                let manager = manager.await.map_err(to_napi)?;
                let election = manager.election(name);
                let campaign = election.campaign_with(&value, ttl, wait);
                unless_cancelled(campaign, cancelled, exited, "campaign")
                    .await?
                    .map(|l| Done::Leadership(NativeLeadership::new(l, completer, scope)))
                    .map_err(|e| to_napi(in_node_words(e, "durationMs")))
            });
            Ok(stashed)
        })
    }

    /// Who leads now, read from every node (a quorum must answer, else UNAVAILABLE): null when
    /// nobody does.
    #[napi(ts_return_type = "Promise<NativeLeader | null>", catch_unwind)]
    pub fn leader<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        boundary(|| {
            let manager = self.core.get()?;
            let name = self.name.clone();
            self.scope.promise(env, async move {
                let m = manager.await.map_err(to_napi)?;
                let leader = m.election(name).leader().await;
                Ok(leader.map_err(to_napi)?.map(NativeLeader::from))
            })
        })
    }

    /// A stream of the changes of leader (`NativeObserver#next`), starting with the current
    /// one; it ends when stopped or when the manager is closed.
    #[napi]
    pub fn observe(&self) -> NativeObserver {
        NativeObserver {
            watching: Arc::new(Watching {
                observer: tokio::sync::Mutex::new(None),
                stop: watch::channel(false).0,
            }),
            core: Arc::clone(&self.core),
            scope: Arc::clone(&self.scope),
            name: self.name.clone(),
        }
    }
}

/// A leadership granted by a campaign, extended in the background until resigned or lost (or
/// until this object is finalized: a leader nobody can reach any more stops extending, and the
/// next candidate leads once its key expires).
#[napi]
pub struct NativeLeadership {
    leadership: Arc<ironlock::Leadership>,
    completer: Completer,
    scope: Arc<EnvScope>,
}

impl NativeLeadership {
    fn new(leadership: ironlock::Leadership, completer: Completer, scope: Arc<EnvScope>) -> Self {
        NativeLeadership {
            leadership: Arc::new(leadership),
            completer,
            scope,
        }
    }
}

#[napi]
impl NativeLeadership {
    /// The election's name.
    #[napi(getter)]
    pub fn election(&self) -> String {
        self.leadership
            .lock()
            .resources()
            .first()
            .cloned()
            .unwrap_or_default()
    }

    /// The term: the fencing token of this leadership's grant, larger than every earlier
    /// leader's.
    #[napi(getter)]
    pub fn term(&self) -> BigInt {
        BigInt::from(self.leadership.term())
    }

    /// The value this leader advertises (as last proclaimed).
    #[napi(getter)]
    pub fn value(&self) -> String {
        self.leadership.value()
    }

    /// The leadership's token (its lock token, as `NativeLeader#token` shows it).
    #[napi(getter)]
    pub fn token(&self) -> String {
        self.leadership.lock().token().to_owned()
    }

    /// Remaining validity in whole milliseconds: it ends a tenth of the ttl (at most a second)
    /// before the lock's own; 0 once lost or resigned.
    #[napi(getter)]
    pub fn validity_ms(&self) -> f64 {
        self.leadership.validity().as_millis() as f64
    }

    /// True while this candidate leads (not lost, resigned or run out).
    #[napi]
    pub fn is_leader(&self) -> bool {
        self.leadership.is_leader()
    }

    /// True once the leadership is known lost.
    #[napi]
    pub fn is_lost(&self) -> bool {
        self.leadership.is_lost()
    }

    /// The per-node report of the last operation on the leadership's lock, as the core's JSON.
    #[napi(getter)]
    pub fn report_json(&self) -> String {
        self.leadership.lock().report().to_json()
    }

    /// Advertises `value`, only while still leader; settles `id` with `undefined`, or LOST
    /// (no longer the leader), UNAVAILABLE (too few nodes answered), INVALID_ARGUMENT (`value`
    /// too long).
    #[napi(catch_unwind)]
    pub fn proclaim(&self, id: u32, value: String) -> Result<bool> {
        boundary(|| {
            let leadership = Arc::clone(&self.leadership);
            let stashed = self.completer.run(id, async move {
                leadership.proclaim(&value).await.map_err(to_napi)?;
                Ok(Done::Unit)
            });
            Ok(stashed)
        })
    }

    /// Steps down: stops the extensions, deletes the election's key and leader record where
    /// they still hold this leadership (waking the next candidate) and settles `id` as a
    /// lock's `release` does. Never fails for a lost leadership.
    #[napi(catch_unwind)]
    pub fn resign(&self, id: u32) -> Result<bool> {
        boundary(|| {
            let leadership = Arc::clone(&self.leadership);
            let stashed = self.completer.run(id, async move {
                Ok(NativeLock::released(leadership.resign().await))
            });
            Ok(stashed)
        })
    }

    /// Resolves with `true` when the leadership is lost (a tenth of its ttl, at most a second,
    /// before its validity ends, so before another candidate can lead), or with `false` once it
    /// was resigned. Stops waiting when the environment exits.
    #[napi(ts_return_type = "Promise<boolean>", catch_unwind)]
    pub fn wait_lost<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        boundary(|| {
            // The lock only: a pending wait does not keep the leadership (and its extensions)
            // alive once JS let go of it.
            let lock = self.leadership.lock().clone();
            self.scope.promise(env, async move {
                lock.lost().await;
                Ok(lock.is_lost())
            })
        })
    }
}

/// What an observer's `next` calls share: the core observer (made by the first call, once the
/// manager has connected; dropped when stopped) and the flag that stops it.
struct Watching {
    observer: tokio::sync::Mutex<Option<ironlock::Observer>>,
    stop: watch::Sender<bool>,
}

impl Watching {
    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }
}

/// The changes of leader of an election, in order (`NativeElection#observe`).
#[napi]
pub struct NativeObserver {
    watching: Arc<Watching>,
    core: Arc<Core>,
    scope: Arc<EnvScope>,
    name: String,
}

#[napi]
impl NativeObserver {
    /// The next leader different from the last one delivered (the first call: the current
    /// one; `leader` null when nobody leads), or `end` once `stop()` was called or the manager
    /// closed. Leaders follow each other in increasing terms. Calls are served in order.
    #[napi(ts_return_type = "Promise<LeaderChange>", catch_unwind)]
    pub fn next<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        boundary(|| {
            let watching = Arc::clone(&self.watching);
            let closed = self.core.closed();
            let connecting = self.core.get().ok();
            let name = self.name.clone();
            self.scope.promise(env, async move {
                let Some(connecting) = connecting else {
                    return Ok(LeaderChange::ended());
                };
                if watching.stopped() {
                    return Ok(LeaderChange::ended());
                }
                let follow = async {
                    let mut observer = watching.observer.lock().await;
                    if watching.stopped() {
                        return Ok(None);
                    }
                    let observer = match &mut *observer {
                        Some(o) => o,
                        empty => {
                            let m = connecting.await?;
                            empty.insert(m.election(name).observe()?)
                        }
                    };
                    observer.next().await.map(Some)
                };
                let outcome = tokio::select! {
                    r = follow => r,
                    () = until_set(watching.stop.subscribe()) => Ok(None),
                    () = until_set(closed.clone()) => Ok(None),
                };
                match outcome {
                    Ok(Some(leader)) => Ok(LeaderChange {
                        end: false,
                        leader: leader.map(NativeLeader::from),
                    }),
                    // Stopped, or the manager closed (its observer then fails as closed).
                    Ok(None) => {
                        watching.observer.lock().await.take();
                        Ok(LeaderChange::ended())
                    }
                    Err(_) if *closed.borrow() => {
                        watching.observer.lock().await.take();
                        Ok(LeaderChange::ended())
                    }
                    Err(e) => Err(to_napi(e)),
                }
            })
        })
    }

    /// Ends the stream: a pending `next` resolves with `end`, and the core observer (its
    /// subscription to the nodes' announcements) is dropped. Idempotent.
    #[napi]
    pub fn stop(&self) {
        self.watching.stop.send_replace(true);
        if let Ok(mut observer) = self.watching.observer.try_lock() {
            observer.take();
        }
    }
}
