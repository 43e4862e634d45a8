//! The Lua scripts. Each runs atomically on one node; every language uses these same scripts, so
//! keys, values and channels are identical whoever took the lock.
//!
//! KEYS layout for the lock scripts: the n lock keys, then (acquire and fence only) their n
//! fence counter keys; each semaphore and fair script says its own. ARGV\[1\] is always the
//! token.
//!
//! This module holds what every primitive shares (the Lua heads the scripts are built from, the
//! list loaded on each connection, the restart and failover dating) and the plain lock's
//! scripts; each other primitive's scripts and companion keys are in a module of their own
//! (semaphores, read-write locks, elections, fair waiting), all re-exported here.

use std::sync::LazyLock;

use redis::Script;

pub use crate::rwlock::FAIR_READ_ACQUIRE_SOURCE;

/// The Lua functions of the limit record ([`limit_key`]): `recorded(k)`, the limit recorded in
/// `k` (nil when there is none, or when `k` holds something that is not a limit: then it is not
/// ours and is never written), and `record(k, limit, of)`, which records `limit` for as long as
/// the semaphore key `of` lives.
macro_rules! limit_lua {
    () => {
        concat!(
            "local function recorded(k)\n",
            "  local v = tonumber(redis.call('GET', k) or '')\n",
            "  if v and v >= 1 and v <= 10000 and v % 1 == 0 then return v end\n",
            "  return nil\n",
            "end\n",
            "local function record(k, limit, of)\n",
            "  if redis.call('EXISTS', k) == 1 and not recorded(k) then return end\n",
            "  redis.call('SET', k, limit, 'PX', math.max(redis.call('PTTL', of), 1))\n",
            "end\n",
        )
    };
}

/// A semaphore script: the shared head (the node's time in ms as `now`, holders whose permits
/// expired dropped, `hold(ttl)` to (re)admit the token until `now + ttl`) and then `$body`.
macro_rules! concat_lua {
    ($body:expr) => {
        concat!(
            "\nlocal t = redis.call('TIME')\n",
            "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n",
            "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)\n",
            "local function hold(ttl)\n",
            "  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])\n",
            "  if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end\n",
            "end\n",
            limit_lua!(),
            $body
        )
    };
}

/// The Lua of a read-write lock's readers (after `now`, the node's time in ms): `READERS`
/// ([`READERS_VALUE`]); `hold(k, r, ttl)` (re)admits the token to the readers `r` until
/// `now + ttl`, keeping the lock key `k` alive at least as long; `unread(k, r)` takes the token
/// out of `r` (returning 1 when it was reading) after dropping expired readers, and then `k`
/// expires with the last reader left, or goes with the last one.
macro_rules! readers_lua {
    () => {
        concat!(
            "local READERS = 'ironlock readers'\n",
            "local function hold(k, r, ttl)\n",
            "  redis.call('ZADD', r, now + ttl, ARGV[1])\n",
            "  if redis.call('PTTL', r) < ttl then redis.call('PEXPIRE', r, ttl) end\n",
            "  if redis.call('PTTL', k) < ttl then redis.call('SET', k, READERS, 'PX', ttl) end\n",
            "end\n",
            "local function unread(k, r)\n",
            "  redis.call('ZREMRANGEBYSCORE', r, '-inf', now)\n",
            "  local n = redis.call('ZREM', r, ARGV[1])\n",
            "  if redis.call('GET', k) == READERS then\n",
            "    local last = redis.call('ZRANGE', r, -1, -1, 'WITHSCORES')\n",
            "    if #last == 0 then\n",
            "      redis.call('DEL', k)\n",
            "    else\n",
            "      redis.call('PEXPIRE', k, math.max(tonumber(last[2]) - now, 1))\n",
            "    end\n",
            "  end\n",
            "  return n\n",
            "end\n",
        )
    };
}
pub(crate) use readers_lua;

/// A read script: the shared head (the node's time in ms as `now`, `readers_lua`'s functions,
/// expired readers dropped) and then `$body`. KEYS\[1\] is the lock key, KEYS\[2\] the readers
/// key.
macro_rules! read_lua {
    ($body:expr) => {
        concat!(
            "\nlocal t = redis.call('TIME')\n",
            "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n",
            readers_lua!(),
            "redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)\n",
            $body
        )
    };
}

