//! The Lua scripts. Each runs atomically on one node; every language uses these same scripts, so
//! keys, values and channels are identical whoever took the lock.
//!
//! KEYS layout for the lock scripts: the n lock keys, then (acquire and fence only) their n
//! fence counter keys; each semaphore and fair script says its own. ARGV\[1\] is always the
//! token.

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

/// The key of a semaphore on one node: a sorted set of holders, each a permit's token
/// scored with its expiry in the node's own clock (ms). Kept apart from a lock on the same name
/// (a different key, under the key prefix so that ACL key patterns cover it).
pub fn semaphore_key(key: &str) -> String {
    crate::slot::companion(key, ":ironlock:semaphore")
}

/// The limit a semaphore is in use with on one node: a string holding the limit, kept next to
/// the semaphore key (derived from it as the fence counter key is, so it stays in the key's slot)
/// and living as long as that key. It counts only while the node has holders: a request with
/// another limit is refused while permits are held, and takes the limit over once none is.
pub fn limit_key(semaphore_key: &str) -> String {
    crate::slot::companion(semaphore_key, ":ironlock:limit")
}

/// Admits the token to the semaphore when fewer than `limit` unexpired holders remain (a token
/// already holding, from a late reply of an earlier round, is renewed), and records the limit
/// ([`limit_key`]). A node whose holders are in use with another limit refuses.
/// KEYS: the semaphore key, its limit key and, with fencing, its fence counter key.
/// ARGV: token, ttl_ms, fencing (0/1), limit. Returns `{1, fence_counter}` when admitted, `{0, 0}`
/// when full, `{-1, recorded_limit}` when the holders are in use with another limit.
pub const SEM_ACQUIRE_SOURCE: &str = concat_lua!(
    r#"
local ttl = tonumber(ARGV[2])
local limit = tonumber(ARGV[4])
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  local held = redis.call('ZCARD', KEYS[1])
  local rec = recorded(KEYS[2])
  if held > 0 and rec and rec ~= limit then return {-1, rec} end
  if held >= limit then return {0, 0} end
end
hold(ttl)
record(KEYS[2], ARGV[4], KEYS[1])
local fence = 0
if ARGV[3] == "1" then fence = tonumber(redis.call('GET', KEYS[3]) or '0') or 0 end
return {1, fence}
"#
);
pub(crate) static SEM_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(SEM_ACQUIRE_SOURCE));

/// Removes the token from the semaphore and, for a real release (ARGV\[2\] == "1"), announces it
/// on the key's channel; the limit record goes with the last holder. KEYS: the semaphore key, its
/// limit key. ARGV: token, announce (0/1). Returns 1 when it held, else 0.
pub const SEM_RELEASE_SOURCE: &str = concat!(
    limit_lua!(),
    r#"
local n = redis.call('ZREM', KEYS[1], ARGV[1])
if n > 0 and ARGV[2] == "1" then redis.call('PUBLISH', KEYS[1] .. ':ironlock:release', ARGV[1]) end
if redis.call('EXISTS', KEYS[1]) == 0 and recorded(KEYS[2]) then redis.call('DEL', KEYS[2]) end
return n
"#
);
pub(crate) static SEM_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(SEM_RELEASE_SOURCE));

/// Renews the token's permit iff it still holds one. With ARGV\[3\] == "1" (a node that restarted
/// since it last admitted the token: re-seating) an absent token is admitted again when
/// fewer than `limit` holders remain and none is in use with another limit. The limit record
/// ([`limit_key`]) lives on with the permit. KEYS: the semaphore key, its limit key.
/// ARGV: token, ttl_ms, reseat (0/1), limit. Returns 1 when extended, 2 when re-seated, 0
/// otherwise.
pub const SEM_EXTEND_SOURCE: &str = concat_lua!(
    r#"
local ttl = tonumber(ARGV[2])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  hold(ttl)
  record(KEYS[2], ARGV[4], KEYS[1])
  return 1
end
if ARGV[3] ~= "1" then return 0 end
local held = redis.call('ZCARD', KEYS[1])
local rec = recorded(KEYS[2])
if held >= tonumber(ARGV[4]) or (held > 0 and rec and rec ~= tonumber(ARGV[4])) then return 0 end
hold(ttl)
record(KEYS[2], ARGV[4], KEYS[1])
return 2
"#
);
pub(crate) static SEM_EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(SEM_EXTEND_SOURCE));

