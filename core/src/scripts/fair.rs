//! The scripts of fair (FIFO) waiting: a queue, heartbeats and a ticket counter per lock key.

use std::sync::LazyLock;

use redis::Script;

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
///
/// [`WRITE_ACQUIRE_SOURCE`]: super::WRITE_ACQUIRE_SOURCE
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
///
/// [`READ_RELEASE_SOURCE`]: super::READ_RELEASE_SOURCE
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
///
/// [`limit_key`]: super::limit_key
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