/// A fair-queue script: the shared head (`n` resources, the node's time in ms as `now`, the queue
/// timeout `qt`, `me` the token's entry in the queues (the token; a reader's is
/// [`reader_entry`]), `sweep(i)` to drop the entries of queue `i` whose heartbeat stopped,
/// `join(i, ticket)` to (re)register `me` in queue `i` with a fresh heartbeat, and
/// `fresh_ticket()`, the next ticket here: above every counter and at least ARGV\[7\]) and then
/// `$body`. A join only ever lengthens the life of the queue's keys (to `qt` from now): a waiter
/// with a shorter queue timeout must not make the entries of waiters with longer ones expire
/// with its own. KEYS: the n lock keys, their n queue keys, n heartbeat keys, n ticket counter
/// keys (then, for an acquire with fencing, n fence counter keys; each script's own keys come
/// last).
macro_rules! fair_lua {
    ($body:expr) => {
        concat!(
            "\nlocal n = tonumber(ARGV[4])\n",
            "local t = redis.call('TIME')\n",
            "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n",
            "local qt = tonumber(ARGV[3])\n",
            "local me = ARGV[1]\n",
            "local function sweep(i)\n",
            "  local q, b = KEYS[n + i], KEYS[2 * n + i]\n",
            "  local dead = redis.call('ZRANGEBYSCORE', b, '-inf', now)\n",
            "  for j = 1, #dead do redis.call('ZREM', q, dead[j]); redis.call('ZREM', b, dead[j]) end\n",
            "end\n",
            "local function keep(k)\n",
            "  if redis.call('PTTL', k) < qt then redis.call('PEXPIRE', k, qt) end\n",
            "end\n",
            "local function join(i, ticket)\n",
            "  local q, b, c = KEYS[n + i], KEYS[2 * n + i], KEYS[3 * n + i]\n",
            "  redis.call('ZADD', q, ticket, me)\n",
            "  redis.call('ZADD', b, now + qt, me)\n",
            "  local c0 = tonumber(redis.call('GET', c) or '0') or 0\n",
            "  if ticket > c0 then redis.call('SET', c, string.format('%d', ticket), 'KEEPTTL') end\n",
            "  keep(q); keep(b); keep(c)\n",
            "end\n",
            "local function fresh_ticket()\n",
            "  local ticket = tonumber(ARGV[7])\n",
            "  for i = 1, n do\n",
            "    local c = tonumber(redis.call('GET', KEYS[3 * n + i]) or '0') or 0\n",
            "    if c >= ticket then ticket = c + 1 end\n",
            "  end\n",
            "  return ticket\n",
            "end\n",
            $body
        )
    };
}
pub(crate) use fair_lua;

mod election;
mod fair;
mod rwlock;
mod semaphore;

pub use self::election::*;
pub use self::fair::*;
pub use self::rwlock::*;
pub use self::semaphore::*;

/// Every script, loaded with `SCRIPT LOAD` on each (re)connection so that each request is a
/// single `EVALSHA`: one command per request keeps requests on a connection strictly ordered
/// (a rollback can never overtake the acquire it undoes).
pub(crate) const ALL_SOURCES: [&str; 24] = [
    ACQUIRE_SOURCE,
    RELEASE_SOURCE,
    RELEASE_HELD_SOURCE,
    EXTEND_SOURCE,
    EXTEND_BATCH_SOURCE,
    EXTEND_SAME_SOURCE,
    FENCE_SOURCE,
    SEM_ACQUIRE_SOURCE,
    SEM_RELEASE_SOURCE,
    SEM_EXTEND_SOURCE,
    SEM_FENCE_SOURCE,
    FAIR_ACQUIRE_SOURCE,
    FAIR_LEAVE_SOURCE,
    SEM_FAIR_ACQUIRE_SOURCE,
    crate::rwlock::FAIR_READ_ACQUIRE_SOURCE,
    READ_ACQUIRE_SOURCE,
    READ_RELEASE_SOURCE,
    READ_EXTEND_SOURCE,
    WRITE_ACQUIRE_SOURCE,
    WRITE_RELEASE_SOURCE,
    LEADER_FENCE_SOURCE,
    PROCLAIM_SOURCE,
    LEADER_EXTEND_SOURCE,
    LEADER_RELEASE_SOURCE,
];

/// One `EVALSHA` of `script`, built once and sent to every node of a round.
pub(crate) fn evalsha<K: AsRef<str>>(script: &Script, keys: &[K], args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.len());
    for k in keys {
        cmd.arg(k.as_ref());
    }
    for a in args {
        cmd.arg(*a);
    }
    cmd
}

