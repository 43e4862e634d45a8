// Leader elections from Node (`manager.election(name)`): candidates lead in the order they
// queued with growing terms; leader() and proclaim; observe() yields null, then every leader in
// order, and finishes when the manager closes, when its signal aborts, or on `break` (which
// ends the watch on the nodes); an aborted campaign leaves the line on every node; a leader cut
// off from its nodes is told before its validity ends; bad input names its argument; nothing
// keeps the process alive once the iteration is over. Real redis-server nodes.

import { before, after, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { inspect } from 'node:util'
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'

import {
  LockManager,
  Election,
  Leadership,
  LockContendedError,
  LockLostError,
  QuorumUnavailableError,
  InvalidArgumentError,
} from '../lib/index.mjs'
import { startCluster, TEST_SETTINGS, unique } from './harness.mjs'

const SEC = 1000

/** The election's line (its fair queue) on a node, as core/tests/election.rs names it. */
const queueKey = (name) => `${name}{${name}}:ironlock:queue`
/** The leader record beside the election's key. */
const recordKey = (name) => `${name}{${name}}:ironlock:leader`

/** Polls `read` (every 10 ms, up to `ms`) until `done(value)`; the last value read. */
async function until(read, done, ms = 2 * SEC) {
  const end = Date.now() + ms
  let v = await read()
  while (!done(v) && Date.now() < end) {
    await sleep(10)
    v = await read()
  }
  return v
}

/** Whether `p` is still pending after the current turns of the event loop. */
async function pending(p) {
  const marker = Symbol('pending')
  return (await Promise.race([p.then(() => null, () => null), sleep(20).then(() => marker)])) === marker
}

/** `p`'s outcome within `ms`: `{ value }`, `{ error }`, or `{ timedOut: true }`. */
async function within(p, ms) {
  return Promise.race([
    p.then(
      (value) => ({ value }),
      (error) => ({ error }),
    ),
    sleep(ms).then(() => ({ timedOut: true })),
  ])
}

/** The next leader other than null from `it` (a read between two leaders may see nobody). */
async function nextLeader(it) {
  for (;;) {
    const r = await it.next()
    assert.equal(r.done, false, 'the observer ended')
    if (r.value !== null) return r.value
  }
}

/** The rejection of `p` (fails when it resolves). */
async function refusal(p) {
  const got = await p.then(
    (value) => ({ ok: true, value }),
    (e) => ({ ok: false, e }),
  )
  if (got.ok) {
    if (got.value instanceof Leadership) await got.value.resign()
    assert.fail(`resolved: ${got.value}`)
  }
  return got.e
}

describe('leader election', { timeout: 120_000 }, () => {
  let cluster
  let m
  let m2
  before(async () => {
    cluster = await startCluster(3)
    m = await LockManager.connect(cluster.urls, TEST_SETTINGS)
    m2 = await LockManager.connect(cluster.urls, TEST_SETTINGS)
  })
  after(async () => {
    await m.close()
    await m2.close()
    await cluster.quit()
  })

  /** The line's length on every node. */
  const lineOn = (name) => Promise.all(cluster.urls.map((_, n) => cluster.cmd(n, 'ZCARD', queueKey(name))))

  it('candidates lead in the order they queued, with growing terms; leader() shows the value, proclaim changes it', async () => {
    const name = unique('elect')
    const e = m.election(name)
    assert.ok(e instanceof Election)
    assert.equal(e.name, name)
    assert.equal(e.manager, m)
    assert.equal(await e.leader(), null, 'nobody leads yet')

    const a = await e.campaign('a:1', 5 * SEC)
    assert.ok(a instanceof Leadership)
    assert.equal(a.election, e)
    assert.equal(typeof a.term, 'bigint')
    assert.ok(a.term > 0n)
    assert.equal(a.value, 'a:1')
    assert.ok(a.isLeader() && !a.isLost())
    assert.ok(a.validityMs > 3 * SEC && a.validityMs <= 5 * SEC, `${a.validityMs}`)
    const seen = await e.leader()
    assert.ok(Object.isFrozen(seen))
    assert.deepEqual(Object.keys(seen).sort(), ['term', 'token', 'validityMs', 'value'])
    assert.equal(seen.value, 'a:1')
    assert.equal(seen.term, a.term)
    assert.equal(seen.token, a.token)
    assert.ok(seen.validityMs > 4 * SEC && seen.validityMs <= 5 * SEC, `${seen.validityMs}`)
    // Every node holds the leader's token under the election's key.
    for (let n = 0; n < 3; n++) assert.equal(await cluster.cmd(n, 'GET', name), a.token, `node ${n}`)

    // B (another manager: another process) then C queue behind A, in that order.
    const b = m2.election(name).campaign('b:1', 5 * SEC)
    await sleep(150)
    const c = e.campaign('c:1', 5 * SEC)
    await sleep(150)
    assert.deepEqual(await lineOn(name), [2, 2, 2], 'B and C wait in line on every node')

    await a.proclaim('a:2')
    assert.equal(a.value, 'a:2')
    const now = await e.leader()
    assert.equal(now.value, 'a:2')
    assert.equal(now.term, a.term, 'a proclaim keeps the term')
    assert.ok(await pending(b), 'B waits while A leads')
    assert.ok(await pending(c), 'C waits while A leads')

    const released = await a.resign()
    assert.equal(released.held, true)
    assert.ok(released.deletedOn >= 2, `${released.deletedOn}`)
    assert.equal(a.isLeader(), false)
    assert.equal(a.validityMs, 0)
    assert.equal(await a.lost, false, 'resigned, not lost')
    const late = await refusal(a.proclaim('a:3'))
    assert.ok(late instanceof LockLostError, String(late))
    assert.equal(late.code, 'LOST')

    const lb = await b
    assert.equal(lb.value, 'b:1')
    assert.ok(lb.term > a.term, `terms grow: ${a.term} then ${lb.term}`)
    assert.ok(await pending(c), 'C queued after B')
    assert.equal((await e.leader()).value, 'b:1')
    await lb.resign()
    const lc = await c
    assert.ok(lc.term > lb.term, `terms grow: ${lb.term} then ${lc.term}`)
    const byC = await e.leader()
    assert.equal(byC.value, 'c:1')
    assert.equal(byC.term, lc.term)
    await lc.resign()
    assert.equal(await e.leader(), null)
    // Neither the key, the record nor the line is left (the term counter stays).
    const left = await until(
      () => Promise.all(cluster.urls.map((_, n) => cluster.cmd(n, 'EXISTS', name, recordKey(name), queueKey(name)))),
      (v) => v.every((x) => x === 0),
    )
    assert.deepEqual(left, [0, 0, 0])
  })

  it('observe() yields null, then each leader in order with growing terms, and finishes when the manager closes', async () => {
    const watcher = await LockManager.connect(cluster.urls, TEST_SETTINGS)
    const name = unique('elect')
    const e = m.election(name)
    const changes = watcher.election(name).observe()
    assert.equal(changes[Symbol.asyncIterator](), changes)
    assert.deepEqual(await changes.next(), { done: false, value: null }, 'nobody leads yet')

    const a = await e.campaign('a:1', 5 * SEC)
    const first = await nextLeader(changes)
    assert.ok(Object.isFrozen(first))
    assert.deepEqual(first, { value: 'a:1', term: a.term, token: a.token, validityMs: first.validityMs })
    assert.ok(first.validityMs > 4 * SEC && first.validityMs <= 5 * SEC, `${first.validityMs}`)

    await a.proclaim('a:2')
    const proclaimed = await nextLeader(changes)
    assert.equal(proclaimed.value, 'a:2')
    assert.equal(proclaimed.term, a.term)

    const b = m2.election(name).campaign('b:1', 5 * SEC)
    await sleep(100)
    await a.resign()
    const lb = await b
    const second = await nextLeader(changes)
    assert.equal(second.value, 'b:1')
    assert.equal(second.token, lb.token)
    assert.ok(second.term > first.term, `${first.term} then ${second.term}`)

    await lb.resign()
    assert.deepEqual(await changes.next(), { done: false, value: null }, 'nobody leads after B resigned')
    const c = await e.campaign('c:1', 5 * SEC)
    const third = await nextLeader(changes)
    assert.equal(third.value, 'c:1')
    assert.ok(third.term > second.term, `${second.term} then ${third.term}`)

    // Nothing changes now: a next() waits, and closing the manager finishes it.
    const waiting = changes.next()
    assert.ok(await pending(waiting))
    const closedAt = Date.now()
    await watcher.close()
    const end = await within(waiting, 2 * SEC)
    assert.deepEqual(end, { value: { done: true, value: undefined } })
    assert.ok(Date.now() - closedAt < SEC, `finished ${Date.now() - closedAt} ms after close`)
    assert.deepEqual(await changes.next(), { done: true, value: undefined }, 'and stays finished')
    // On a closed manager an observation finishes at once; leader() and campaign() reject.
    const none = []
    for await (const l of watcher.election(name).observe()) none.push(l)
    assert.deepEqual(none, [])
    const closedLeader = await refusal(watcher.election(name).leader())
    assert.ok(closedLeader instanceof QuorumUnavailableError, String(closedLeader))
    assert.match(closedLeader.message, /closed/)
    const closedCampaign = await refusal(watcher.election(name).campaign('x', SEC))
    assert.ok(closedCampaign instanceof QuorumUnavailableError, String(closedCampaign))
    await c.resign()
  })

  it('observe({ signal }) finishes when the signal aborts, also while a next() waits', async () => {
    const name = unique('elect')
    const e = m.election(name)
    const controller = new AbortController()
    const seen = []
    const a = await e.campaign('a', 5 * SEC)
    let abortedAt
    for await (const l of e.observe({ signal: controller.signal })) {
      seen.push(l)
      // The loop then waits for a change that does not come: the abort ends it.
      setTimeout(() => {
        abortedAt = Date.now()
        controller.abort(new Error('stop watching'))
      }, 100)
    }
    assert.ok(Date.now() - abortedAt < SEC, `finished ${Date.now() - abortedAt} ms after the abort`)
    assert.equal(seen.length, 1)
    assert.equal(seen[0].token, a.token)
    // An already aborted signal: nothing is yielded.
    const none = []
    for await (const l of e.observe({ signal: AbortSignal.abort() })) none.push(l)
    assert.deepEqual(none, [])
    await a.resign()
  })

  it('break out of for await ends the watch on the nodes', async () => {
    const name = unique('elect')
    const e = m.election(name)
    const channels = [`${name}:ironlock:leader`, `${name}:ironlock:release`]
    const subscribers = () =>
      Promise.all(
        cluster.urls.map(async (_, n) => {
          const reply = await cluster.cmd(n, 'PUBSUB', 'NUMSUB', ...channels)
          return reply[1] + reply[3]
        }),
      )
    assert.deepEqual(await subscribers(), [0, 0, 0])
    const a = await e.campaign('a', 5 * SEC)
    let watched
    // Held past the loop: what ends the watch is the break, not the garbage collector.
    const observed = e.observe()
    for await (const l of observed) {
      assert.equal(l.token, a.token)
      watched = await until(subscribers, (v) => v.some((x) => x > 0))
      break
    }
    assert.ok(watched.some((x) => x > 0), `the observer never subscribed: ${watched}`)
    const after = await until(subscribers, (v) => v.every((x) => x === 0))
    assert.deepEqual(after, [0, 0, 0], 'the observer still watches after break')
    assert.deepEqual(await observed.next(), { done: true, value: undefined }, 'finished by the break')
    // return() on an iterator with a next() waiting finishes that next() too.
    const changes = e.observe()
    assert.equal((await changes.next()).value.token, a.token)
    const waiting = changes.next()
    assert.ok(await pending(waiting))
    assert.deepEqual(await changes.return(), { done: true, value: undefined })
    assert.deepEqual(await within(waiting, SEC), { value: { done: true, value: undefined } })
    await a.resign()
  })

  it('an observation that is over keeps no process alive (after close, return() or abort)', async () => {
    // Each child ends its iteration one way and must then exit by itself, leaving its manager
    // open (an unfinished native observer would keep its event loop running).
    const script = `
      import { LockManager } from ${JSON.stringify(new URL('../lib/index.mjs', import.meta.url).href)}
      const how = process.env.HOW
      const m = await LockManager.connect(process.env.IRONLOCK_NODES.split(','), { restartQuarantine: false })
      const controller = new AbortController()
      const changes = m.election('child:' + how).observe({ signal: controller.signal })
      console.log('first', (await changes.next()).value)
      const waiting = changes.next()
      setTimeout(() => {
        if (how === 'close') m.close()
        else if (how === 'return') changes.return()
        else controller.abort()
      }, 100)
      console.log('end', JSON.stringify(await waiting), how)
    `
    for (const how of ['close', 'return', 'abort']) {
      const started = Date.now()
      const out = await new Promise((resolve) => {
        execFile(
          process.execPath,
          ['--input-type=module', '-e', script],
          { env: { ...process.env, IRONLOCK_NODES: cluster.urls.join(','), HOW: how }, timeout: 15 * SEC },
          (error, stdout, stderr) => resolve({ error, stdout, stderr }),
        )
      })
      assert.equal(out.error, null, `${how}: ${out.error} ${out.stderr}`)
      assert.equal(out.stdout, `first null\nend {"done":true} ${how}\n`, how)
      assert.ok(Date.now() - started < 10 * SEC, `${how}: exited after ${Date.now() - started} ms`)
    }
  })

  it('an aborted campaign, or one whose wait runs out, leaves the line on every node', async () => {
    const name = unique('elect')
    const e = m.election(name)
    const a = await e.campaign('a', 5 * SEC)
    const controller = new AbortController()
    const b = m2.election(name).campaign('b', 5 * SEC, { signal: controller.signal })
    await sleep(200)
    assert.deepEqual(await lineOn(name), [1, 1, 1], 'B waits in line on every node')
    const reason = new Error('no longer a candidate')
    controller.abort(reason)
    await assert.rejects(b, (err) => err === reason)
    assert.deepEqual(await until(() => lineOn(name), (v) => v.every((x) => x === 0)), [0, 0, 0])

    const gaveUp = await refusal(e.campaign('c', 5 * SEC, { wait: 300 }))
    assert.ok(gaveUp instanceof LockContendedError, String(gaveUp))
    assert.equal(gaveUp.code, 'CONTENDED')
    assert.deepEqual(await until(() => lineOn(name), (v) => v.every((x) => x === 0)), [0, 0, 0])

    // An already aborted signal rejects at once, never joining the line.
    await assert.rejects(e.campaign('d', SEC, { signal: AbortSignal.abort(reason) }), (err) => err === reason)
    assert.deepEqual(await lineOn(name), [0, 0, 0])
    // With nobody left in line, the next candidate after A's resignation is a fresh one.
    await a.resign()
    const d = await e.campaign('d', SEC, { wait: 2 * SEC })
    assert.ok(d.term > a.term)
    await d.resign()
  })

  it('await using resigns; util.inspect, toString and toJSON describe a leadership', async () => {
    const name = unique('elect')
    const e = m.election(name)
    assert.equal(String(e), `Election(${JSON.stringify(name)})`)
    assert.match(inspect(e), /Election \{ name: /)
    const l = await e.campaign('10.0.0.7:8080', 5 * SEC)
    assert.equal(String(l), `Leadership(${JSON.stringify(name)}, term ${l.term})`)
    const shown = inspect(l)
    assert.match(shown, /^Leadership \{/)
    assert.match(shown, /value: '10\.0\.0\.7:8080'/)
    assert.ok(!shown.includes(l.token), 'the whole token is shown')
    const json = JSON.parse(JSON.stringify(l))
    assert.deepEqual(Object.keys(json).sort(), ['election', 'lost', 'term', 'token', 'validityMs', 'value'])
    assert.equal(json.term, String(l.term))
    assert.equal(json.election, name)
    assert.equal(json.lost, false)
    assert.throws(() => {
      l.term = 1n
    }, TypeError)
    assert.equal(typeof Leadership.prototype[Symbol.asyncDispose], 'function')
    await l[Symbol.asyncDispose]()
    assert.equal(l.isLeader(), false)
    assert.equal(await e.leader(), null, 'disposing resigned')
    // Constructors are not for users.
    assert.throws(() => new Leadership({}), InvalidArgumentError)
    assert.throws(() => new Election({}), InvalidArgumentError)
  })

  it("node/README.md's leader election example runs as shown", async () => {
    const readme = fs.readFileSync(new URL('../README.md', import.meta.url), 'utf8')
    const section = readme.split('## Leader election')[1]
    assert.ok(section, 'no "Leader election" section')
    const code = section.match(/```js\n([\s\S]*?)```/)?.[1]
    assert.ok(code?.includes('election('), 'no example in the section')
    const printed = []
    const AsyncFunction = (async () => {}).constructor
    await new AsyncFunction('manager', 'console', code)(m, {
      log: (...a) => printed.push(a),
      error: (...a) => printed.push(['error:', ...a]),
    })
    const text = printed.map((a) => a.join(' '))
    assert.equal(text.length, 3, JSON.stringify(text))
    assert.match(text[0], /^leading with term \d+$/)
    assert.equal(text[1], 'leader: 10.0.0.7:9090')
    assert.equal(text[2], 'resigned')
    assert.equal(await m.election('scheduler').leader(), null)
  })

  it('names the argument on bad input and leaves nothing behind', async () => {
    const invalid = (re) => (e) => e instanceof InvalidArgumentError && e.code === 'INVALID_ARGUMENT' && re.test(e.message)
    assert.throws(() => m.election(''), invalid(/^name: empty election name$/))
    assert.throws(() => m.election(42), invalid(/^name: expected a string, got number$/))
    assert.throws(() => m.election('\ud800'), invalid(/^name: not valid Unicode/))
    assert.throws(() => m.election('x:ironlock:queue'), invalid(/^name: a name ending in ":ironlock:queue"/))

    const name = unique('elect')
    const e = m.election(name)
    const cases = [
      [() => e.campaign(42, SEC), /^value: expected a string, got number$/],
      [() => e.campaign('\udc00', SEC), /^value: not valid Unicode/],
      [() => e.campaign('v'.repeat(65537), SEC), /^value: at most 65536 bytes, got 65537/],
      [() => e.campaign('v', 0), /^durationMs: /],
      [() => e.campaign('v', -5), /^durationMs: /],
      [() => e.campaign('v', '1000'), /^durationMs: expected a number of milliseconds, got string$/],
      [() => e.campaign('v', 120 * SEC), /^durationMs: must be at most maxTtl \(60000 ms\)/],
      [() => e.campaign('v', SEC, { wait: -1 }), /^options\.wait: /],
      [() => e.campaign('v', SEC, { wait: '5s' }), /^options\.wait: expected a number of milliseconds/],
      [() => e.campaign('v', SEC, { fencing: true }), /^options\.fencing: unknown campaign option .*campaign options are wait, signal/],
      [() => e.campaign('v', SEC, { wiat: 5 }), /^options\.wiat: unknown campaign option \(did you mean wait\?\)/],
      [() => e.campaign('v', SEC, { signal: 'stop' }), /^options\.signal: expected an AbortSignal, got string$/],
      [() => e.campaign('v', SEC, 'fast'), /^options: expected an object, got string$/],
    ]
    for (const [call, re] of cases) {
      const err = await refusal(call())
      assert.ok(invalid(re)(err), `${re}: ${err}`)
    }
    assert.throws(() => e.observe({ wait: 5 }), invalid(/^options\.wait: unknown observe option/))
    assert.throws(() => e.observe({ signal: {} }), invalid(/^options\.signal: expected an AbortSignal/))

    const l = await e.campaign('v', SEC)
    for (const [value, re] of [
      ['v'.repeat(65537), /^value: at most 65536 bytes/],
      [7, /^value: expected a string, got number$/],
    ]) {
      const err = await refusal(l.proclaim(value))
      assert.ok(invalid(re)(err), `${re}: ${err}`)
    }
    assert.equal(l.value, 'v', 'a refused proclaim changes nothing')
    assert.equal((await e.leader()).value, 'v')
    // The longest value is accepted.
    await l.proclaim('w'.repeat(65536))
    assert.equal((await e.leader()).value.length, 65536)
    await l.resign()
    const left = await until(
      () => Promise.all(cluster.urls.map((_, n) => cluster.cmd(n, 'EXISTS', name, recordKey(name), queueKey(name)))),
      (v) => v.every((x) => x === 0),
    )
    assert.deepEqual(left, [0, 0, 0])
  })
})

describe('leader election: loss', { timeout: 60_000 }, () => {
  it('a leader cut off from its nodes is told before its validity ends', async () => {
    const cluster = await startCluster(3)
    const m = await LockManager.connect(cluster.urls, { ...TEST_SETTINGS, nodeTimeout: 100 })
    let paused = false
    try {
      const e = m.election(unique('elect'))
      const ttl = 2 * SEC
      const grantedAt = Date.now()
      const l = await e.campaign('x', ttl)
      const watch = l.lost
      assert.equal(l.lost, watch, 'the same Promise on every read')
      assert.ok(await pending(watch), 'not lost while the nodes answer')
      await cluster.pause(0)
      await cluster.pause(1)
      paused = true
      const told = await within(watch, 5 * SEC)
      const at = Date.now() - grantedAt
      assert.deepEqual(told, { value: true }, 'never told')
      assert.ok(l.isLost() && !l.isLeader())
      assert.equal(l.validityMs, 0)
      // A tenth of the ttl before the lock's own validity (ttl − drift) would end.
      const drift = ttl * 0.01 + 2
      assert.ok(at <= ttl - drift - ttl / 10 + 50, `told at ${at} ms`)
      const late = await refusal(l.proclaim('y'))
      assert.ok(late instanceof LockLostError, String(late))
      // Resigning a lost leadership does not reject.
      assert.equal((await l.resign()).held, false)
    } finally {
      if (paused) {
        await cluster.resume(0)
        await cluster.resume(1)
      }
      await m.close()
      await cluster.quit()
    }
  })
})
