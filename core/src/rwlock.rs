//! Read-write locks: the acquire of either side, and the fair reader's script. A fair reader or
//! writer waits in the lock key's one fair queue, beside fair plain locks of the same name, and
//! runs the round loop of every acquire; only its scripts differ. A fair writer is a fair lock
//! of the lock key that also leaves its mark (`FAIR_ACQUIRE` with mark_ms); a fair reader is
//! [`FAIR_READ_ACQUIRE_SOURCE`]; both leave the line with `FAIR_LEAVE`.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Script;

use crate::acquire::{AcquireOptions, acquire_kind};
use crate::cluster::Cluster;
use crate::config::validate_resource;
use crate::error::Result;
use crate::lock::{Access, Kind, Lock};
use crate::scripts::{fair_lua, readers_lua};

/// Acquires the read (shared) or write (exclusive) side of the read-write lock `resource`;
/// `fair` (the option, else the manager's setting) makes it wait in the lock key's fair queue.
pub(crate) async fn acquire_rw(
    cluster: &Arc<Cluster>,
    resource: &str,
    access: Access,
    ttl: Duration,
    options: AcquireOptions,
) -> Result<Lock> {
    validate_resource(resource)?;
    let kind = match access {
        Access::Read => Kind::Read,
        Access::Write => Kind::Write,
    };
    acquire_kind(cluster, &[resource], kind, ttl, options, None).await
}

/// A fair reader's acquire on one node: admits the token as a reader (the lock key holding
/// [`READERS_VALUE`](crate::scripts::READERS_VALUE), living at least as long as the read) when
/// no writer or plain lock holds the key, no live entry ahead of it in the line is a writer's or
/// a plain lock's, and no writer's mark holds readers back — unless that writer waits behind this
/// reader in the line (the line orders them; any other mark refuses as it refuses a reader that
/// does not wait in line, except a token already reading: a late reply of an earlier round).
/// Readers in a row at the head of the line are admitted together, and a newcomer is admitted at
/// once (without joining) when nothing exclusive waits; otherwise it joins the line as
/// [`reader_entry`](crate::scripts::reader_entry) with its ticket and a heartbeat. An admission
/// leaves the line. Exclusion is as in [`READ_ACQUIRE_SOURCE`](crate::scripts::READ_ACQUIRE_SOURCE):
/// the line and the marks only ever add refusals.
/// KEYS: the lock key, its queue, heartbeat and ticket keys, (with fencing) its fence counter
/// key, its readers key, its writer mark key. ARGV: those of
/// [`FAIR_ACQUIRE_SOURCE`](crate::scripts::FAIR_ACQUIRE_SOURCE), n = 1. Returns as that script does: `{1, fence,
/// ticket}` when admitted; `{0, 0, ticket}` when a writer or plain lock holds the key and nothing
/// exclusive waits ahead (the reader is next), `{0, 2, ticket}` when something does too,
/// `{0, 1, ticket}` when the key is free of writers but something exclusive waits ahead (or a
/// writer's mark holds readers back).
pub const FAIR_READ_ACQUIRE_SOURCE: &str = fair_lua!(concat!(
    readers_lua!(),
    r#"
me = ARGV[1] .. ' r'
local q, rk, mk = KEYS[2], KEYS[#KEYS - 1], KEYS[#KEYS]
sweep(1)
redis.call('ZREMRANGEBYSCORE', rk, '-inf', now)
local v = redis.call('GET', KEYS[1])
local held = v and v ~= READERS
local reading = redis.call('ZSCORE', rk, ARGV[1])
local function held_back()
  local rank = redis.call('ZRANK', q, me)
  local ahead = {}
  if not rank then
    ahead = redis.call('ZRANGE', q, 0, -1)
  elseif rank > 0 then
    ahead = redis.call('ZRANGE', q, 0, rank - 1)
  end
  for j = 1, #ahead do
    if string.sub(ahead[j], -2) ~= ' r' then return true end
  end
  if reading then return false end
  local m = redis.call('GET', mk)
  if not m then return false end
  local behind = redis.call('ZRANK', q, m)
  return not (rank and behind and behind > rank)
end
local ticket = tonumber(ARGV[6])
if held or held_back() then
  if ticket == 0 then ticket = fresh_ticket() end
  join(1, ticket)
  local back = held_back()
  if held then
    if back then return {0, 2, ticket} end
    return {0, 0, ticket}
  end
  if back then return {0, 1, ticket} end
end
hold(KEYS[1], rk, tonumber(ARGV[2]))
redis.call('ZREM', q, me)
redis.call('ZREM', KEYS[3], me)
local fence = 0
if ARGV[5] == "1" then fence = tonumber(redis.call('GET', KEYS[5]) or '0') or 0 end
return {1, fence, ticket}
"#
));
pub(crate) static FAIR_READ_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(FAIR_READ_ACQUIRE_SOURCE));
