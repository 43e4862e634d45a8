// The Node API against real redis-server nodes: properties, errors, concurrency, event-loop
// liveness, `using` with auto-extension and the lost-lock AbortSignal, AbortSignal cancellation
// of acquire, node-redlock names, close().

import { before, after, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { inspect } from 'node:util'
import net from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'

import ironlock, {
  LockManager,
  Redlock,
  Lock,
  IronlockError,
  ResourceLockedError,
  ExecutionError,
  LockContendedError,
  QuorumUnavailableError,
  LockLostError,
  ConnectionError,
} from '../lib/index.mjs'
import { startCluster, TEST_SETTINGS, unique } from './harness.mjs'

const require = (await import('node:module')).createRequire(import.meta.url)
const native = require('../index.js')
const { fromNative, InternalError } = require('../lib/errors.js')

/** Polls `check` every 20 ms for up to `ms`; returns its last value. */
async function eventually(check, ms = 2000) {
  const end = Date.now() + ms
  let v = await check()
  while (!v && Date.now() < end) {
    await sleep(20)
    v = await check()
  }
  return v
}

async function onAll(cluster, ...args) {
  return Promise.all(cluster.urls.map((_, i) => cluster.cmd(i, ...args)))
}

// A release returns once a quorum deleted the keys; the other deletes finish in the background.
// Polls every node for up to 200 ms until `key` is gone everywhere; returns the last EXISTS replies.
async function goneOnAll(cluster, key) {
  let got = await onAll(cluster, 'EXISTS', key)
  for (let i = 0; i < 40 && got.some((x) => x !== 0); i++) {
    await new Promise((resolve) => setTimeout(resolve, 5))
    got = await onAll(cluster, 'EXISTS', key)
  }
  return got
}

describe('three nodes', () => {
  let cluster
  let manager
  before(async () => {
    cluster = await startCluster(3)
    manager = await LockManager.connect(cluster.urls, { ...TEST_SETTINGS, retryCount: 0 })
  })
  after(async () => {
    await manager?.close()
    await cluster?.quit()
  })

  it('a second copy of the JS layer in the same thread gets its own calls settled (a test runner that resets its module registry)', { timeout: 30_000 }, async () => {
    // Load lib/ again, as jest does per test file: its calls.js numbers its calls from 1 again,
    // while the native addon (cached by Node) is the same. Each copy's calls must be settled
    // through its own `complete`, never through the other's (ids collide).
    const libDir = require.resolve('../lib/index.js').replace(/index\.js$/, '')
    const saved = Object.keys(require.cache).filter((k) => k.startsWith(libDir))
    const kept = Object.fromEntries(saved.map((k) => [k, require.cache[k]]))
    for (const k of saved) delete require.cache[k]
    let second
    try {
      second = require('../lib/index.js')
    } finally {
      for (const k of Object.keys(require.cache)) if (k.startsWith(libDir)) delete require.cache[k]
      Object.assign(require.cache, kept)
    }
    assert.notEqual(second.LockManager, LockManager)
    const other = await second.LockManager.connect(cluster.urls, { ...TEST_SETTINGS, retryCount: 0 })
    try {
      for (let round = 0; round < 20; round++) {
        const [a, b] = [unique('copy-a'), unique('copy-b')]
        const [la, lb] = await Promise.all([manager.acquire([a], 5_000), other.acquire([b], 5_000)])
        assert.deepEqual(la.resources, [a])
        assert.deepEqual(lb.resources, [b])
        const [ra, rb] = await Promise.all([la.release(), lb.release()])
        assert.equal(ra.held, true)
        assert.equal(rb.held, true)
      }
    } finally {
      await other.close()
    }
  })

  it('acquire exposes the lock and release deletes it', async () => {
    const r = [unique('a'), unique('b')]
    const before = Date.now()
    const lock = await manager.acquire(r, 5_000)
    assert.ok(lock instanceof Lock)
    assert.deepEqual(lock.resources, r)
    assert.match(lock.value, /^[0-9a-f]{40}$/)
    assert.ok(lock.isValid() && !lock.isLost())
    assert.ok(lock.validityMs > 4_000 && lock.validityMs <= 5_000, `${lock.validityMs}`)
    assert.ok(lock.expiration > before + 4_000 && lock.expiration <= Date.now() + 5_000)
    assert.equal(lock.fence, null)
    // The round ends once a quorum answered: a slower node may still be 'pending'.
    assert.equal(lock.report.length, 3)
    assert.ok(lock.report.filter((n) => n.vote === 'for').length >= 2, JSON.stringify(lock.report))
    assert.ok(lock.report.every((n) => ['for', 'pending'].includes(n.vote) && n.error === null))
    assert.deepEqual(await onAll(cluster, 'GET', r[1]), [lock.value, lock.value, lock.value])
    const released = await lock.release()
    assert.equal(released.held, true)
    // At least a quorum; the slowest node's delete may still be in flight.
    assert.ok(released.deletedOn >= 2 && released.deletedOn <= 3, `${released.deletedOn}`)
    // JSON carries every field, the report's too (read from the core's JSON on demand).
    const json = JSON.parse(JSON.stringify(released))
    assert.deepEqual(Object.keys(json).sort(), ['attempts', 'deletedOn', 'elapsed', 'held', 'report', 'rounds'])
    assert.equal(json.rounds, 1)
    assert.equal(json.report.length, 3)
    assert.ok(json.report.filter((n) => n.vote === 'for').length >= 2, JSON.stringify(json.report))
    assert.equal(json.attempts.length, 1)
    assert.ok(typeof json.elapsed === 'number' && json.elapsed >= 0)
    assert.equal(lock.isValid(), false)
    assert.equal(lock.validityMs, 0)
    assert.deepEqual(await goneOnAll(cluster, r[0]), [0, 0, 0])
    // Releasing again reports "not held" and never rejects.
    assert.equal((await lock.release()).held, false)
  })

  it('util.inspect(lock) shows resources, validity left and fence, never the whole token', async () => {
    const r = [unique('inspect')]
    const lock = await manager.acquire(r, 5_000, { fencing: true })
    const shown = inspect(lock)
    assert.match(shown, /^Lock \{/)
    assert.ok(shown.includes(r[0]), shown)
    assert.match(shown, /validityMs: \d+/)
    assert.ok(shown.includes(`fence: ${lock.fence}n`), shown)
    assert.ok(shown.includes(`value: '${lock.value.slice(0, 8)}…'`), shown)
    assert.ok(!shown.includes(lock.value), `the whole token is shown: ${shown}`)
    assert.ok(!inspect({ lock }, { depth: 5 }).includes(lock.value))
    assert.equal(String(lock), `Lock(${JSON.stringify(r)})`)
    await lock.release()
    assert.match(inspect(lock), /validityMs: 0/)
  })

  it('fencing tokens are bigints that increase', async () => {
    const r = [unique()]
    const a = await manager.acquire(r, 2_000, { fencing: true })
    await a.release()
    const b = await manager.acquire(r, 2_000, { fencing: true })
    await b.release()
    assert.equal(typeof a.fence, 'bigint')
    assert.ok(b.fence > a.fence, `${a.fence} < ${b.fence}`)
  })

  it('contention is a LockContendedError (an ExecutionError) with the report and attempts', async () => {
    const r = [unique()]
    const held = await manager.acquire(r, 5_000)
    const e = await manager.acquire(r, 5_000).catch((x) => x)
    assert.ok(e instanceof LockContendedError && e instanceof ExecutionError && e instanceof IronlockError)
    assert.equal(e.code, 'CONTENDED')
    assert.equal(e.name, 'LockContendedError')
    assert.ok(e.report.filter((n) => n.vote === 'against').length >= 2, JSON.stringify(e.report))
    for (const n of e.report) assert.ok(cluster.urls.includes(n.url), n.url)
    // node-redlock's attempts: one round (retryCount 0), votes keyed by URL (nodes given as URLs).
    assert.equal(e.attempts.length, 1)
    const [stats] = await Promise.all(e.attempts)
    assert.deepEqual([stats.membershipSize, stats.quorumSize], [3, 2])
    assert.ok(stats.votesAgainst.size >= 2)
    for (const [url, why] of stats.votesAgainst) {
      assert.ok(cluster.urls.includes(url), url)
      if (why instanceof ResourceLockedError) {
        assert.equal(why.message, 'The operation was applied to: 0 of the 1 requested resources.')
      }
    }
    // Vote reasons are values, not thrown errors: never an IronlockError.
    assert.ok(!(new ResourceLockedError('x') instanceof IronlockError))
    await held.release()
  })

  it('extend after the keys were deleted is a LockLostError', async () => {
    const r = [unique()]
    const lock = await manager.acquire(r, 5_000)
    assert.equal(await lock.extend(8_000), lock)
    assert.ok((await cluster.cmd(0, 'PTTL', r[0])) > 5_000)
    await onAll(cluster, 'DEL', r[0])
    const e = await lock.extend(5_000).catch((x) => x)
    assert.ok(e instanceof LockLostError, String(e))
    assert.equal(e.code, 'LOST')
    assert.ok(e.report.filter((n) => n.vote === 'against').length >= 2, JSON.stringify(e.report))
    assert.equal(lock.isLost(), true)
    assert.deepEqual(await goneOnAll(cluster, r[0]), [0, 0, 0])
    assert.equal((await lock.release()).held, false)
  })

  it("reports carry the round's elapsed time and the number of rounds", async () => {
    const r = [unique()]
    const lock = await manager.acquire(r, 5_000)
    assert.equal(lock.rounds, 1)
    assert.ok(lock.elapsed > 0 && lock.elapsed < 1_000, `${lock.elapsed}`)
    const retrying = await LockManager.connect(cluster.urls, {
      ...TEST_SETTINGS,
      retryCount: 2,
      retryDelay: 10,
      retryJitter: 0,
    })
    try {
      const e = await retrying.acquire(r, 5_000).catch((x) => x)
      assert.equal(e.code, 'CONTENDED', String(e))
      assert.equal(e.rounds, 3)
      assert.ok(e.elapsed > 0, `${e.elapsed}`)
      assert.equal(e.report.length, 3)
    } finally {
      await retrying.close()
    }
    await lock.extend(5_000)
    assert.equal(lock.rounds, 1)
    const released = await lock.release()
    assert.equal(released.rounds, 1)
    assert.ok(released.elapsed > 0, `${released.elapsed}`)
    assert.equal(released.report.length, 3)
    const invalid = await manager.acquire([], 5_000).catch((x) => x)
    assert.deepEqual([invalid.report, invalid.elapsed, invalid.rounds], [[], 0, 0])
  })

  it("finish() is the core's loss rule: LOST when the release finds the token on too few nodes", async () => {
    const held = await manager.acquire([unique()], 5_000)
    const done = await held.finish()
    assert.equal(done.held, true)
    assert.equal(held.isValid(), false)
    const r = [unique()]
    const lock = await manager.acquire(r, 5_000)
    await eventually(async () => (await onAll(cluster, 'GET', r[0])).every((v) => v === lock.value))
    await cluster.cmd(0, 'DEL', r[0])
    await cluster.cmd(1, 'DEL', r[0])
    assert.ok(lock.isValid(), 'the local clock cannot know')
    const e = await lock.finish().catch((x) => x)
    assert.ok(e instanceof LockLostError, String(e))
    assert.equal(e.code, 'LOST')
    assert.match(e.message, /fewer than a quorum/)
    assert.ok(e.report.filter((n) => n.vote === 'against').length >= 2, JSON.stringify(e.report))
    assert.equal(e.rounds, 1)
    assert.deepEqual(await goneOnAll(cluster, r[0]), [0, 0, 0])
  })

  it('drain() waits for the deletes a release stopped waiting for', async () => {
    const lock = await manager.acquire([unique()], 5_000)
    await lock.release()
    assert.equal(await native.drain(2_000), true)
    assert.equal(await native.drain(0), true)
  })

  it('a Rust panic becomes an InternalError, on the JS thread and in a task', async () => {
    for (const inTask of [false, true]) {
      let caught
      try {
        await native.debugPanic(inTask)
      } catch (e) {
        caught = fromNative(e)
      }
      assert.ok(caught instanceof InternalError, String(caught))
      assert.equal(caught.code, 'INTERNAL')
      assert.match(caught.message, /a Rust panic was caught at the binding boundary: debugPanic was called/)
    }
  })

  it('64 concurrent acquires of distinct resources all succeed', async () => {
    // A generous node timeout: 64 rounds at once on a loaded 2-core machine.
    const busy = await LockManager.connect(cluster.urls, { ...TEST_SETTINGS, nodeTimeout: 1_000 })
    try {
      const names = Array.from({ length: 64 }, () => unique('c'))
      const locks = await Promise.all(names.map((n) => busy.acquire([n], 5_000)))
      assert.equal(new Set(locks.map((l) => l.value)).size, 64)
      assert.ok(locks.every((l) => l.isValid()))
      const released = await Promise.all(locks.map((l) => l.release()))
      assert.ok(released.every((x) => x.held))
    } finally {
      await busy.close()
    }
  })

  it('64 concurrent acquires of one resource: mutual exclusion, and all get their turn', async () => {
    const busy = await LockManager.connect(cluster.urls, {
      ...TEST_SETTINGS,
      nodeTimeout: 1_000,
      retryDelay: 50,
      retryJitter: 40,
    })
    const r = [unique()]
    let inside = 0
    let maxInside = 0
    let done = 0
    try {
      await Promise.all(
        Array.from({ length: 64 }, async () => {
          const lock = await busy.acquire(r, 5_000, { wait: 60_000 })
          inside += 1
          maxInside = Math.max(maxInside, inside)
          await sleep(2)
          inside -= 1
          done += 1
          await lock.release()
        }),
      )
    } finally {
      await busy.close()
    }
    assert.equal(done, 64)
    assert.equal(maxInside, 1)
    // With no retries, at most one of 64 simultaneous contenders wins; the rest are refused.
    const results = await Promise.allSettled(
      Array.from({ length: 64 }, () => manager.acquire(r, 5_000)),
    )
    const won = results.filter((x) => x.status === 'fulfilled')
    assert.ok(won.length <= 1, `${won.length} winners`)
    for (const x of results) {
      if (x.status === 'rejected') assert.ok(x.reason instanceof IronlockError, String(x.reason))
    }
    await Promise.all(won.map((x) => x.value.release()))
  })

  it('await using-style disposal releases the lock', async () => {
    const r = [unique()]
    const lock = await manager.acquire(r, 5_000)
    assert.equal(typeof lock[Symbol.asyncDispose], 'function')
    await lock[Symbol.asyncDispose]()
    assert.equal(lock.isValid(), false)
    assert.deepEqual(await goneOnAll(cluster, r[0]), [0, 0, 0])
  })

  it('using keeps the lock alive across 3x its duration', async () => {
    const r = [unique()]
    const ttl = 400
    const seen = []
    const out = await manager.using(r, ttl, async (signal, lock) => {
      const end = Date.now() + 3 * ttl + 200
      while (Date.now() < end) {
        seen.push([lock.isValid(), signal.aborted, await cluster.cmd(1, 'GET', r[0]) === lock.value])
        await sleep(50)
      }
      return 'done'
    })
    assert.equal(out, 'done')
    assert.ok(seen.length >= 15, `${seen.length} checks`)
    assert.ok(seen.every(([valid, aborted, held]) => valid && !aborted && held), JSON.stringify(seen))
    assert.deepEqual(await goneOnAll(cluster, r[0]), [0, 0, 0])
  })

  it('using keeps the lock alive while the JS thread is blocked for 3x its duration', async () => {
    // The event loop drives the addon's runtime; while JavaScript blocks it, the addon's own
    // thread must take over and extend the lock.
    const r = [unique()]
    const ttl = 400
    const out = await manager.using(r, ttl, async (signal, lock) => {
      const end = Date.now() + 3 * ttl + 200
      while (Date.now() < end) {
        // busy: no await, the event loop does not turn
      }
      const held = (await cluster.cmd(1, 'GET', r[0])) === lock.value
      return [lock.isValid(), signal.aborted, held]
    })
    assert.deepEqual(out, [true, false, true])
    assert.deepEqual(await goneOnAll(cluster, r[0]), [0, 0, 0])
  })

  it('using aborts the signal at once when the keys are deleted behind its back', async () => {
    const r = [unique()]
    const ttl = 600
    let signalSeen
    let abortedAfter
    const started = Date.now()
    const e = await manager
      .using(r, ttl, async (signal) => {
        signalSeen = signal
        await onAll(cluster, 'DEL', r[0])
        // Wait for the abort (bounded: the test fails if it never comes).
        await new Promise((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error('signal never aborted')), 5_000)
          signal.addEventListener('abort', () => {
            clearTimeout(timer)
            abortedAfter = Date.now() - started
            resolve()
          })
        })
        throw signal.reason
      })
      .catch((x) => x)
    assert.ok(signalSeen instanceof AbortSignal)
    assert.equal(signalSeen.aborted, true)
    assert.ok(signalSeen.reason instanceof LockLostError, String(signalSeen.reason))
    assert.equal(signalSeen.reason.code, 'LOST')
    assert.match(signalSeen.reason.message, /lost/)
    assert.ok(signalSeen.reason.report.some((n) => n.vote === 'against'), JSON.stringify(signalSeen.reason.report))
    // The first auto-extension (at ttl - ttl/3) finds the keys gone: well before the ttl ends.
    assert.ok(abortedAfter < ttl, `aborted after ${abortedAfter} ms`)
    assert.ok(e instanceof LockLostError, String(e))
    assert.deepEqual(await goneOnAll(cluster, r[0]), [0, 0, 0])
  })

  it('using returns the routine value and rethrows its errors', async () => {
    const r = [unique()]
    assert.equal(await manager.using(r, 1_000, {}, async () => 7), 7)
    await assert.rejects(
      manager.using(r, 1_000, async () => {
        throw new RangeError('boom')
      }),
      RangeError,
    )
    // The lock was released in both cases.
    const again = await manager.acquire(r, 1_000)
    await again.release()
  })

  it("using: the caller's signal aborts the routine too; the lock is released", async () => {
    const r = [unique()]
    const controller = new AbortController()
    const reason = new Error('shutting down')
    const e = await manager
      .using(r, 1_000, { signal: controller.signal }, async (signal) => {
        setTimeout(() => controller.abort(reason), 50)
        await sleep(5_000, undefined, { signal })
      })
      .catch((x) => x)
    assert.equal(e.name, 'AbortError')
    assert.equal(e.cause, reason)
    assert.deepEqual(await goneOnAll(cluster, r[0]), [0, 0, 0])
  })

  it('an aborted acquire rejects with signal.reason and leaves no key', async () => {
    const r = [unique()]
    const holder = await manager.acquire(r, 5_000)
    const controller = new AbortController()
    const waiting = manager.acquire(r, 5_000, { wait: 10_000, signal: controller.signal })
    await sleep(250)
    const t = Date.now()
    controller.abort()
    const e = await waiting.catch((x) => x)
    assert.ok(Date.now() - t < 500, 'the abort ends the wait at once')
    assert.equal(e.name, 'AbortError')
    assert.deepEqual(await onAll(cluster, 'GET', r[0]), [holder.value, holder.value, holder.value])
    await holder.release()
    // A custom reason is passed through; an already aborted signal rejects before any round.
    assert.deepEqual(await goneOnAll(cluster, r[0]), [0, 0, 0])
    const reason = new Error('stop')
    const r2 = [unique()]
    await assert.rejects(
      manager.acquire(r2, 5_000, { signal: AbortSignal.abort(reason) }),
      (x) => x === reason,
    )
    assert.deepEqual(await goneOnAll(cluster, r2[0]), [0, 0, 0])
  })

  it('an acquire aborted mid-round rolls back the key it set', async () => {
    const r = [unique()]
    const slow = await LockManager.connect(cluster.urls, { ...TEST_SETTINGS, nodeTimeout: 4_000 })
    await cluster.cmd(1, 'SET', r[0], 'other', 'PX', '10000')
    await cluster.pause(0)
    try {
      const controller = new AbortController()
      const waiting = slow.acquire(r, 5_000, { signal: controller.signal })
      // Node 2 sets the key at once; the round then waits for the paused node 0.
      assert.ok(await eventually(async () => (await cluster.cmd(2, 'EXISTS', r[0])) === 1))
      controller.abort()
      const e = await waiting.catch((x) => x)
      assert.equal(e.name, 'AbortError')
      assert.ok(await eventually(async () => (await cluster.cmd(2, 'EXISTS', r[0])) === 0))
      assert.equal(await cluster.cmd(1, 'GET', r[0]), 'other')
    } finally {
      await cluster.resume(0)
      await slow.close()
    }
    // After node 0 answers, the rollback reached it too (commands on a connection stay ordered).
    assert.ok(await eventually(async () => (await cluster.cmd(0, 'EXISTS', r[0])) === 0))
    await cluster.cmd(1, 'DEL', r[0])
  })

  it('the event loop keeps ticking while an acquire waits on a SIGSTOPped node', async () => {
    const slow = await LockManager.connect(cluster.urls, {
      ...TEST_SETTINGS,
      nodeTimeout: 300,
      retryCount: 3,
      retryDelay: 100,
      retryJitter: 0,
    })
    await cluster.pause(0)
    await cluster.pause(1)
    let ticks = 0
    let last = Date.now()
    let maxGap = 0
    const interval = setInterval(() => {
      const now = Date.now()
      maxGap = Math.max(maxGap, now - last)
      last = now
      ticks += 1
    }, 10)
    try {
      const t = Date.now()
      const e = await slow.acquire([unique()], 5_000).catch((x) => x)
      const elapsed = Date.now() - t
      assert.ok(e instanceof QuorumUnavailableError && e instanceof ExecutionError, String(e))
      assert.equal(e.code, 'UNAVAILABLE')
      assert.ok(e.report.filter((n) => n.vote === 'timeout').length === 2, JSON.stringify(e.report))
      assert.ok(elapsed >= 1_000, `${elapsed} ms`)
      // A blocked loop would stall for a whole node timeout (300 ms) per round.
      assert.ok(ticks >= elapsed / 10 / 4, `${ticks} ticks in ${elapsed} ms`)
      assert.ok(maxGap < 250, `longest pause between ticks ${maxGap} ms`)
      // A constructor does not wait for paused nodes either.
      const c = Date.now()
      const third = new LockManager(cluster.urls, { ...TEST_SETTINGS, connectTimeout: 2_000 })
      assert.ok(Date.now() - c < 100, 'constructor returns at once')
      await third.close()
    } finally {
      clearInterval(interval)
      await cluster.resume(0)
      await cluster.resume(1)
      await slow.close()
    }
  })

  it('node-redlock names: Redlock, acquire/extend/release/using, quit', async () => {
    const redlock = new Redlock(cluster.urls, { ...TEST_SETTINGS, retryCount: 2, retryDelay: 50 })
    assert.ok(redlock instanceof LockManager)
    const r = [unique()]
    const lock = await redlock.acquire(r, 2_000, { retryCount: 0 })
    assert.equal(await redlock.extend(lock, 3_000), lock)
    assert.equal((await redlock.release(lock)).held, true)
    const v = await redlock.using(r, 1_000, { retryCount: 1 }, async (signal) => {
      assert.equal(signal.aborted, false)
      return 'ok'
    })
    assert.equal(v, 'ok')
    await redlock.quit()
    await assert.rejects(redlock.acquire([unique()], 1_000), (e) => e.code === 'UNAVAILABLE')
  })

  it('stats() counts grants, contention and releases with the same names as every language', async () => {
    const m = new LockManager(cluster.urls, { ...TEST_SETTINGS, retryCount: 0 })
    try {
      assert.equal(m.stats().rounds, 0)
      const r = unique('stats')
      const lock = await m.acquire([r], 5_000)
      await assert.rejects(m.acquire([r], 5_000), (e) => e instanceof LockContendedError)
      await lock.extend(5_000)
      await lock.release()
      const s = m.stats()
      assert.deepEqual(
        [s.granted, s.contended, s.unavailable, s.rounds, s.extensions, s.releases, s.lost],
        [1, 1, 0, 2, 1, 1, 0],
        JSON.stringify(s),
      )
      assert.ok(s.votes_for >= 2 && s.votes_against >= 1, JSON.stringify(s))
      const h = s.acquire_latency
      assert.equal(h.count, 2)
      assert.equal(h.counts.length, h.buckets.length + 1)
      assert.equal(h.counts.reduce((a, b) => a + b, 0), 2)
      assert.ok(h.sum_seconds > 0)
    } finally {
      await m.close()
    }
  })

  it('the default export is Redlock (as node-redlock); CommonJS exports the same objects', async () => {
    const cjs = require('../lib/index.js')
    assert.equal(ironlock, Redlock)
    assert.equal(cjs.default, Redlock)
    assert.equal(cjs.LockManager, LockManager)
    assert.equal(cjs.QuorumUnavailableError, QuorumUnavailableError)
    assert.match(cjs.coreVersion, /^\d+\.\d+\.\d+/)
  })
})

