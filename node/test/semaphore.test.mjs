// Counting semaphores (SPEC §11) from Node: at most `limit` permits, each a Lock; wake-ups;
// fencing; bad input naming the argument; no holder left behind.

import { before, after, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'

import { LockManager, LockContendedError, InvalidArgumentError } from '../lib/index.mjs'
import { startCluster, TEST_SETTINGS, unique } from './harness.mjs'

describe('semaphore', () => {
  let cluster
  let m
  before(async () => {
    cluster = await startCluster(3)
    m = await LockManager.connect(cluster.urls, { ...TEST_SETTINGS, retryCount: 0 })
  })
  after(async () => {
    await m.close()
    await cluster.quit()
  })

  it('grants at most limit permits, each a Lock, kept apart from a lock on the name', async () => {
    const name = unique()
    const sem = m.semaphore(name, 2)
    assert.equal(sem.limit, 2)
    assert.equal(sem.resource, name)
    const a = await sem.acquire(5000, { fencing: true })
    const b = await sem.acquire(5000, { fencing: true })
    assert.ok(BigInt(b.fence) > BigInt(a.fence))
    const e = await sem.acquire(5000).catch((x) => x)
    assert.ok(e instanceof LockContendedError, String(e))
    assert.match(e.message, /\(limit 2\): all 2 permits are held elsewhere/)
    await (await m.acquire([name], 1000)).release()
    await a.extend(5000)
    await a.finish()
    await b.release()
    const key = `${name}:ironlock:semaphore`
    let left = -1
    for (let i = 0; i < 40 && left !== 0; i++) {
      left = (await Promise.all(cluster.urls.map((_, n) => cluster.cmd(n, 'EXISTS', key)))).reduce((x, y) => x + y)
      if (left !== 0) await sleep(5)
    }
    assert.equal(left, 0)
  })

  it('wakes a waiter at the release', async () => {
    const slow = await LockManager.connect(cluster.urls, { ...TEST_SETTINGS, retryCount: 0, retryDelay: 10000 })
    try {
      const name = unique()
      const held = await slow.semaphore(name, 1).acquire(5000)
      setTimeout(() => held.release(), 300)
      const started = Date.now()
      const permit = await slow.semaphore(name, 1).acquire(5000, { wait: 8000 })
      assert.ok(Date.now() - started < 5000)
      await permit.release()
    } finally {
      await slow.close()
    }
  })

  it('names the argument on bad input', async () => {
    for (const limit of [0, 10001]) {
      const e = await m.semaphore(unique(), limit).acquire(1000).catch((x) => x)
      assert.ok(e instanceof InvalidArgumentError, String(e))
      assert.match(e.message, new RegExp(`limit: must be between 1 and 10000, got ${limit}`))
    }
    for (const limit of [-1, 1.5, '3']) {
      assert.throws(() => m.semaphore(unique(), limit), (e) => e instanceof InvalidArgumentError && /^limit: /.test(e.message))
    }
    assert.throws(() => m.semaphore(42, 2), (e) => e instanceof InvalidArgumentError && /^resource: /.test(e.message))
    // Not turned into U+FFFD: two such names would share one semaphore.
    for (const name of ['\ud800', 'a\udc00b']) {
      assert.throws(() => m.semaphore(name, 2), (e) => e instanceof InvalidArgumentError && /^resource: not valid Unicode/.test(e.message))
    }
    const e = await m.semaphore(unique(), 2).acquire(-5).catch((x) => x)
    assert.ok(e instanceof InvalidArgumentError, String(e))
  })
})