/// Raises the fence counter to F iff the token holds a permit. KEYS: the semaphore key, its fence
/// counter key. ARGV: token, F (decimal). Returns 1 when written, 0 otherwise.
pub const SEM_FENCE_SOURCE: &str = r#"
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
local f = tonumber(ARGV[2])
local c = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if f > c then redis.call('SET', KEYS[2], ARGV[2]) end
return 1
"#;
pub(crate) static SEM_FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(SEM_FENCE_SOURCE));

/// The value a read-write lock's key holds while readers hold it: never a token (tokens hold no
/// space), so a plain lock or a writer of the same name finds the key held and is refused, and
/// releasing by token can never delete it.
pub const READERS_VALUE: &str = "ironlock readers";

/// The readers of a read-write lock on one node: a sorted set of their tokens scored with each
/// read's expiry in the node's own clock (ms), beside the lock key (in its slot). While it has
/// a live reader the lock key holds [`READERS_VALUE`] and expires with the last reader.
pub fn readers_key(key: &str) -> String {
    crate::slot::companion(key, ":ironlock:readers")
}

/// A waiting writer's mark on one node: its token, for a queue timeout after its last round. New
/// readers are refused while a mark is there (a waiting writer holds back new readers, so
/// writers never starve); the writer takes it away when granted, when it releases and when it
/// gives up.
pub fn writer_mark_key(key: &str) -> String {
    crate::slot::companion(key, ":ironlock:writer")
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

/// Admits the token as a reader when no writer (or plain lock) holds the key and no writer waits
/// (a token already reading, from a late reply of an earlier round, is renewed even then).
/// KEYS: the lock key, its readers key, its writer mark key and, with fencing, its fence counter
/// key. ARGV: token, ttl_ms, fencing (0/1). Returns `{1, fence_counter}` when admitted, `{0, 1}`
/// when a writer holds the key, `{0, 2}` when a writer waits.
pub const READ_ACQUIRE_SOURCE: &str = read_lua!(
    r#"
local v = redis.call('GET', KEYS[1])
if v and v ~= READERS then return {0, 1} end
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) and redis.call('EXISTS', KEYS[3]) == 1 then
  return {0, 2}
end
hold(KEYS[1], KEYS[2], tonumber(ARGV[2]))
local fence = 0
if ARGV[3] == "1" then fence = tonumber(redis.call('GET', KEYS[4]) or '0') or 0 end
return {1, fence}
"#
);
pub(crate) static READ_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(READ_ACQUIRE_SOURCE));

/// Removes the token from the readers; the lock key then expires with the last reader left, or
/// goes with the last one. A real release (ARGV\[2\] == "1") announces itself on the lock key's
/// channel. KEYS: the lock key, its readers key. ARGV: token, announce (0/1). Returns 1 when
/// the token was reading, else 0.
pub const READ_RELEASE_SOURCE: &str = read_lua!(
    r#"
local n = unread(KEYS[1], KEYS[2])
if n > 0 and ARGV[2] == "1" then redis.call('PUBLISH', KEYS[1] .. ':ironlock:release', ARGV[1]) end
return n
"#
);
pub(crate) static READ_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(READ_RELEASE_SOURCE));