describe('failures', () => {
  it('a dead node set is an ExecutionError; passwords never show', async () => {
    const cluster = await startCluster(1)
    const port = cluster.ports[0]
    await cluster.kill(0)
    const url = `redis://alice:hunter2secret@127.0.0.1:${port}`
    const settings = { ...TEST_SETTINGS, retryCount: 0, connectTimeout: 200 }
    // connect() waits for a quorum: it rejects, naming the node without its password.
    const refused = await LockManager.connect([url], settings).catch((x) => x)
    assert.ok(refused instanceof ConnectionError, String(refused))
    assert.match(refused.message, /nodes\[0\] redis:\/\/alice:\*\*\*@127\.0\.0\.1:\d+: /)
    assert.ok(![refused.message, refused.stack, inspect(refused)].join('\n').includes('hunter2secret'))
    // A manager that does not wait starts; its acquire fails with the node's error vote.
    const manager = new LockManager([url], settings)
    try {
      const e = await manager.acquire([unique()], 1_000).catch((x) => x)
      assert.ok(e instanceof ExecutionError, String(e))
      assert.equal(e.code, 'UNAVAILABLE')
      assert.equal(e.report[0].vote, 'error')
      const everything = [e.message, e.stack, JSON.stringify(e.report), inspect(manager), inspect(e)].join('\n')
      assert.ok(!everything.includes('hunter2secret'), everything)
      assert.ok(e.report[0].url.includes('***'), e.report[0].url)
    } finally {
      await manager.close()
      await cluster.quit()
    }
  })

  it('passwords never show, not even with showHidden: managers, locks, errors and their attempts', async () => {
    const cluster = await startCluster(2, ['--requirepass', 'hunter2secret'])
    const nodes = cluster.ports.map((port) => ({ host: '127.0.0.1', port, password: 'hunter2secret' }))
    const manager = await LockManager.connect(nodes, { ...TEST_SETTINGS, retryCount: 0 })
    const deep = (x) => inspect(x, { showHidden: true, depth: 20, getters: true })
    try {
      const r = unique('hidden')
      const lock = await manager.acquire([r], 5_000)
      const e = await manager.acquire([r], 1_000).catch((x) => x)
      assert.ok(e instanceof ExecutionError, String(e))
      const attempts = await Promise.all(e.attempts)
      assert.equal(attempts.length, 1)
      const everything = [deep(manager), deep(lock), deep(e), deep(e.attempts)].join('\n')
      assert.ok(!everything.includes('hunter2secret'), everything)
      await lock.release()
    } finally {
      await manager.close()
      await cluster.quit()
    }
  })

  it('an unresolvable host is a ConnectionError; locks come only from acquire', async () => {
    const url = 'redis://no-such-host.invalid:6379'
    await assert.rejects(LockManager.connect([url], { connectTimeout: 1_000 }), (e) => {
      assert.ok(e instanceof ConnectionError, String(e))
      assert.equal(e.code, 'CONNECTION')
      assert.match(e.message, /nodes\[0\]/)
      return true
    })
    const manager = new LockManager([url], { connectTimeout: 1_000 })
    await assert.rejects(manager.acquire([unique()], 1_000), (e) => e.code === 'CONNECTION')
    await manager.close()
    assert.throws(() => new Lock({}), (e) => e.code === 'INVALID_ARGUMENT')
  })

  it('3 good nodes + 1 unresolvable host + 1 silent listener: starts at once, grants, reports why', async () => {
    const cluster = await startCluster(3)
    // Accepts connections and never answers (a blackholed node).
    const sockets = []
    const silent = net.createServer((s) => sockets.push(s))
    await new Promise((resolve) => silent.listen(0, '127.0.0.1', resolve))
    const silentUrl = `redis://127.0.0.1:${silent.address().port}`
    const nodes = [...cluster.urls, 'redis://no-such-host.invalid:6379', silentUrl]
    const connectTimeout = 10_000
    let manager
    try {
      const t = Date.now()
      manager = await LockManager.connect(nodes, { ...TEST_SETTINGS, connectTimeout, retryCount: 0 })
      const took = Date.now() - t
      assert.ok(took < connectTimeout / 4, `started after ${took} ms (connectTimeout ${connectTimeout} ms)`)
      const lock = await manager.acquire([unique('bad-nodes')], 5_000)
      const report = lock.report
      assert.equal(report.length, 5)
      assert.ok(report.slice(0, 3).filter((n) => n.vote === 'for').length >= 2, JSON.stringify(report))
      const [dns, quiet] = report.slice(3)
      assert.equal(dns.url, 'redis://no-such-host.invalid:6379')
      assert.equal(dns.vote, 'error')
      assert.match(dns.error, /cannot resolve host/)
      assert.equal(quiet.url, silentUrl)
      assert.ok(['error', 'timeout', 'pending'].includes(quiet.vote), JSON.stringify(quiet))
      assert.ok(quiet.vote === 'pending' || quiet.error, JSON.stringify(quiet))
      // node-redlock's stats say the same (votes keyed by URL for nodes given as URLs).
      const [stats] = await Promise.all(lock.attempts)
      assert.match(stats.votesAgainst.get('redis://no-such-host.invalid:6379').message, /cannot resolve host/)
      assert.equal((await lock.release()).held, true)
    } finally {
      await manager?.close()
      for (const s of sockets) s.destroy()
      silent.close()
      await cluster.quit()
    }
  })

  it('close() makes later acquires UNAVAILABLE', async () => {
    const cluster = await startCluster(1)
    const manager = new LockManager(cluster.urls, TEST_SETTINGS)
    try {
      const lock = await manager.acquire([unique()], 1_000)
      await lock.release()
      await manager.close()
      const e = await manager.acquire([unique()], 1_000).catch((x) => x)
      assert.ok(e instanceof ExecutionError && e.code === 'UNAVAILABLE', String(e))
    } finally {
      await cluster.quit()
    }
  })
})
