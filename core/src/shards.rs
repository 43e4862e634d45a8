//! A Redis Cluster as one voter: its shards' masters, each checked like a standalone node
//! (restart and failover quarantine), and every vote guarded so that it counts only if the
//! master that ran it is the one that was checked.
//!
//! The cluster connection (the `redis` crate's, which follows MOVED and ASK) sends each request
//! to the master of its keys' slot. Each script runs there behind a guard that compares the
//! master's replication ID with the one read when the shard was checked: a shard whose master
//! changed since (a failover, a restart, resharding to another master) refuses the vote, and the
//! shards are read again. A shard in quarantine runs the vote (its keys are written, as on a
//! restarted standalone node) but the vote does not count.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, Value};

use crate::config::EffectiveTls;
use crate::slot::{companion, key_slot};
use crate::topology::{ServerInfo, addr_like, build_client, certificates, parse_info};

/// Runs before every script on a cluster voter: the last argument is the replication ID the
/// shard's master had when it was checked.
const GUARD: &str = "\nlocal expect = table.remove(ARGV)\n\
local info = redis.call('INFO', 'replication')\n\
if not string.find(info, 'master_replid:' .. expect, 1, true) then\n\
  return redis.error_reply('IRONLOCK_STALE this shard is not served by the master that was checked (a failover, a restart or resharding); checking the shards again')\n\
end\n";

/// Each script's SHA → its guarded twin's SHA and source.
static GUARDED: LazyLock<HashMap<String, (String, String)>> = LazyLock::new(|| {
    crate::scripts::ALL_SOURCES
        .iter()
        .map(|src| {
            let guarded = format!("{GUARD}{src}");
            let sha = redis::Script::new(&guarded).get_hash().to_owned();
            (
                redis::Script::new(src).get_hash().to_owned(),
                (sha, guarded),
            )
        })
        .collect()
});

/// A connection to a standalone node or to a cluster; requests go through either alike.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> redis::RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// One shard as last checked: the slots its master serves, who that master is, and from when
/// its "yes" votes count.
#[derive(Debug, Clone)]
pub(crate) struct Shard {
    pub(crate) start: u16,
    pub(crate) end: u16,
    pub(crate) addr: String,
    pub(crate) replid: String,
    pub(crate) eligible_at: Instant,
    /// Why not before `eligible_at`: "restarted" or "promoted from a replica", and how long ago.
    pub(crate) why: String,
}

impl Shard {
    /// Why this shard's vote does not count now, or `None` when it does.
    pub(crate) fn not_counted(&self, now: Instant) -> Option<String> {
        let left = self.eligible_at.checked_duration_since(now)?;
        let left = left.as_secs() + u64::from(left.subsec_nanos() > 0);
        Some(format!(
            "shard {}-{} (master {}) {}; counted again in {left} s; see restart_quarantine",
            self.start, self.end, self.addr, self.why
        ))
    }
}

/// What a cluster voter knows of its shards.
pub(crate) struct Shards {
    pub(crate) list: Vec<Shard>,
    pub(crate) version: String,
}

/// The client of a cluster voter, from its seeds and the nodes' credentials and TLS.
pub(crate) fn cluster_client(
    seeds: &[redis::ConnectionInfo],
    template: &redis::ConnectionInfo,
    tls: &EffectiveTls,
    connect_timeout: Duration,
) -> Result<redis::cluster::ClusterClient, String> {
    let mut b = redis::cluster::ClusterClientBuilder::new(seeds.to_vec())
        .connection_timeout(connect_timeout)
        .retries(2)
        .tcp_settings(template.tcp_settings().clone().set_nodelay(true));
    let settings = template.redis_settings();
    if let Some(user) = settings.username() {
        b = b.username(user);
    }
    if let Some(pw) = settings.password() {
        b = b.password(pw);
    }
    if matches!(template.addr(), redis::ConnectionAddr::TcpTls { .. }) {
        b = b.tls(redis::TlsMode::Secure);
        if let Some(certs) = certificates(tls) {
            b = b.certs(certs);
        }
    }
    b.build().map_err(|e| e.to_string())
}