/// The channel a release announces itself on, for one lock key. It starts with the key (so with
/// the key prefix): an ACL user limited to `~prefix*` and `&prefix*` may publish and subscribe.
pub fn release_channel(key: &str) -> String {
    format!("{key}:ironlock:release")
}

/// The key that dates a node's data when `INFO` is not permitted (see [`EPOCH_SOURCE`]).
pub fn epoch_key(key_prefix: &str) -> String {
    format!("{key_prefix}ironlock:epoch")
}

/// The fallback of restart quarantine for ACL users without `INFO` (it is `@dangerous`): how many
/// seconds ago (server time) this node's data began. The key is created, holding the server's
/// time, by the first client that finds it missing; a node that restarted without persistence
/// has lost it, so its age is never more than the time since the data loss, as `uptime` is.
/// KEYS: the epoch key. Returns `{age, born}`: the age in whole seconds (0 when just created)
/// and the server time the data began, which identifies this lifetime of the node's data as
/// `run_id` does (re-seating compares it across reconnections).
pub const EPOCH_SOURCE: &str = r#"
local now = tonumber(redis.call('TIME')[1])
local born = tonumber(redis.call('GET', KEYS[1]) or '')
if not born then
  redis.call('SET', KEYS[1], now)
  return {0, now}
end
if born > now then return {0, born} end
return {now - born, born}
"#;

/// The key that dates the moment a node became the master it is now (see [`MASTER_SOURCE`]).
pub fn master_key(key_prefix: &str) -> String {
    format!("{key_prefix}ironlock:master")
}

/// Dates the current master's reign on a node that was promoted from a replica (a failover):
/// how many seconds ago (server time) a client first saw it as master with this replication ID.
/// The record is data, so it replicates: a replica promoted later holds its old master's record
/// under a replication ID that is not its own, and dates its own reign from now. A client that
/// never saw the old master thus still learns how long ago the master changed, never too long.
/// KEYS: the master key. ARGV: the node's `master_replid`. Returns the age in whole seconds (0
/// when this call dated it).
pub const MASTER_SOURCE: &str = r#"
local now = tonumber(redis.call('TIME')[1])
local rec = redis.call('GET', KEYS[1])
if rec then
  local sep = string.find(rec, ':', 1, true)
  if sep and string.sub(rec, 1, sep - 1) == ARGV[1] then
    local since = tonumber(string.sub(rec, sep + 1))
    if since then
      if since > now then return 0 end
      return now - since
    end
  end
end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. now)
return 0
"#;

/// The fencing counter key kept next to a lock key (never expires).
pub fn fence_key(key: &str) -> String {
    crate::slot::companion(key, ":ironlock:fence")
}

/// Sets every key with `NX PX ttl`, or none of them.
/// ARGV: token, ttl_ms, fencing (0/1).
/// Returns `{1, max_fence_counter}` when set, `{0, index_of_held_key}` when another token holds one.
/// A key that already holds our own token (a late reply of an earlier round) is taken as ours.
pub const ACQUIRE_SOURCE: &str = r#"
local n = #KEYS
if ARGV[3] == "1" then n = n / 2 end
for i = 1, n do
  local v = redis.call('GET', KEYS[i])
  if v and v ~= ARGV[1] then return {0, i} end
end
for i = 1, n do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
local fence = 0
if ARGV[3] == "1" then
  for i = n + 1, 2 * n do
    local c = tonumber(redis.call('GET', KEYS[i]) or '0') or 0
    if c > fence then fence = c end
  end
end
return {1, fence}
"#;
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_SOURCE));

/// Deletes every key that still holds our token and, for a real release (ARGV\[2\] == "1"),
/// announces it on the key's channel. The rollback of a failed round does not announce: waking
/// every waiter for it would only start another round of split votes.
/// ARGV: token, announce (0/1). Returns how many keys it deleted.
pub const RELEASE_SOURCE: &str = r#"
local deleted = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
    if ARGV[2] == "1" then redis.call('PUBLISH', KEYS[i] .. ':ironlock:release', ARGV[1]) end
    deleted = deleted + 1
  end
end
return deleted
"#;
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_SOURCE));