/// Renews the token's read iff it still reads and no writer holds the key. With ARGV\[3\] == "1"
/// (a node that restarted since it last admitted the token: re-seating) an absent token is
/// admitted again when no writer holds the key (a waiting writer's mark does not stop it: the
/// read was granted before). KEYS: the lock key, its readers key. ARGV: token, ttl_ms, reseat
/// (0/1). Returns 1 when extended, 2 when re-seated, 0 otherwise.
pub const READ_EXTEND_SOURCE: &str = read_lua!(
    r#"
local v = redis.call('GET', KEYS[1])
if v and v ~= READERS then return 0 end
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  hold(KEYS[1], KEYS[2], tonumber(ARGV[2]))
  return 1
end
if ARGV[3] ~= "1" then return 0 end
hold(KEYS[1], KEYS[2], tonumber(ARGV[2]))
return 2
"#
);
pub(crate) static READ_EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(READ_EXTEND_SOURCE));

/// Sets the lock key to the writer's token when nothing holds it — no reader, no writer, no plain
/// lock (a key holding our own token, a late reply of an earlier round, is taken as ours).
/// Granted or refused, the writer leaves (or renews) its mark there, unless another writer's
/// mark is: should a round that set the key fail, its rollback leaves the node still held back
/// for the writer (taking the mark away at the grant, or not renewing it, let a new reader take
/// that node first, round after round, while a node was quarantined: found by the protocol
/// model). The writer's release, or giving up, takes the mark away; it expires a queue timeout
/// after the writer's last round anyway. KEYS: the lock key, its writer mark key and, with fencing,
/// its fence counter key. ARGV: token, ttl_ms, fencing (0/1), mark_ms. Returns
/// `{1, fence_counter}` when set, `{0, 1}` when a writer or plain lock holds the key, `{0, 2}`
/// when readers do.
pub const WRITE_ACQUIRE_SOURCE: &str = r#"
local v = redis.call('GET', KEYS[1])
local m = redis.call('GET', KEYS[2])
if not m or m == ARGV[1] then redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[4]) end
if v and v ~= ARGV[1] then
  if v == 'ironlock readers' then return {0, 2} end
  return {0, 1}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local fence = 0
if ARGV[3] == "1" then fence = tonumber(redis.call('GET', KEYS[3]) or '0') or 0 end
return {1, fence}
"#;
pub(crate) static WRITE_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(WRITE_ACQUIRE_SOURCE));

/// Deletes the lock key if it holds the writer's token. A real release or a writer that gives up
/// (ARGV\[2\] == "1") also takes away its mark and announces on the lock key's channel when it
/// deleted either (readers held back by the mark may go); the rollback of a failed round
/// (ARGV\[2\] == "0") keeps the mark: the writer still waits. KEYS: the lock key, its writer mark
/// key. ARGV: token, release (0/1). Returns 1 when the key held the token, else 0.
pub const WRITE_RELEASE_SOURCE: &str = r#"
local n = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  n = 1
end
if ARGV[2] == "1" then
  local marked = redis.call('GET', KEYS[2]) == ARGV[1]
  if marked then redis.call('DEL', KEYS[2]) end
  if n > 0 or marked then redis.call('PUBLISH', KEYS[1] .. ':ironlock:release', ARGV[1]) end
end
return n
"#;
pub(crate) static WRITE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(WRITE_RELEASE_SOURCE));

/// The leader record of an election on one node: a hash of the leader's `token`, its `term`
/// (the fencing token of its grant), its advertised `value` and that value's `version` (how many
/// times it proclaimed a new one). It lives as long as the leader's key, and counts only while
/// the election's key holds the same token.
pub fn leader_key(key: &str) -> String {
    crate::slot::companion(key, ":ironlock:leader")
}

/// The channel on which a grant and each proclaim of an election announce themselves (a release
/// uses the lock key's release channel): observers wake at once rather than at their next poll.
pub fn leader_channel(key: &str) -> String {
    format!("{key}:ironlock:leader")
}