/// What checking a shard's master needs besides its address.
pub(crate) struct Check<'a> {
    pub(crate) template: &'a redis::ConnectionInfo,
    pub(crate) tls: &'a EffectiveTls,
    pub(crate) connect_timeout: Duration,
    /// Restart and failover quarantine (`None`: off).
    pub(crate) quarantine: Option<Duration>,
    pub(crate) key_prefix: &'a str,
}

/// Reads the slot map through the cluster connection (`CLUSTER SLOTS`), then checks every
/// shard's master over a connection of its own: `INFO` (uptime, role, replication ID), the
/// scripts and their guarded twins loaded, and a promoted master's reign dated as for a
/// standalone voter (in a key of a slot it serves).
pub(crate) async fn read(
    conn: &mut ClusterConnection,
    check: &Check<'_>,
) -> Result<Shards, String> {
    let slots: Value = tokio::time::timeout(
        check.connect_timeout,
        redis::cmd("CLUSTER").arg("SLOTS").query_async(conn),
    )
    .await
    .map_err(|_| "CLUSTER SLOTS: no reply within connect_timeout".to_owned())?
    .map_err(|e| format!("CLUSTER SLOTS: {e}"))?;
    let ranges = parse_slots(&slots)?;
    let mut masters: Vec<String> = ranges.iter().map(|(_, _, a)| a.clone()).collect();
    masters.sort();
    masters.dedup();
    let ranges_ref = &ranges;
    let checks = masters.iter().map(|addr| async move {
        let first = ranges_ref
            .iter()
            .filter(|(_, _, a)| a == addr)
            .map(|(s, e, _)| (*s, *e))
            .collect::<Vec<_>>();
        (addr.clone(), check_master(addr, &first, check).await)
    });
    let checked: HashMap<String, Result<(ServerInfo, Instant, String), String>> =
        futures_util::future::join_all(checks)
            .await
            .into_iter()
            .collect();
    let mut list = Vec::with_capacity(ranges.len());
    let mut version = String::new();
    for (start, end, addr) in ranges {
        let (info, eligible_at, why) = checked[&addr]
            .as_ref()
            .map_err(|e| format!("shard {start}-{end} (master {addr}): {e}"))?
            .clone();
        version.clone_from(&info.version);
        list.push(Shard {
            start,
            end,
            addr,
            replid: info.replid,
            eligible_at,
            why,
        });
    }
    list.sort_by_key(|s| s.start);
    Ok(Shards { list, version })
}

/// `CLUSTER SLOTS` as `(start, end, "host:port" of the master)`.
fn parse_slots(v: &Value) -> Result<Vec<(u16, u16, String)>, String> {
    let bad = || "CLUSTER SLOTS: unexpected reply".to_owned();
    let Value::Array(items) = v else {
        return Err(bad());
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let Value::Array(parts) = item else {
            return Err(bad());
        };
        let num = |v: Option<&Value>| match v {
            Some(Value::Int(n)) => u16::try_from(*n).ok(),
            _ => None,
        };
        let (Some(start), Some(end)) = (num(parts.first()), num(parts.get(1))) else {
            return Err(bad());
        };
        let Some(Value::Array(master)) = parts.get(2) else {
            return Err(bad());
        };
        let host = match master.first() {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::SimpleString(s)) => s.clone(),
            _ => return Err(bad()),
        };
        let port = num(master.get(1)).ok_or_else(bad)?;
        out.push((start, end, format!("{host}:{port}")));
    }
    if out.is_empty() {
        return Err("CLUSTER SLOTS: no slot is served (is the cluster formed?)".to_owned());
    }
    Ok(out)
}

