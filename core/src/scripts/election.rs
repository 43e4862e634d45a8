//! The scripts of leader elections: the leader's record beside the election's lock key.

use std::sync::LazyLock;

use redis::Script;

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
///
/// [`EXTEND_SOURCE`]: super::EXTEND_SOURCE
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