/// The fence write-back of a leader's grant, which also writes its record ([`leader_key`]):
/// iff the election's key still holds the token, the fence counter is raised to F and the
/// record set to (token, term F, value, version 0), living as long as the key; announced on
/// the leader channel. KEYS: the election's key, its fence counter key, its leader key. ARGV:
/// token, F (decimal), value. Returns 1 when written, 0 otherwise.
pub const LEADER_FENCE_SOURCE: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local c = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if tonumber(ARGV[2]) > c then redis.call('SET', KEYS[2], ARGV[2]) end
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[3], 'token', ARGV[1], 'term', ARGV[2], 'value', ARGV[3], 'version', '0')
redis.call('PEXPIRE', KEYS[3], math.max(redis.call('PTTL', KEYS[1]), 1))
redis.call('PUBLISH', KEYS[1] .. ':ironlock:leader', ARGV[2])
return 1
"#;
pub(crate) static LEADER_FENCE: LazyLock<Script> =
    LazyLock::new(|| Script::new(LEADER_FENCE_SOURCE));

/// A leader's new value: iff the election's key still holds the token, the record takes the
/// value and its version (written afresh, with the term, where a restarted node lost it);
/// announced on the leader channel. KEYS: the election's key, its leader key. ARGV: token,
/// value, version, term. Returns 1 when written, 0 when the token no longer leads there.
pub const PROCLAIM_SOURCE: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[2], 'token') ~= ARGV[1] then
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[2], 'token', ARGV[1], 'term', ARGV[4])
end
redis.call('HSET', KEYS[2], 'value', ARGV[2], 'version', ARGV[3])
redis.call('PEXPIRE', KEYS[2], math.max(redis.call('PTTL', KEYS[1]), 1))
redis.call('PUBLISH', KEYS[1] .. ':ironlock:leader', ARGV[4])
return 1
"#;
pub(crate) static PROCLAIM: LazyLock<Script> = LazyLock::new(|| Script::new(PROCLAIM_SOURCE));

/// A leader's extension: the election's key as [`EXTEND_SOURCE`] does for one key (re-seated
/// with `SET NX` on a restarted node when ARGV\[3\] == "1"), and the leader record with it.
/// KEYS: the election's key, its leader key. ARGV: token, ttl_ms, reseat (0/1). Returns 1 when
/// extended, 2 when re-seated, 0 otherwise.
pub const LEADER_EXTEND_SOURCE: &str = r#"
local v = redis.call('GET', KEYS[1])
local r = 0
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  r = 1
elseif not v and ARGV[3] == "1" then
  redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
  r = 2
else
  return 0
end
if redis.call('HGET', KEYS[2], 'token') == ARGV[1] then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
return r
"#;
pub(crate) static LEADER_EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(LEADER_EXTEND_SOURCE));

/// A leader's resignation (or the rollback of a round): deletes the election's key if it holds
/// the token (announced on its release channel when ARGV\[2\] == "1") and the leader record if
/// it is the token's. KEYS: the election's key, its leader key. ARGV: token, announce (0/1).
/// Returns 1 when the key held the token, else 0.
pub const LEADER_RELEASE_SOURCE: &str = r#"
local n = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  n = 1
  if ARGV[2] == "1" then redis.call('PUBLISH', KEYS[1] .. ':ironlock:release', ARGV[1]) end
end
if redis.call('HGET', KEYS[2], 'token') == ARGV[1] then redis.call('DEL', KEYS[2]) end
return n
"#;
pub(crate) static LEADER_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(LEADER_RELEASE_SOURCE));

/// The queue of fair waiters for one lock key: a sorted set of tokens scored by their
/// ticket; the lowest live ticket is the head.
pub fn queue_key(key: &str) -> String {
    crate::slot::companion(key, ":ironlock:queue")
}

/// The heartbeats of a queue: each waiting token scored by the node time (ms) after which its
/// entry counts as dead (its waiter went silent: crashed, paused or gone).
pub fn beats_key(key: &str) -> String {
    crate::slot::companion(key, ":ironlock:beats")
}