/// Checks one master: its `INFO`, the scripts loaded, its reign dated when it was promoted.
/// Returns what `INFO` said, from when its votes count, and why not before.
async fn check_master(
    addr: &str,
    ranges: &[(u16, u16)],
    check: &Check<'_>,
) -> Result<(ServerInfo, Instant, String), String> {
    let (host, port) = addr
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h.to_owned(), p.parse::<u16>().ok()?)))
        .ok_or_else(|| format!("unusable address {addr:?}"))?;
    let node_addr = addr_like(check.template, host, port);
    let client = build_client(check.tls, check.template.clone().set_addr(node_addr))?;
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(check.connect_timeout))
        .set_response_timeout(Some(check.connect_timeout));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| e.to_string())?;
    let mut ask = redis::pipe();
    ask.cmd("INFO").arg("server").cmd("INFO").arg("replication");
    for (src, (_, guarded)) in crate::scripts::ALL_SOURCES.iter().zip(
        crate::scripts::ALL_SOURCES
            .iter()
            .map(|s| &GUARDED[redis::Script::new(s).get_hash()]),
    ) {
        ask.cmd("SCRIPT").arg("LOAD").arg(*src).ignore();
        ask.cmd("SCRIPT").arg("LOAD").arg(guarded).ignore();
    }
    let (server, replication): (String, String) = ask
        .query_async(&mut conn)
        .await
        .map_err(|e| e.to_string())?;
    let info = parse_info(&format!("{server}\r\n{replication}"));
    let received = Instant::now();
    let Some(q) = check.quarantine else {
        return Ok((info, received, String::new()));
    };
    let restart = received + q.saturating_sub(info.uptime);
    let mut at = restart;
    let mut why = format!("restarted {} s ago", info.uptime.as_secs());
    if info.promoted {
        // Dated in a key of a slot this master serves (a script may touch no other slot).
        let key = ranges.iter().find_map(|&(start, end)| {
            let key = companion(&format!("{}ironlock:master", check.key_prefix), "");
            let slot = key_slot(&key);
            if (start..=end).contains(&slot) {
                return Some(key);
            }
            let key = format!(
                "{}{{{}}}ironlock:master",
                check.key_prefix,
                crate::slot::tag_for_slot(start)
            );
            (start..=end).contains(&key_slot(&key)).then_some(key)
        });
        let age = match key {
            Some(key) => {
                let age: i64 = redis::cmd("EVAL")
                    .arg(crate::scripts::MASTER_SOURCE)
                    .arg(1)
                    .arg(&key)
                    .arg(&info.replid)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| format!("dating the master's reign in {key:?}: {e}"))?;
                Duration::from_secs(age.max(0) as u64)
            }
            // Keys with this prefix never land on this master: wait the full quarantine.
            None => Duration::ZERO,
        };
        let failover = received + q.saturating_sub(age);
        if failover > at {
            at = failover;
            why = format!("was promoted from a replica {} s ago", age.as_secs());
        }
    }
    Ok((info, at, format!("in quarantine: {why}")))
}

/// The shard that serves `slot`.
pub(crate) fn shard_of(shards: &[Shard], slot: u16) -> Option<&Shard> {
    let i = shards.partition_point(|s| s.end < slot);
    shards.get(i).filter(|s| s.start <= slot)
}

