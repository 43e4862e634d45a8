//! Leader election: candidates wait in line (the fair queue) for the election's key; the grant's
//! fence is the leader's term and its write-back also writes the leader record (value, term,
//! version) beside the key. A leadership is a lock of kind `Leader`, kept alive, that counts as
//! lost a margin before its validity ends; `leader()` is a quorum read; `observe()` follows the
//! changes from the announcements of grants, proclaims and releases, with polling as fallback.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::acquire;
use crate::cluster::Cluster;
use crate::config::{cut, validate_election_name};
use crate::error::{Error, ErrorKind, Result};
use crate::lock::{KeepAlive, Lock, Released};
use crate::manager::LockManager;
use crate::quorum::{self, Reply, Tally};
use crate::scripts;

/// The longest value a candidate may advertise (bytes).
pub const MAX_VALUE_LEN: usize = 64 * 1024;

/// The election `name` ([`LockManager::election`]). Cheap to clone.
#[derive(Clone)]
pub struct Election {
    pub(crate) manager: LockManager,
    pub(crate) name: String,
}

/// Who leads an election, from a quorum read ([`Election::leader`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The value the leader advertises (its address, say), as last proclaimed.
    pub value: String,
    /// The leader's term: the fencing token of its grant. Every later leader's term is larger.
    pub term: u64,
    /// The leader's token (its lock token).
    pub token: String,
    /// How long the leadership stays valid at most, as the nodes that hold it see it (the
    /// quorum-th longest remaining time to live, less the read's duration).
    pub validity: Duration,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .finish()
    }
}

fn check_value(value: &str) -> Result<()> {
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::invalid(format!(
            "value: at most {MAX_VALUE_LEN} bytes, got {}",
            value.len()
        )));
    }
    Ok(())
}

impl Election {
    /// The election's name, as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits until this candidate leads, then returns its leadership, kept alive in the
    /// background. Candidates are served in the order they queued; the leadership is granted
    /// only once a quorum of nodes granted it, with `value` and its term written on them.
    /// Cancel-safe: dropping the future takes the candidate out of line on every node.
    pub async fn campaign(&self, value: &str, ttl: Duration) -> Result<Leadership> {
        self.campaign_with(value, ttl, None).await
    }

    /// As [`campaign`](Self::campaign), giving up with `Contended` after `wait` (`None`: as
    /// long as it takes).
    pub async fn campaign_with(
        &self,
        value: &str,
        ttl: Duration,
        wait: Option<Duration>,
    ) -> Result<Leadership> {
        check_value(value)?;
        let cluster = &self.manager.cluster;
        let lock =
            acquire::acquire_leadership(cluster, &self.name, value.into(), ttl, wait).await?;
        let keeper = lock.keep_alive();
        Ok(Leadership {
            value: std::sync::Mutex::new(value.to_owned()),
            version: AtomicU64::new(0),
            keeper: std::sync::Mutex::new(Some(keeper)),
            lock,
        })
    }

    /// Who leads now, from every node (a quorum must answer, else `Unavailable`): the token a
    /// quorum of nodes hold under the election's key, with its value and term; `None` when no
    /// candidate leads (or one was granted and its record is not written yet).
    pub async fn leader(&self) -> Result<Option<Leader>> {
        read_leader(&self.manager.cluster, &self.name).await
    }

    /// A stream of the changes of leader ([`Observer::next`]), starting with the current one.
    pub fn observe(&self) -> Result<Observer> {
        validate_election_name(&self.name)?;
        let cluster = &self.manager.cluster;
        cluster.check_open()?;
        let key = cluster.key(&self.name);
        let watch = cluster.notifier.observe(vec![
            scripts::release_channel(&key),
            scripts::leader_channel(&key),
        ]);
        let poll = cluster.config.retry_delay.clamp(MIN_POLL, MAX_POLL);
        Ok(Observer {
            election: self.clone(),
            watch,
            last: None,
            leader: None,
            started: false,
            poll,
        })
    }
}

/// The shortest and longest pause of an observer between two reads without an announcement.
const MIN_POLL: Duration = Duration::from_millis(20);
const MAX_POLL: Duration = Duration::from_secs(1);

