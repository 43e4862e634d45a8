// `Redlock`, node-redlock 5's API over the core (node-redlock's own suite runs in
// peer-tests.mjs): nodes as ioredis / node-redis clients, options objects and URLs; per-call
// settings (retryCount -1, retryDelay, retryJitter, driftFactor, automaticExtensionThreshold);
// ExecutionError.attempts with ResourceLockedError votes keyed by client; on("error");
// signal.error; durations up to Number.MAX_SAFE_INTEGER; quit().

import { before, after, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { inspect } from 'node:util'
import { once } from 'node:events'
import { setTimeout as sleep } from 'node:timers/promises'

import Redis from 'ioredis'

import Redlock, {
  ExecutionError,
  LockContendedError,
  LockLostError,
  InvalidArgumentError,
  ResourceLockedError,
} from '../lib/index.mjs'
import { startCluster, TEST_SETTINGS, unique } from './harness.mjs'

// Characters that must be percent-encoded in a URL's userinfo. ('%' is left out: the core's
// node_url does not encode it yet; see the README's Node section.)
const PASSWORD = 'p@ss#w/rd:?'

describe('Redlock (node-redlock 5 API)', () => {
  let cluster
  /** Connected ioredis clients of the nodes, for checking keys (db 0). */
  let redis
  before(async () => {
    cluster = await startCluster(3)
    redis = cluster.ports.map((port) => new Redis({ host: '127.0.0.1', port }))
    // An ACL user whose password needs percent-encoding in a URL.
    for (let i = 0; i < 3; i++) {
      await cluster.cmd(i, 'ACL', 'SETUSER', 'alice', 'on', `>${PASSWORD}`, '~*', '&*', '+@all')
    }
  })
  after(async () => {
    await Promise.all(redis.map((c) => c.quit()))
    await cluster?.quit()
  })

  it('takes ioredis clients, ioredis and node-redis options objects and a node-redis client', async () => {
    const [p0, p1, p2] = cluster.ports
    // Never connected by anyone: ironlock only reads its options and opens its own connection.
    const client = new Redis({ host: '127.0.0.1', port: p0, username: 'alice', password: PASSWORD, db: 2, lazyConnect: true })
    const ioredisOptions = { host: '127.0.0.1', port: p1, username: 'alice', password: PASSWORD, db: 2 }
    // node-redis's client shape: `options` with `socket` and `database`, and `sendCommand`.
    const nodeRedisClient = {
      options: { socket: { host: '127.0.0.1', port: p2 }, username: 'alice', password: PASSWORD, database: 2 },
      sendCommand() {},
    }
    const redlock = new Redlock([client, ioredisOptions, nodeRedisClient], TEST_SETTINGS)
    const r = unique('clients')
    try {
      const lock = await redlock.acquire([r], 5_000)
      const db2 = cluster.ports.map((port) => new Redis({ host: '127.0.0.1', port, db: 2 }))
      try {
        assert.deepEqual(await Promise.all(db2.map((c) => c.get(r))), [lock.value, lock.value, lock.value])
        assert.deepEqual(await Promise.all(redis.map((c) => c.get(r))), [null, null, null], 'db 2, not 0')
      } finally {
        await Promise.all(db2.map((c) => c.quit()))
      }
      assert.equal(client.status, 'wait', 'the caller’s client was not used')
      // Votes are keyed by the clients given, as node-redlock keys them; an options object's
      // vote by its password-free URL (the object itself carries the password).
      const [stats] = await Promise.all(lock.attempts)
      const keys = [...stats.votesFor, ...stats.votesAgainst.keys()]
      assert.ok(keys.length >= 2, String(keys))
      for (const k of keys) {
        assert.ok(k === client || k === nodeRedisClient || k === lock.report[1].url, String(k))
      }
      for (const n of lock.report) {
        assert.match(n.url, /^redis:\/\/alice:\*\*\*@127\.0\.0\.1:\d+\/2$/)
        assert.ok(!n.url.includes('p@ss'), n.url)
      }
      await lock.release()
    } finally {
      await redlock.quit()
    }
    // quit() quits the client instances it was given, as node-redlock does.
    if (client.status !== 'end') await once(client, 'end', { signal: AbortSignal.timeout(5_000) })
  })

  it('takes URLs and one comma-separated string; rejects Cluster clients and custom scripts', async () => {
    for (const nodes of [cluster.urls, cluster.urls.join(', ')]) {
      const redlock = new Redlock(nodes, TEST_SETTINGS)
      const lock = await redlock.acquire([unique()], 1_000)
      await lock.release()
      await redlock.quit()
    }
    const cluster7 = { isCluster: true, options: {}, sendCommand() {} }
    assert.throws(() => new Redlock([cluster7]), InvalidArgumentError)
    assert.throws(() => new Redlock(cluster.urls, {}, { acquireScript: 'return 1' }), /scripts/)
  })

  it('failures are ExecutionErrors whose attempts hold ResourceLockedError votes by client; "error" events', async () => {
    const clients = cluster.ports.map((port) => new Redis({ host: '127.0.0.1', port, lazyConnect: true }))
    const redlock = new Redlock(clients, { ...TEST_SETTINGS, retryCount: 2, retryDelay: 10, retryJitter: 0 })
    const events = []
    redlock.on('error', (e) => events.push(e))
    const r = unique('majority')
    await redis[1].set(r, 'other1')
    await redis[2].set(r, 'other2')
    try {
      const e = await redlock.acquire([r], 10_000).catch((x) => x)
      assert.ok(e instanceof ExecutionError && e instanceof LockContendedError, String(e))
      assert.equal(e.attempts.length, 3, 'one per round: retryCount 2 → 3 rounds')
      const settled = await Promise.allSettled(e.attempts)
      assert.ok(settled.every((x) => x.status === 'fulfilled'))
      const last = settled[2].value
      assert.deepEqual([last.membershipSize, last.quorumSize], [3, 2])
      assert.ok(last.votesAgainst.get(clients[1]) instanceof ResourceLockedError)
      assert.ok(last.votesAgainst.get(clients[2]) instanceof ResourceLockedError)
      assert.equal(
        last.votesAgainst.get(clients[1]).message,
        'The operation was applied to: 0 of the 1 requested resources.',
      )
      // The core keeps the votes of the last round only: earlier rounds have sizes, no votes.
      for (const x of settled.slice(0, 2)) {
        assert.deepEqual([x.value.membershipSize, x.value.votesFor.size, x.value.votesAgainst.size], [3, 0, 0])
      }
      assert.equal(await redis[0].get(r), null, 'the rollback deleted the key of the only node that granted')
      await sleep(10)
      assert.ok(events.filter((x) => x instanceof ResourceLockedError).length >= 2, String(events))
      // Inspecting the error shows neither the clients nor the attempts.
      assert.ok(!inspect(e, { depth: 10 }).includes('Redis {'), inspect(e))
    } finally {
      await redis[1].del(r)
      await redis[2].del(r)
      await redlock.close()
    }
  })

  it('per-call settings: retryCount -1, retryDelay, retryJitter, driftFactor, automaticExtensionThreshold', async () => {
    const redlock = new Redlock(cluster.urls, { ...TEST_SETTINGS, retryCount: 3, retryDelay: 1_000, retryJitter: 0 })
    try {
      const r = [unique('per-call')]
      const holder = await redlock.acquire(r, 10_000)
      // retryDelay and retryJitter for this call: 4 rounds 10 ms apart instead of 1 s apart.
      let t = Date.now()
      const e = await redlock.acquire(r, 10_000, { retryDelay: 10, retryJitter: 0 }).catch((x) => x)
      assert.ok(e instanceof LockContendedError, String(e))
      assert.equal(e.rounds, 4)
      assert.ok(Date.now() - t < 900, `${Date.now() - t} ms`)
      // retryCount -1: retry until acquired (the holder lets go after 600 ms; the manager's
      // retryCount of 3 at 10 ms would have given up long before).
      setTimeout(() => holder.release(), 600)
      t = Date.now()
      const lock = await redlock.acquire(r, 10_000, { retryCount: -1, retryDelay: 10, retryJitter: 0 })
      assert.ok(Date.now() - t >= 500, `${Date.now() - t} ms`)
      assert.ok(lock.rounds > 4, `${lock.rounds} rounds`)
      await lock.release()
      // driftFactor: validity = ttl - elapsed - ttl × 0.4 - 2 ms.
      const drifty = await redlock.acquire([unique()], 10_000, { driftFactor: 0.4 })
      assert.ok(drifty.validityMs <= 6_000 && drifty.validityMs > 5_000, `${drifty.validityMs}`)
      await drifty.release()
      // automaticExtensionThreshold: extend once less than 1 s of a 2 s lock is left (the
      // Redlock default, 500 ms, would not have extended yet after 1.25 s).
      const x = unique()
      const pttl = await redlock.using([x], 2_000, { automaticExtensionThreshold: 1_000 }, async (signal) => {
        await sleep(1_250)
        assert.equal(signal.aborted, false)
        assert.equal(signal.error, undefined)
        return redis[0].pttl(x)
      })
      assert.ok(pttl > 1_400, `PTTL ${pttl} after 1.25 s: extended at 1 s`)
      // Each combination of those settings runs on a manager of its own: at most 16.
      const many = Array.from({ length: 17 }, (_, i) =>
        redlock.acquire([unique()], 1_000, { retryDelay: 100 + i }).then((l) => l.release()),
      )
      const settled = await Promise.allSettled(many)
      const rejected = settled.filter((s) => s.status === 'rejected')
      assert.ok(rejected.length >= 1 && rejected.every((s) => s.reason instanceof InvalidArgumentError), String(rejected.map((s) => s.reason)))
      await assert.rejects(redlock.acquire([unique()], 1_000, { retryCount: -2 }), InvalidArgumentError)
      await assert.rejects(redlock.acquire([unique()], 1_000, { retryDelay: 'x' }), /options\.retryDelay/)
      await assert.rejects(redlock.acquire([unique()], 1_000, { nope: 1 }), /options\.nope/)
    } finally {
      await redlock.quit()
    }
  })

  it('lock.value, resources, expiration, attempts; extend resolves to the lock; release has attempts', async () => {
    const redlock = new Redlock(cluster.urls, TEST_SETTINGS)
    try {
      const r = [unique('a'), unique('b')]
      const before = Date.now()
      let lock = await redlock.acquire(r, 5_000)
      assert.deepEqual(lock.resources, r)
      assert.equal(lock.redlock, redlock)
      assert.match(lock.value, /^[0-9a-f]{40}$/)
      assert.ok(lock.expiration > before + 4_500 && lock.expiration <= Date.now() + 5_000, `${lock.expiration}`)
      assert.equal(lock.attempts.length, 1)
      assert.ok((await lock.attempts[0]).votesFor.size >= 2)
      const extended = await lock.extend(8_000)
      assert.equal(extended, lock)
      lock = await redlock.extend(lock, 9_000)
      assert.ok((await redis[0].pttl(r[1])) > 8_000)
      const released = await lock.release()
      assert.equal(released.held, true)
      assert.equal(released.attempts.length, 1)
      assert.ok((await released.attempts[0]).votesFor.size >= 2)
      assert.equal((await redlock.release(lock)).held, false)
    } finally {
      await redlock.quit()
    }
  })

  it('using: signal.error is undefined while held and the LockLostError once lost', async () => {
    const redlock = new Redlock(cluster.urls, TEST_SETTINGS)
    try {
      const r = unique('lost')
      let seen
      const e = await redlock
        .using([r], 600, async (signal) => {
          assert.equal(signal.error, undefined)
          await Promise.all(redis.map((c) => c.del(r)))
          await new Promise((resolve) => signal.addEventListener('abort', resolve))
          seen = signal
        })
        .catch((x) => x)
      assert.equal(seen.aborted, true)
      assert.ok(seen.error instanceof LockLostError && seen.error === seen.reason, String(seen.error))
      assert.ok(e instanceof LockLostError && e instanceof ExecutionError, String(e))
    } finally {
      await redlock.quit()
    }
  })

  it('durations up to Number.MAX_SAFE_INTEGER ms when maxTtl allows them', async () => {
    const duration = Math.floor(Number.MAX_SAFE_INTEGER / 10)
    const strict = new Redlock(cluster.urls, TEST_SETTINGS)
    await assert.rejects(strict.acquire([unique()], duration), /durationMs: must be at most maxTtl \(60000 ms\)/)
    await strict.quit()
    const redlock = new Redlock(cluster.urls, { ...TEST_SETTINGS, maxTtl: Number.MAX_SAFE_INTEGER })
    try {
      const r = unique('huge')
      const lock = await redlock.acquire([r], duration)
      assert.equal(Math.floor((await redis[0].pttl(r)) / 200), Math.floor(duration / 200))
      assert.ok(lock.expiration > Date.now() + 0.98 * duration, `${lock.expiration}`)
      await lock.extend(3 * duration)
      assert.equal(Math.floor((await redis[0].pttl(r)) / 200), Math.floor((3 * duration) / 200))
      await assert.rejects(lock.extend(duration + 0.5), /integer/)
      await assert.rejects(lock.extend(Number.MAX_SAFE_INTEGER + 2), /maxTtl/)
      assert.equal((await lock.release()).held, true)
    } finally {
      await redlock.quit()
    }
  })
})
