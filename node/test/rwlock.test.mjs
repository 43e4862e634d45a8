// Read-write locks from Node (`manager.rwLock(resource).read / .write`): readers share, a writer
// excludes readers, writers and plain locks of the name, a plain lock excludes both, a waiting
// writer holds back new readers and is woken by the last reader's release, `lock.access`, bad
// input naming the argument, and nothing left on the nodes. Real redis-server nodes.

import { before, after, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { inspect } from 'node:util'
import fs from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'

import { LockManager, Lock, LockContendedError, InvalidArgumentError } from '../lib/index.mjs'
import { startCluster, TEST_SETTINGS, unique } from './harness.mjs'

const SEC = 1000

/** The keys of read-write lock `name` on a node: the lock key, its readers and its writer's mark. */
const rwKeys = (name) => [name, `${name}{${name}}:ironlock:readers`, `${name}{${name}}:ironlock:writer`]

/**
 * How many of `keys` exist on each node; polled for up to 200 ms until none does (a release
 * returns once a quorum deleted them, the last deletes reach the other nodes just after).
 */
async function leftOn(cluster, keys) {
  let left
  for (let i = 0; i < 40; i++) {
    left = await Promise.all(cluster.urls.map((_, n) => cluster.cmd(n, 'EXISTS', ...keys)))
    if (left.every((x) => x === 0)) break
    await sleep(5)
  }
  return left
}

/** The rejection of `p` (fails when it resolves). */
async function refusal(p) {
  const got = await p.then(
    (lock) => ({ lock }),
    (e) => ({ e }),
  )
  if (got.lock) {
    await got.lock.release()
    assert.fail(`granted: ${got.lock}`)
  }
  return got.e
}

describe('read-write lock', () => {
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

  it('readers share; a writer and a plain lock of the name are refused while they hold', async () => {
    const name = unique('rw')
    const rw = m.rwLock(name)
    assert.equal(rw.resource, name)
    const r1 = await rw.read(5 * SEC, { fencing: true })
    const r2 = await rw.read(3 * SEC, { fencing: true })
    assert.ok(r1 instanceof Lock && r2 instanceof Lock)
    assert.equal(r1.access, 'read')
    assert.equal(r2.access, 'read')
    assert.deepEqual(r1.resources, [name])
    assert.equal(typeof r1.fence, 'bigint')
    assert.ok(r2.fence > r1.fence, `${r1.fence} then ${r2.fence}`)
    assert.notEqual(r1.value, r2.value)
    assert.ok(r1.isValid() && r2.isValid())
    // The lock key holds the readers' marker, no token; the readers are listed beside it.
    for (let n = 0; n < 3; n++) {
      assert.equal(await cluster.cmd(n, 'GET', name), 'ironlock readers', `node ${n}`)
      assert.equal(await cluster.cmd(n, 'ZCARD', rwKeys(name)[1]), 2, `node ${n}`)
    }

    const w = await refusal(rw.write(5 * SEC))
    assert.ok(w instanceof LockContendedError, String(w))
    assert.equal(w.code, 'CONTENDED')
    assert.ok(w.message.includes(`could not acquire the write lock of ${JSON.stringify([name])}`), w.message)
    assert.match(w.message, /readers/)
    const votes = w.report.map((r) => r.vote)
    assert.ok(!votes.includes('for') && votes.filter((v) => v === 'against').length >= 2, `${votes}`)
    const p = await refusal(m.acquire([name], 5 * SEC))
    assert.ok(p instanceof LockContendedError, String(p))
    // A writer that did not wait leaves no mark.
    assert.deepEqual(await leftOn(cluster, [rwKeys(name)[2]]), [0, 0, 0])

    // Both readers are Locks like any other: extend, release, finish.
    assert.equal(await r2.extend(4 * SEC), r2)
    assert.ok(r2.validityMs > 3 * SEC, `${r2.validityMs}`)
    const released = await r1.release()
    assert.equal(released.held, true)
    assert.ok(released.deletedOn >= 2, `deleted on ${released.deletedOn}`)
    assert.equal(r1.isValid(), false)
    assert.equal(await cluster.cmd(0, 'GET', name), 'ironlock readers', 'one reader is left')
    await r2.finish()
    assert.deepEqual(await leftOn(cluster, rwKeys(name)), [0, 0, 0])
    // Free again: a writer now gets it.
    const w2 = await rw.write(SEC)
    assert.equal(w2.access, 'write')
    assert.equal((await w2.release()).held, true)
    assert.deepEqual(await leftOn(cluster, rwKeys(name)), [0, 0, 0])
  })

  it('a writer excludes readers, other writers and plain locks of the name', async () => {
    const name = unique('rw')
    const rw = m.rwLock(name)
    const w = await rw.write(5 * SEC, { fencing: true })
    assert.equal(w.access, 'write')
    for (let n = 0; n < 3; n++) {
      assert.equal(await cluster.cmd(n, 'GET', name), w.value, `node ${n}: the writer's token`)
    }
    const r = await refusal(rw.read(5 * SEC))
    assert.ok(r instanceof LockContendedError, String(r))
    assert.ok(r.message.includes(`could not acquire a read lock of ${JSON.stringify([name])}`), r.message)
    assert.match(r.message, /a writer/)
    // Another handle on the same name, and another manager, see the same lock.
    const other = await refusal(m.rwLock(name).write(5 * SEC))
    assert.ok(other instanceof LockContendedError, String(other))
    const plain = await refusal(m.acquire([name], 5 * SEC))
    assert.ok(plain instanceof LockContendedError, String(plain))
    await w.extend(5 * SEC)
    // keepAlive works on a write lock as on any lock.
    const keeper = w.keepAlive()
    keeper.stop()
    assert.equal((await w.release()).held, true)
    assert.deepEqual(await leftOn(cluster, rwKeys(name)), [0, 0, 0])
    // Fences grow across writes and reads.
    const r2 = await rw.read(SEC, { fencing: true })
    assert.ok(r2.fence > w.fence, `${w.fence} then ${r2.fence}`)
    await r2.release()
    assert.deepEqual(await leftOn(cluster, rwKeys(name)), [0, 0, 0])
  })

  it('a plain lock of the name excludes readers and writers', async () => {
    const name = unique('rw')
    const plain = await m.acquire([name], 5 * SEC)
    assert.equal(plain.access, null)
    for (const side of ['read', 'write']) {
      const e = await refusal(m.rwLock(name)[side](5 * SEC))
      assert.ok(e instanceof LockContendedError, `${side}: ${e}`)
    }
    await plain.release()
    const r = await m.rwLock(name).read(SEC)
    assert.equal(r.access, 'read')
    await r.release()
    assert.deepEqual(await leftOn(cluster, rwKeys(name)), [0, 0, 0])
  })

  it('a waiting writer holds back new readers and is granted when the readers release', async () => {
    // A 10 s retry delay: a writer granted soon after the release was woken by it.
    const slow = await LockManager.connect(cluster.urls, {
      ...TEST_SETTINGS,
      retryCount: 0,
      retryDelay: 10 * SEC,
      queueTimeout: SEC,
    })
    try {
      const name = unique('rw')
      const rw = slow.rwLock(name)
      const reader = await rw.read(10 * SEC)
      const writer = rw.write(5 * SEC, { wait: 8 * SEC })
      let writerDone = false
      writer.then(
        () => (writerDone = true),
        () => (writerDone = true),
      )
      await sleep(300)
      // Longer than a queue timeout: the waiting writer renews its mark.
      for (let i = 0; i < 3; i++) {
        await reader.extend(10 * SEC)
        const e = await refusal(rw.read(5 * SEC, { retryCount: 0 }))
        assert.ok(e instanceof LockContendedError, String(e))
        assert.match(e.message, /a writer is waiting for it/)
        assert.equal(writerDone, false, 'the writer waits while the reader holds')
        await sleep(500)
      }
      const releasedAt = Date.now()
      assert.equal((await reader.release()).held, true)
      const w = await writer
      const woke = Date.now() - releasedAt
      assert.ok(woke < 2 * SEC, `woken by the release, not a 10 s retry: ${woke} ms`)
      assert.equal(w.access, 'write')
      assert.ok(w.isValid())
      // Its release takes its mark away everywhere.
      assert.equal((await w.release()).held, true)
      assert.deepEqual(await leftOn(cluster, [rwKeys(name)[2]]), [0, 0, 0])
      const r = await rw.read(SEC)
      await r.release()
      assert.deepEqual(await leftOn(cluster, rwKeys(name)), [0, 0, 0])
    } finally {
      await slow.close()
    }
  })

  it('a waiting writer aborted by its signal rejects with the reason and stops holding readers back', async () => {
    const waiting = await LockManager.connect(cluster.urls, {
      ...TEST_SETTINGS,
      retryCount: 0,
      retryDelay: 50,
      queueTimeout: 10 * SEC,
    })
    try {
      const name = unique('rw')
      const rw = waiting.rwLock(name)
      const reader = await rw.read(10 * SEC)
      const controller = new AbortController()
      const writer = rw.write(SEC, { wait: 8 * SEC, signal: controller.signal })
      await sleep(200)
      const held = await refusal(rw.read(SEC))
      assert.match(held.message, /a writer is waiting for it/)
      const reason = new Error('stop waiting')
      controller.abort(reason)
      await assert.rejects(writer, (e) => e === reason)
      // Its 10 s mark is taken away in the background, right after the abort.
      let admitted = null
      for (let i = 0; i < 40 && admitted === null; i++) {
        admitted = await rw.read(SEC).catch(() => null)
        if (admitted === null) await sleep(25)
      }
      assert.ok(admitted, "an aborted writer's mark still holds readers back")
      await admitted.release()
      await reader.release()
      assert.deepEqual(await leftOn(cluster, rwKeys(name)), [0, 0, 0])
      // An already aborted signal rejects at once.
      await assert.rejects(rw.write(SEC, { signal: AbortSignal.abort(reason) }), (e) => e === reason)
    } finally {
      await waiting.close()
    }
  })

  it('lock.access, toString and util.inspect say which side a lock holds', async () => {
    const name = unique('rw')
    const r = await m.rwLock(name).read(5 * SEC)
    assert.equal(r.access, 'read')
    assert.equal(String(r), `Lock(${JSON.stringify([name])}, read)`)
    assert.match(inspect(r), /access: 'read'/)
    assert.ok(!inspect(r).includes(r.value), 'the whole token is shown')
    // Read-only.
    assert.throws(() => {
      r.access = 'write'
    }, TypeError)
    assert.equal(r.access, 'read')
    await r.release()
    const w = await m.rwLock(name).write(5 * SEC)
    assert.equal(String(w), `Lock(${JSON.stringify([name])}, write)`)
    assert.match(inspect(w), /access: 'write'/)
    await w.release()
    // Null for a plain lock and a semaphore permit, and not shown.
    const plain = await m.acquire([name], 5 * SEC)
    assert.equal(plain.access, null)
    assert.equal(String(plain), `Lock(${JSON.stringify([name])})`)
    assert.ok(!inspect(plain).includes('access'), inspect(plain))
    await plain.release()
    const permit = await m.semaphore(name, 2).acquire(5 * SEC)
    assert.equal(permit.access, null)
    await permit.release()
    assert.deepEqual(await leftOn(cluster, rwKeys(name)), [0, 0, 0])
  })

  it("node/README.md's read-write lock example runs as shown", async () => {
    const readme = fs.readFileSync(new URL('../README.md', import.meta.url), 'utf8')
    const section = readme.split('## Read-write locks')[1]
    assert.ok(section, 'no "Read-write locks" section')
    const code = section.match(/```js\n([\s\S]*?)```/)?.[1]
    assert.ok(code?.includes('rwLock('), 'no example in the section')
    const printed = []
    const AsyncFunction = (async () => {}).constructor
    await new AsyncFunction('manager', 'console', code)(m, { log: (...a) => printed.push(a) })
    assert.equal(printed.length, 2, JSON.stringify(printed, (_, v) => (typeof v === 'bigint' ? `${v}n` : v)))
    assert.deepEqual(printed[0], ['read'])
    assert.equal(printed[1][0], 'write')
    assert.equal(typeof printed[1][1], 'bigint')
    assert.deepEqual(await leftOn(cluster, rwKeys('doc:42')), [0, 0, 0])
  })

  it('names the argument on bad input and leaves nothing behind', async () => {
    const name = unique('rw')
    const rw = m.rwLock(name)
    for (const side of ['read', 'write']) {
      // `fair: true` is no bad input: it waits in the lock's line (nobody is in it here).
      const fair = await rw[side](SEC, { fair: true })
      assert.equal(fair.access, side)
      await fair.release()
      const hold = await refusal(rw[side](SEC, { minHold: 500 }))
      assert.ok(hold instanceof InvalidArgumentError, `${side}: ${hold}`)
      assert.match(hold.message, /^min_hold: applies to locks, not to read-write locks/)
      const ttl = await refusal(rw[side](0))
      assert.ok(ttl instanceof InvalidArgumentError, `${side}: ${ttl}`)
      assert.match(ttl.message, /^durationMs: /)
      const typed = await refusal(rw[side]('1000'))
      assert.ok(typed instanceof InvalidArgumentError, `${side}: ${typed}`)
      assert.match(typed.message, /^durationMs: expected a number of milliseconds, got string/)
      const unknown = await refusal(rw[side](SEC, { limit: 2 }))
      assert.ok(unknown instanceof InvalidArgumentError, `${side}: ${unknown}`)
      assert.match(unknown.message, /^options\.limit: unknown acquire option/)
      const signal = await refusal(rw[side](SEC, { signal: 'stop' }))
      assert.match(signal.message, /^options\.signal: expected an AbortSignal/)
      const empty = await refusal(m.rwLock('')[side](SEC))
      assert.ok(empty instanceof InvalidArgumentError, `${side}: ${empty}`)
      assert.equal(empty.message, 'resource: empty resource name')
    }
    // `fair: false` is no request for a queue: accepted.
    const ok = await rw.read(SEC, { fair: false })
    await ok.release()
    assert.throws(() => m.rwLock(42), (e) => e instanceof InvalidArgumentError && /^resource: expected a string/.test(e.message))
    assert.throws(() => m.rwLock('\ud800'), (e) => e instanceof InvalidArgumentError && /^resource: not valid Unicode/.test(e.message))
    assert.deepEqual(await leftOn(cluster, rwKeys(name)), [0, 0, 0])
  })
})