/// This candidate's leadership: a held lock of the election's key, extended in the background
/// until it is resigned or lost.
pub struct Leadership {
    lock: Lock,
    value: std::sync::Mutex<String>,
    version: AtomicU64,
    keeper: std::sync::Mutex<Option<KeepAlive>>,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("election", &self.lock.resources().first())
            .field("term", &self.term())
            .field("value", &self.value())
            .field("validity", &self.validity())
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl Leadership {
    /// The term: the fencing token of this leadership's grant (larger than every earlier
    /// leader's). Pass it to whatever the leader writes to, so that a deposed leader's late
    /// writes can be refused.
    pub fn term(&self) -> u64 {
        self.lock.fence().unwrap_or(0)
    }

    /// The value this leader advertises.
    pub fn value(&self) -> String {
        self.value.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The leadership's lock (token, report, extensions).
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// How long this leadership is still valid: it ends a margin (a tenth of the ttl, at most a
    /// second) before the lock's own validity, so that a leader hears of its loss before
    /// another can lead.
    pub fn validity(&self) -> Duration {
        self.lock.validity()
    }

    /// True while this candidate leads (not lost, resigned or run out).
    pub fn is_leader(&self) -> bool {
        self.lock.is_valid()
    }

    /// True once the leadership is known lost.
    pub fn is_lost(&self) -> bool {
        self.lock.is_lost()
    }

    /// Resolves when the leadership is lost (an extension found no quorum holding it, or its
    /// validity ran out without one), before another candidate can be granted it; at once once
    /// resigned. Cancel-safe.
    pub async fn lost(&self) {
        self.lock.lost().await
    }

    /// Advertises a new value, only while still leader: fails with `Lost` when a quorum no
    /// longer holds this leadership, `Unavailable` when too few nodes answered.
    pub async fn proclaim(&self, value: &str) -> Result<()> {
        check_value(value)?;
        if !self.is_leader() {
            return Err(self.lock.lost_error("no longer the leader"));
        }
        let cluster = &self.lock.inner.cluster;
        let key = &self.lock.inner.keys[0];
        let version = (self.version.fetch_add(1, Ordering::AcqRel) + 1).to_string();
        let term = self.term().to_string();
        let cmd = Arc::new(scripts::evalsha(
            &scripts::PROCLAIM,
            &[key.clone(), scripts::leader_key(key)],
            &[&self.lock.inner.token, value, &version, &term],
        ));
        let q = self.lock.inner.quorum;
        let round = quorum::run_flag(&cluster.nodes, q, Instant::now(), cmd).await;
        if round.granted >= q && self.is_leader() {
            *self.value.lock().unwrap_or_else(|p| p.into_inner()) = value.to_owned();
            return Ok(());
        }
        if cluster.nodes.len() - round.refused < q {
            return Err(self
                .lock
                .lost_error("fewer than a quorum of nodes still hold it")
                .with_report(round.report));
        }
        Err(Error::new(
            ErrorKind::Unavailable,
            format!(
                "could not proclaim in election {}: {} of {} nodes wrote it, quorum {q}",
                cut(&format!("{:?}", self.lock.resources()[0])),
                round.granted,
                cluster.nodes.len(),
            ),
        )
        .with_report(round.report))
    }

    /// Steps down: stops the extensions and releases the election's key and record on every
    /// node (the next candidate in line is woken).
    pub async fn resign(&self) -> Released {
        if let Some(k) = self.keeper.lock().unwrap_or_else(|p| p.into_inner()).take() {
            k.stop();
        }
        self.lock.release().await
    }
}

/// The changes of leader of an election, in order ([`Election::observe`]).
pub struct Observer {
    election: Election,
    watch: crate::notify::Watch,
    /// (term, value) of the leader last delivered; `Some(None)` once "no leader" was.
    last: Option<Option<(u64, String)>>,
    /// The token of the leader last delivered and until when it may be valid.
    leader: Option<(String, Instant)>,
    started: bool,
    poll: Duration,
}

impl Observer {
    /// The next leader different from the last one delivered (the first call: the current one);
    /// `None` in the result means nobody leads. Leaders follow each other in increasing terms;
    /// a change that is undone before a read sees it (a candidate that led and resigned between
    /// two reads) is not delivered. Fails with `Unavailable` once the manager is closed.
    /// Cancel-safe.
    pub async fn next(&mut self) -> Result<Option<Leader>> {
        loop {
            let cluster = &self.election.manager.cluster;
            cluster.check_open()?;
            self.watch.waiter.consumed();
            match read_views(cluster, &self.election.name).await {
                Ok((views, elapsed)) => {
                    let now = leader_of(&views, cluster.quorum, elapsed);
                    if let (Some(l), Some((token, until))) = (&now, &mut self.leader)
                        && l.token == *token
                    {
                        // Still leading: valid for as long as this read says.
                        *until = Instant::now() + l.validity;
                    }
                    let seen = now.as_ref().map(|l| (l.term, l.value.clone()));
                    let skip = match (&self.last, &now, &self.leader) {
                        // A read that lags one already delivered (a slower quorum).
                        (Some(Some((t, _))), Some(l), _) => l.term < *t,
                        // Nobody found, while the leader last delivered may still be valid and
                        // fewer than a quorum of nodes said it is gone (a node restarted empty,
                        // another slow): not known to have changed.
                        (_, None, Some((token, until))) => {
                            Instant::now() < *until
                                && !gone_on_quorum(&views, token, cluster.quorum)
                        }
                        _ => false,
                    };
                    if (!self.started || self.last.as_ref() != Some(&seen)) && !skip {
                        self.started = true;
                        self.last = Some(seen);
                        self.leader = now
                            .as_ref()
                            .map(|l| (l.token.clone(), Instant::now() + l.validity));
                        return Ok(now);
                    }
                }
                Err(e) if e.kind() == ErrorKind::InvalidArgument => return Err(e),
                Err(e) => tracing::debug!(error = %e, "observe: leader read failed; retrying"),
            }
            tokio::select! {
                _ = self.watch.waiter.notify.notified() => self.watch.record_wakeup(),
                _ = tokio::time::sleep(self.poll) => {}
            }
        }
    }
}

/// One node's view: the token under the key, its remaining ms, and the leader record.
type NodeView = (Option<String>, i64, Vec<(String, String)>);

async fn read_leader(cluster: &Arc<Cluster>, name: &str) -> Result<Option<Leader>> {
    let (views, elapsed) = read_views(cluster, name).await?;
    Ok(leader_of(&views, cluster.quorum, elapsed))
}

/// Every node's view of the election (`None`: no answer), once a quorum answered, and how long
/// the read took.
async fn read_views(
    cluster: &Arc<Cluster>,
    name: &str,
) -> Result<(Vec<Option<NodeView>>, Duration)> {
    validate_election_name(name)?;
    cluster.check_open()?;
    let key = cluster.key(name);
    let mut pipe = redis::pipe();
    pipe.get(&key).pttl(&key).hgetall(scripts::leader_key(&key));
    let pipe = Arc::new(pipe);
    let n = cluster.nodes.len();
    let q = cluster.quorum;
    let views: Arc<std::sync::Mutex<Vec<Option<NodeView>>>> =
        Arc::new(std::sync::Mutex::new(vec![None; n]));
    let t1 = Instant::now();
    let round = quorum::run(&cluster.nodes, Tally::ReleaseAll, q, t1, |node| {
        let (pipe, views) = (pipe.clone(), views.clone());
        let i = cluster.nodes.iter().position(|m| Arc::ptr_eq(m, &node));
        async move {
            match node.query_pipe::<NodeView>(&pipe).await {
                Ok(view) => {
                    if let Some(i) = i {
                        views.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(view);
                    }
                    Reply::Yes(0)
                }
                Err(f) => Reply::Failed(f),
            }
        }
    })
    .await;
    let elapsed = t1.elapsed();
    let views = views.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let answered = views.iter().filter(|v| v.is_some()).count();
    if answered < q {
        return Err(Error::new(
            ErrorKind::Unavailable,
            format!(
                "could not read the leader of election {}: {answered} of {n} nodes answered, quorum {q}",
                cut(&format!("{name:?}"))
            ),
        )
        .with_report(round.report));
    }
    Ok((views, elapsed))
}

/// Whether a quorum of the nodes that answered no longer hold `token` (a leader that resigned
/// or whose key expired), rather than too few answering to find its quorum.
fn gone_on_quorum(views: &[Option<NodeView>], token: &str, q: usize) -> bool {
    let gone = views
        .iter()
        .flatten()
        .filter(|(t, _, _)| t.as_deref() != Some(token))
        .count();
    gone >= q
}

/// The leader a quorum of node views agree on, if any.
fn leader_of(views: &[Option<NodeView>], q: usize, elapsed: Duration) -> Option<Leader> {
    let answered: Vec<&NodeView> = views.iter().flatten().collect();
    let token = answered.iter().find_map(|(t, _, _)| {
        let t = t.as_deref()?;
        let holders = answered
            .iter()
            .filter(|(u, _, _)| u.as_deref() == Some(t))
            .count();
        (holders >= q).then(|| t.to_owned())
    })?;
    let mut ttls: Vec<i64> = answered
        .iter()
        .filter(|(t, _, _)| t.as_deref() == Some(token.as_str()))
        .map(|(_, pttl, _)| *pttl)
        .collect();
    ttls.sort_unstable_by(|a, b| b.cmp(a));
    let ttl = ttls.get(q - 1).copied().unwrap_or(0).max(0) as u64;
    // The record written last among the nodes that hold this token's key and whose record is
    // this token's: the latest round's (largest term: a candidate's later round gets a larger
    // one, and a record a failed round wrote on a node may stay there beside the key of a
    // later, granted round), then its latest proclaim (largest version). A node that does not
    // hold the key may keep the record of a round that failed: it is not asked.
    let (term, _, value) = answered
        .iter()
        .filter(|(t, _, _)| t.as_deref() == Some(token.as_str()))
        .filter_map(|(_, _, record)| {
            let field = |f: &str| record.iter().find(|(k, _)| k == f).map(|(_, v)| v);
            (field("token")? == &token).then(|| {
                let num = |f: &str| field(f).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                (num("term"), num("version"), field("value").cloned())
            })
        })
        .max_by_key(|(term, version, _)| (*term, *version))?;
    Some(Leader {
        value: value.unwrap_or_default(),
        term,
        token,
        validity: Duration::from_millis(ttl).saturating_sub(elapsed),
    })
}

impl LockManager {
    /// The leader election `name`: [`Election::campaign`] waits in line until this candidate
    /// leads, [`Election::leader`] says who leads, [`Election::observe`] follows the changes.
    /// Its key is the lock key of `name` (a plain lock of the same name excludes every
    /// candidate).
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election {
            manager: self.clone(),
            name: name.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(token: Option<&str>, pttl: i64, record: &[(&str, &str)]) -> Option<NodeView> {
        let record = record
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Some((token.map(str::to_owned), pttl, record))
    }

    #[test]
    fn the_leader_is_the_token_a_quorum_holds_with_its_latest_record() {
        let old = [
            ("token", "t1"),
            ("term", "7"),
            ("value", "a"),
            ("version", "0"),
        ];
        let new = [
            ("token", "t1"),
            ("term", "7"),
            ("value", "b"),
            ("version", "1"),
        ];
        let views = [
            view(Some("t1"), 900, &old),
            view(Some("t1"), 800, &new),
            view(Some("t2"), 5000, &[]),
        ];
        let l = leader_of(&views, 2, Duration::from_millis(10)).expect("a leader");
        assert_eq!((l.token.as_str(), l.term, l.value.as_str()), ("t1", 7, "b"));
        assert_eq!(l.validity, Duration::from_millis(790));
        // No quorum on one token, or no record yet: nobody leads.
        let split = [
            view(Some("t1"), 900, &old),
            None,
            view(Some("t2"), 900, &[]),
        ];
        assert_eq!(leader_of(&split, 2, Duration::ZERO), None);
        let unrecorded = [view(Some("t1"), 900, &[]), view(Some("t1"), 900, &[]), None];
        assert_eq!(leader_of(&unrecorded, 2, Duration::ZERO), None);
    }

    /// Found by the protocol model: a campaign round that failed after writing its record (term
    /// 1, version 0) on a node, then a later round of the same candidate granted with term 4
    /// (version 0 again). The read names the later term whatever the nodes' order, and never
    /// takes a record from a node that no longer holds the key.
    #[test]
    fn the_leader_read_names_the_latest_rounds_term() {
        let rec = |term: &'static str| {
            [
                ("token", "t1"),
                ("term", term),
                ("value", "a"),
                ("version", "0"),
            ]
        };
        let (r1, r4) = (rec("1"), rec("4"));
        for views in [
            [
                view(Some("t1"), 900, &r1),
                view(Some("t1"), 900, &r4),
                view(Some("t1"), 900, &r4),
            ],
            [
                view(Some("t1"), 900, &r4),
                view(Some("t1"), 900, &r4),
                view(Some("t1"), 900, &r1),
            ],
        ] {
            let l = leader_of(&views, 2, Duration::ZERO).expect("a leader");
            assert_eq!(l.term, 4);
        }
        // A stale record (a newer term even) on a node whose key another token holds, or that
        // lost the key, is not the leader's.
        let stale = rec("9");
        let views = [
            view(Some("t1"), 900, &r4),
            view(Some("t1"), 900, &r4),
            view(None, -2, &stale),
            view(Some("t2"), 900, &stale),
        ];
        assert_eq!(
            leader_of(&views, 2, Duration::ZERO).expect("a leader").term,
            4
        );
    }
}