/// The ticket counter of a lock key: the largest ticket handed out while its queue lived.
pub fn ticket_key(key: &str) -> String {
    crate::slot::companion(key, ":ironlock:ticket")
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

/// A reader's entry in a lock key's fair queue: its token and `" r"` (tokens hold no space, so
/// no token is ever one). Writers and plain locks queue by their token: the line tells who
/// shares, and the queue's sweep drops a silent reader's entry as any other.
pub fn reader_entry(token: &str) -> String {
    format!("{token} r")
}

/// A fair acquire on one node: sets every lock key with `PX ttl` only when every key
/// is free (or ours) AND no live waiter other than the token heads a queue; a grant leaves the
/// queues. A request that must wait registers (or refreshes) the token in each key's queue with
/// its ticket and a heartbeat (and is granted after all when joining made it the head of free
/// keys); one granted at once never joins, so the commonest grant, the woken head's, costs no
/// queue writes but its own removal.
/// ARGV: token, ttl_ms, queue timeout (ms), n, fencing (0/1), ticket (0: take the next one
/// here: above this node's counter and at least ARGV\[7\]), the client's clock in µs and, for
/// the writer of a read-write lock (n = 1), mark_ms: granted or refused, the writer leaves or
/// renews its mark as [`WRITE_ACQUIRE_SOURCE`] does (the last key is its writer mark key).
/// Returns `{1, max_fence_counter, ticket}` when set (ticket 0 when granted before it took one);
/// `{0, 0, ticket}` when another token holds
/// a key and the token heads every queue (it is next); `{0, 2, ticket}` when another token holds
/// a key and earlier tickets wait too; `{0, 1, ticket}` when the keys are free but an earlier
/// ticket is waiting.
pub const FAIR_ACQUIRE_SOURCE: &str = fair_lua!(
    r#"
if ARGV[8] then
  local m = redis.call('GET', KEYS[#KEYS])
  if not m or m == ARGV[1] then redis.call('SET', KEYS[#KEYS], ARGV[1], 'PX', ARGV[8]) end
end
for i = 1, n do sweep(i) end
local function heads()
  for i = 1, n do
    local first = redis.call('ZRANGE', KEYS[n + i], 0, 0)[1]
    if first and first ~= ARGV[1] then return false end
  end
  return true
end
local held = false
for i = 1, n do
  local v = redis.call('GET', KEYS[i])
  if v and v ~= ARGV[1] then held = true; break end
end
local ticket = tonumber(ARGV[6])
if held or not heads() then
  if ticket == 0 then ticket = fresh_ticket() end
  for i = 1, n do join(i, ticket) end
  local head = heads()
  if held then
    if head then return {0, 0, ticket} end
    return {0, 2, ticket}
  end
  if not head then return {0, 1, ticket} end
end
local fence = 0
for i = 1, n do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  redis.call('ZREM', KEYS[n + i], ARGV[1])
  redis.call('ZREM', KEYS[2 * n + i], ARGV[1])
  if ARGV[5] == "1" then
    local c = tonumber(redis.call('GET', KEYS[4 * n + i]) or '0') or 0
    if c > fence then fence = c end
  end
end
return {1, fence, ticket}
"#
);
pub(crate) static FAIR_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(FAIR_ACQUIRE_SOURCE));

/// What a fair waiter does to its queue entries between and after rounds.
/// ARGV: token, mode, queue timeout (ms), n, ticket, kind: `lock`; `permit` (KEYS\[1\] is a
/// semaphore); `read` (n = 1, the last key is the readers key, the entries are
/// [`reader_entry`]); `write` (n = 1, the last key is the writer mark key). Modes:
/// - `requeue` (the rollback of a failed round): takes the token off the lock keys (out of the
///   semaphore; out of the readers, the lock key then living as long as the last reader left, as
///   [`READ_RELEASE_SOURCE`] leaves it), without announcing it, and keeps it in line with its
///   ticket and a fresh heartbeat (a writer keeps its mark: it still waits);
/// - `leave` (a waiter that gives up or is cancelled): takes the token off as `requeue` does and
///   out of the queues; when it headed a queue, announces on that key's release channel so that
///   the next waiter tries at once; a writer also takes its mark away, announcing that too
///   (readers held back by it may go);
/// - `dequeue` (after a grant, on the nodes that did not grant): removes the queue entries only.
///
/// Returns how many queue entries it removed or wrote.
pub const FAIR_LEAVE_SOURCE: &str = fair_lua!(concat!(
    readers_lua!(),
    r#"
local mode = ARGV[2]
local kind = ARGV[6]
local ticket = tonumber(ARGV[5])
local changed = 0
local announced = false
if kind == "read" then me = ARGV[1] .. ' r' end
for i = 1, n do
  local q, b = KEYS[n + i], KEYS[2 * n + i]
  if mode ~= "dequeue" then
    if kind == "permit" then
      redis.call('ZREM', KEYS[i], ARGV[1])
    elseif kind == "read" then
      unread(KEYS[i], KEYS[#KEYS])
    elseif redis.call('GET', KEYS[i]) == ARGV[1] then
      redis.call('DEL', KEYS[i])
    end
  end
  sweep(i)
  if mode == "requeue" and ticket > 0 then
    join(i, ticket)
    changed = changed + 1
  else
    local head = redis.call('ZRANGE', q, 0, 0)[1] == me
    changed = changed + redis.call('ZREM', q, me)
    redis.call('ZREM', b, me)
    if mode == "leave" and head then
      redis.call('PUBLISH', KEYS[i] .. ':ironlock:release', ARGV[1])
      announced = true
    end
  end
end
if mode == "leave" and kind == "write" and redis.call('GET', KEYS[#KEYS]) == ARGV[1] then
  redis.call('DEL', KEYS[#KEYS])
  if not announced then redis.call('PUBLISH', KEYS[1] .. ':ironlock:release', ARGV[1]) end
end
return changed
"#
));
pub(crate) static FAIR_LEAVE: LazyLock<Script> = LazyLock::new(|| Script::new(FAIR_LEAVE_SOURCE));

/// A fair acquire of a semaphore permit on one node: registers (or refreshes) the
/// token in the queue with its ticket, then admits it when, after dropping expired holders, the
/// holders and the live waiters ahead of it together number fewer than `limit`; an admission
/// leaves the queue and records the limit ([`limit_key`]). A request whose limit differs from the
/// one the holders are in use with is refused before it joins. KEYS: the semaphore key, its
/// queue, heartbeat and ticket keys (then, with fencing, its fence counter key), and last its
/// limit key. ARGV: token, ttl_ms, queue timeout (ms), 1, fencing (0/1), ticket (0: take one
/// here), the client's clock in µs, limit. Returns as [`FAIR_ACQUIRE_SOURCE`] does, or
/// `{-1, recorded_limit, 0}` when the holders are in use with another limit.
pub const SEM_FAIR_ACQUIRE_SOURCE: &str = fair_lua!(concat!(
    limit_lua!(),
    r#"
local lk = KEYS[#KEYS]
local limit = tonumber(ARGV[8])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  local rec = recorded(lk)
  if rec and rec ~= limit and redis.call('ZCARD', KEYS[1]) > 0 then return {-1, rec, 0} end
end
local ticket = tonumber(ARGV[6])
if ticket == 0 then ticket = fresh_ticket() end
sweep(1)
join(1, ticket)
local ttl = tonumber(ARGV[2])
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  local held = redis.call('ZCARD', KEYS[1])
  local ahead = redis.call('ZRANK', KEYS[2], ARGV[1])
  if held >= limit then
    if ahead == 0 then return {0, 0, ticket} end
    return {0, 2, ticket}
  end
  if held + ahead >= limit then return {0, 1, ticket} end
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
record(lk, ARGV[8], KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
local fence = 0
if ARGV[5] == "1" then fence = tonumber(redis.call('GET', KEYS[5]) or '0') or 0 end
return {1, fence, ticket}
"#
));
pub(crate) static SEM_FAIR_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(SEM_FAIR_ACQUIRE_SOURCE));
