//! The scripts of semaphores (permits): a sorted set of holders per node and its limit record.

use std::sync::LazyLock;

use redis::Script;

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
