// Habits and parity (issue 29, items 7 and 9): a seconds-for-milliseconds ttl is warned about
// once, unknown option names are refused naming them with what they likely meant, and the
// manager has what the Python and Rust managers have (nodes, quorum, inspect, releaseToken), a
// Lock serializes, a manager inspects without its internals or a password. Real nodes. Its own
// file: the short-ttl warning is once per process.

import { before, after, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { inspect } from 'node:util'

import { LockManager, Redlock, InvalidArgumentError, LockContendedError } from '../lib/index.mjs'
import { startCluster, TEST_SETTINGS, unique } from './harness.mjs'

describe('habits and parity', () => {
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

  it('warns once, naming the argument, when a ttl looks like seconds given as milliseconds', async () => {
    const warnings = []
    const listen = (w) => warnings.push(w)
    process.on('warning', listen)
    try {
      // Legal (10 ms leaves validity after the drift allowance), but most likely "10 seconds".
      const lock = await manager.acquire([unique('short')], 10).catch((e) => e)
      await new Promise((resolve) => setImmediate(resolve))
      assert.equal(warnings.length, 1, `${warnings}`)
      const [w] = warnings
      assert.equal(w.code, 'IRONLOCK_SHORT_TTL')
      assert.match(w.message, /^durationMs: 10 ms is a very short lock duration/)
      assert.match(w.message, /milliseconds/)
      if (lock.release) await lock.release()
      // Once per process: neither a second short ttl nor a usual one warns again.
      const again = await manager.acquire([unique('short')], 50).catch((e) => e)
      const usual = await manager.acquire([unique('usual')], 5_000)
      await new Promise((resolve) => setImmediate(resolve))
      assert.equal(warnings.length, 1, `${warnings}`)
      if (again.release) await again.release()
      await usual.release()
    } finally {
      process.off('warning', listen)
    }
  })

  it('refuses an unknown setting or option naming it, with what it likely meant', async () => {
    const cases = [
      [() => new LockManager(cluster.urls, { retry_count: 1 }), /^settings\.retry_count: unknown setting \(did you mean retryCount\?\)$/],
      [() => new LockManager(cluster.urls, { maxTTL: 1 }), /^settings\.maxTTL: unknown setting \(did you mean maxTtl\?\)$/],
      [() => new LockManager(cluster.urls, { nodeTimout: 1 }), /did you mean nodeTimeout\?/],
      [() => new LockManager(undefined, { masters: cluster.urls }), /^settings\.masters: unknown setting \(the nodes are the first argument, not a setting\)$/],
      [() => new LockManager(cluster.urls, { colour: 'red' }), /^settings\.colour: unknown setting$/],
      [() => new Redlock(cluster.urls, { retries: 3 }), /did you mean retryCount\?/],
    ]
    for (const [make, message] of cases) {
      assert.throws(make, (e) => e instanceof InvalidArgumentError && message.test(e.message), `${message}`)
    }
    await assert.rejects(manager.acquire([unique('o')], 1_000, { timeout: 5 }), /^InvalidArgumentError: options\.timeout: unknown acquire option \(per-call options/)
    await assert.rejects(manager.acquire([unique('o')], 1_000, { retries: 5 }), /options\.retries: unknown acquire option \(did you mean retryCount\?\)/)
    await assert.rejects(manager.acquire([unique('o')], 1_000, { fencng: true }), /did you mean fencing\?/)
  })

  it('has nodes (redacted), quorum, closed, inspect and releaseToken, as in Python and Rust', async () => {
    assert.deepEqual(manager.nodes, cluster.urls)
    assert.equal(manager.quorum, 2)
    assert.equal(manager.closed, false)
    const withPassword = new LockManager(
      cluster.urls.map((u) => u.replace('redis://', 'redis://user:s3cret@')),
      TEST_SETTINGS,
    )
    assert.ok(withPassword.nodes.every((u) => u.includes(':***@') && !u.includes('s3cret')), `${withPassword.nodes}`)
    await withPassword.close()
    assert.equal(withPassword.closed, true)

    const name = unique('inspect')
    const free = await manager.inspect(name)
    assert.deepEqual(free, cluster.urls.map((url) => ({ url, token: null, ttl: null, permits: [], limit: null, error: null })))
    const lock = await manager.acquire([name], 5_000)
    const held = await manager.inspect(name)
    for (const h of held) {
      assert.equal(h.token, lock.value)
      assert.ok(Number.isInteger(h.ttl) && h.ttl > 4_000 && h.ttl <= 5_000, `${h.ttl}`)
      assert.equal(h.error, null)
    }
    // A semaphore of the same name shows its permits and limit, as in Python.
    const permit = await manager.semaphore(name, 2).acquire(5_000)
    for (const h of await manager.inspect(name)) {
      assert.equal(h.limit, 2)
      assert.deepEqual(h.permits.map((p) => p.token), [permit.value])
      assert.ok(h.permits[0].ttl > 4_000 && h.permits[0].ttl <= 5_000)
    }
    await permit.release()
    // Another process was handed the lock's resources and token: it releases it.
    const other = await LockManager.connect(cluster.urls, TEST_SETTINGS)
    assert.equal(await other.releaseToken([name], lock.value), true)
    assert.ok((await manager.inspect(name)).every((h) => h.token === null))
    assert.equal(await other.releaseToken([name], lock.value), false)
    await assert.rejects(other.releaseToken([name], ''), InvalidArgumentError)
    await assert.rejects(other.releaseToken(name, 'x'), /resources: expected an array of strings/)
    await assert.rejects(other.inspect(''), InvalidArgumentError)
    await assert.rejects(other.inspect(7), /resource: expected a string/)
    await other.close()
  })

  it('serializes a lock with JSON.stringify: what identifies it, nothing about the nodes', async () => {
    const name = unique('json')
    const lock = await manager.acquire([name], 5_000, { fencing: true })
    const json = JSON.parse(JSON.stringify(lock))
    assert.deepEqual(Object.keys(json).sort(), ['expiration', 'fence', 'lost', 'resources', 'validityMs', 'value'])
    assert.deepEqual(json.resources, [name])
    assert.equal(json.value, lock.value)
    assert.equal(json.fence, String(lock.fence))
    assert.ok(json.validityMs > 4_000 && json.validityMs <= 5_000)
    assert.ok(Math.abs(json.expiration - lock.expiration) <= 1)
    assert.equal(json.lost, false)
    await lock.release()
    const other = await manager.acquire([unique('json')], 5_000)
    const text = JSON.stringify(other)
    assert.equal(JSON.parse(text).fence, null)
    assert.ok(!text.includes('redis://'), text)
    await other.release()
  })

  it('shows a manager with util.inspect as nodes (redacted), quorum and closed', async () => {
    const m = new LockManager(cluster.urls.map((u) => u.replace('redis://', 'redis://user:s3cret@')), TEST_SETTINGS)
    const shown = inspect(m)
    assert.match(shown, /^LockManager \{/)
    assert.match(shown, /nodes: \[/)
    assert.match(shown, /quorum: 2/)
    assert.match(shown, /closed: false/)
    assert.ok(shown.includes(':***@'), shown)
    assert.ok(!/s3cret|_events|_eventsCount|_maxListeners|Symbol/.test(shown), shown)
    assert.ok(!inspect(m, { showHidden: true, depth: 5 }).includes('s3cret'))
    assert.equal(inspect({ m }, { depth: 0 }), '{ m: [LockManager] }')
    await m.close()
    assert.match(inspect(m), /closed: true/)
    const r = new Redlock(cluster.urls, TEST_SETTINGS)
    assert.match(inspect(r), /^Redlock \{/)
    await r.quit()
  })

  it('narrows nothing at run time: each error class carries its one code', async () => {
    const name = unique('code')
    const lock = await manager.acquire([name], 5_000)
    const e = await manager.acquire([name], 1_000).catch((x) => x)
    assert.ok(e instanceof LockContendedError)
    assert.equal(e.code, 'CONTENDED')
    await lock.release()
  })
})
