//! The scripts of read-write locks: readers in a sorted set beside the lock key, writers as
//! plain locks that leave a mark holding new readers back.

use std::sync::LazyLock;

use redis::Script;

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