/// The release of a lock acquired with a minimum hold that has not passed yet: every key that
/// still holds our token is left to expire ARGV\[2\] ms from now (never later than it would
/// have expired anyway), so that nobody takes the lock before the minimum hold is over. Nobody
/// is told of a release on the key's channel: the key is still there.
/// ARGV: token, ms. Returns how many keys it set to expire.
pub const RELEASE_HELD_SOURCE: &str = r#"
local kept = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    local left = redis.call('PTTL', KEYS[i])
    if left < 0 or left > tonumber(ARGV[2]) then
      redis.call('PEXPIRE', KEYS[i], ARGV[2])
    end
    kept = kept + 1
  end
end
return kept
"#;
pub(crate) static RELEASE_HELD: LazyLock<Script> =
    LazyLock::new(|| Script::new(RELEASE_HELD_SOURCE));

/// The Lua function of one lock's extension, shared by [`EXTEND_SOURCE`] and
/// [`EXTEND_BATCH_SOURCE`]: `extend(first, n, token, ttl, reseat)` over `KEYS[first]` ..
/// `KEYS[first + n - 1]`.
macro_rules! extend_lua {
    ($body:expr) => {
        concat!(
            r#"
local function extend(first, n, token, ttl, reseat)
  local last = first + n - 1
  local absent = 0
  for i = first, last do
    local v = redis.call('GET', KEYS[i])
    if not v then
      absent = absent + 1
    elseif v ~= token then
      return 0
    end
  end
  if absent == 0 then
    for i = first, last do
      redis.call('PEXPIRE', KEYS[i], ttl)
    end
    return 1
  end
  if reseat ~= "1" or absent < n then return 0 end
  for i = first, last do
    redis.call('SET', KEYS[i], token, 'NX', 'PX', ttl)
  end
  return 2
end
"#,
            $body
        )
    };
}

/// Sets a new expiry on every key iff every key still holds our token. With ARGV\[3\] == "1" (sent
/// only to a node that restarted since it last held the keys: re-seating) a node on
/// which every key is absent gets them back with `SET NX PX`; a foreign token is never
/// overwritten, and a node holding some keys but not others is not re-seated.
/// ARGV: token, ttl_ms, reseat (0/1). Returns 1 when extended, 2 when re-seated, 0 otherwise.
pub const EXTEND_SOURCE: &str = extend_lua!("return extend(1, #KEYS, ARGV[1], ARGV[2], ARGV[3])\n");
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_SOURCE));

/// The extensions of several locks on one node in one call, each exactly as [`EXTEND_SOURCE`]
/// does it for its own keys (a lock's answer never depends on another's). KEYS: every lock's
/// keys, one lock after the other. ARGV: per lock, four values: its number of keys, token,
/// ttl_ms, reseat (0/1). Returns one reply per lock, in order (1, 2 or 0 as `EXTEND`).
pub const EXTEND_BATCH_SOURCE: &str = extend_lua!(
    r#"local out = {}
local first = 1
for j = 1, #ARGV, 4 do
  local n = tonumber(ARGV[j])
  out[#out + 1] = extend(first, n, ARGV[j + 1], ARGV[j + 2], ARGV[j + 3])
  first = first + n
end
return out
"#
);
pub(crate) static EXTEND_BATCH: LazyLock<Script> =
    LazyLock::new(|| Script::new(EXTEND_BATCH_SOURCE));

/// [`EXTEND_BATCH_SOURCE`] for the common case, in fewer arguments: locks of one key each, all
/// to the same ttl, none re-seated. Each key gets the new expiry iff it holds its token (an
/// absent key is not written back). KEYS: one key per lock. ARGV: ttl_ms, then one token per
/// lock. Returns one reply per lock, in order: 1 extended, 0 not.
pub const EXTEND_SAME_SOURCE: &str = r#"
local ttl = ARGV[1]
local out = {}
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[i + 1] then
    redis.call('PEXPIRE', KEYS[i], ttl)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
"#;
pub(crate) static EXTEND_SAME: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_SAME_SOURCE));

/// Raises every fence counter to F (`counter = max(counter, F)`) iff every lock key still holds
/// our token. ARGV: token, F (decimal). Returns 1 when written, 0 otherwise.
pub const FENCE_SOURCE: &str = r#"
local n = #KEYS / 2
for i = 1, n do
  if redis.call('GET', KEYS[i]) ~= ARGV[1] then return 0 end
end
local f = tonumber(ARGV[2])
for i = n + 1, 2 * n do
  local c = tonumber(redis.call('GET', KEYS[i]) or '0') or 0
  if f > c then redis.call('SET', KEYS[i], ARGV[2]) end
end
return 1
"#;
pub(crate) static FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(FENCE_SOURCE));