/// `cmd` as a cluster voter sends it: an `EVALSHA` becomes its guarded twin with the shard
/// master's replication ID as last argument. Returns the command and the slot of its keys; an
/// error when its keys are in different slots (a Redis Cluster runs a script on one shard).
pub(crate) fn guard(cmd: &Cmd, shards: &[Shard]) -> Result<(Cmd, Option<Shard>), String> {
    let args: Vec<&[u8]> = cmd
        .args_iter()
        .filter_map(|a| match a {
            redis::Arg::Simple(b) => Some(b),
            _ => None,
        })
        .collect();
    if args
        .first()
        .is_none_or(|a| !a.eq_ignore_ascii_case(b"EVALSHA"))
        || args.len() < 3
    {
        return Ok((cmd.clone(), None));
    }
    let sha = std::str::from_utf8(args[1]).unwrap_or_default();
    let numkeys: usize = std::str::from_utf8(args[2])
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let keys = args.get(3..3 + numkeys).unwrap_or_default();
    let Some(first) = keys.first() else {
        return Ok((cmd.clone(), None));
    };
    let slot = key_slot(&String::from_utf8_lossy(first));
    if keys
        .iter()
        .any(|k| key_slot(&String::from_utf8_lossy(k)) != slot)
    {
        return Err(
            "the request's keys are in different hash slots: on a Redis Cluster voter, all resources of one request must share a slot (give them a common hash tag, e.g. {order:42}:a and {order:42}:b)"
                .to_owned(),
        );
    }
    let shard = shard_of(shards, slot)
        .ok_or_else(|| format!("no shard serves slot {slot}; checking the shards again"))?;
    let Some((guarded, _)) = GUARDED.get(sha) else {
        return Ok((cmd.clone(), Some(shard.clone())));
    };
    let mut out = redis::cmd("EVALSHA");
    out.arg(guarded);
    for a in &args[2..] {
        out.arg(*a);
    }
    out.arg(&shard.replid);
    Ok((out, Some(shard.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(start: u16, end: u16) -> Shard {
        Shard {
            start,
            end,
            addr: format!("h:{start}"),
            replid: format!("r{start}"),
            eligible_at: Instant::now(),
            why: String::new(),
        }
    }

    #[test]
    fn a_shard_in_quarantine_does_not_count_and_says_for_how_many_whole_seconds_more() {
        let now = Instant::now();
        let mut s = shard(0, 16383);
        s.why = "in quarantine: restarted 0 s ago".to_owned();
        // Eligible before now: it counts.
        s.eligible_at = now;
        assert_eq!(s.not_counted(now + Duration::from_millis(1)), None);
        assert_eq!(s.not_counted(now + Duration::from_secs(1)), None);
        // 2 s to go: it does not count, and says 2 s.
        s.eligible_at = now + Duration::from_secs(2);
        let why = s.not_counted(now).expect("in quarantine");
        assert_eq!(
            why,
            "shard 0-16383 (master h:0) in quarantine: restarted 0 s ago; counted again in 2 s; see restart_quarantine"
        );
        // A part of a second left is rounded up, never down to 0.
        s.eligible_at = now + Duration::from_millis(1500);
        assert!(s.not_counted(now).unwrap().contains("counted again in 2 s"));
        s.eligible_at = now + Duration::from_millis(1);
        assert!(s.not_counted(now).unwrap().contains("counted again in 1 s"));
    }

    #[test]
    fn slots_find_their_shard() {
        let list = vec![shard(0, 5460), shard(5461, 10922), shard(10923, 16383)];
        assert_eq!(shard_of(&list, 0).map(|s| s.start), Some(0));
        assert_eq!(shard_of(&list, 5461).map(|s| s.start), Some(5461));
        assert_eq!(shard_of(&list, 16383).map(|s| s.start), Some(10923));
        assert!(shard_of(&list[..1], 6000).is_none());
    }

    #[test]
    fn a_script_is_sent_as_its_guarded_twin_with_the_masters_replication_id() {
        let list = vec![shard(0, 16383)];
        let sha = redis::Script::new(crate::scripts::ALL_SOURCES[0])
            .get_hash()
            .to_owned();
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&sha).arg(2).arg("{o}:a").arg("{o}:b").arg("token");
        let (g, s) = guard(&cmd, &list).expect("one slot");
        let args: Vec<Vec<u8>> = g
            .args_iter()
            .filter_map(|a| match a {
                redis::Arg::Simple(b) => Some(b.to_vec()),
                _ => None,
            })
            .collect();
        assert_eq!(args[1], GUARDED[&sha].0.as_bytes());
        assert_eq!(args.last().map(Vec::as_slice), Some(&b"r0"[..]));
        assert_eq!(args.len(), 7);
        assert_eq!(s.map(|s| s.start), Some(0));
        // Keys in two slots are refused: a cluster runs a script on one shard.
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&sha).arg(2).arg("a").arg("b").arg("token");
        assert!(
            guard(&cmd, &list)
                .unwrap_err()
                .contains("different hash slots")
        );
    }
}
