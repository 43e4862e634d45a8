// Runs every scenario of tests/corpus/scenarios/ with the same expectations as the Rust core.

import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import path from 'node:path'
import util from 'node:util'
import { setTimeout as sleep } from 'node:timers/promises'

import { LockManager } from '../lib/index.mjs'
import { REPO, startCluster } from './harness.mjs'

// Read-only commands of `redis` steps: a mismatch is retried for up to 200 ms (the corpus README:
// requests a round stopped waiting for reach the other nodes in the background).
const READ_ONLY = new Set(['GET', 'EXISTS', 'PTTL', 'TTL', 'DBSIZE', 'ZCARD', 'HGET'])

async function redisStep(cluster, step, expand) {
  const matches = (got) => {
    if ('expect' in step && !util.isDeepStrictEqual(got, expand(step.expect))) return false
    if ('expect_gt' in step && !(typeof got === 'number' && got > step.expect_gt)) return false
    return true
  }
  let got = await cluster.cmd(step.node, ...step.args)
  if (READ_ONLY.has(String(step.args[0]).toUpperCase())) {
    for (let i = 0; i < 40 && !matches(got); i++) {
      await sleep(5)
      got = await cluster.cmd(step.node, ...step.args)
    }
  }
  return got
}

const DIR = path.join(REPO, 'tests/corpus/scenarios')
const files = fs
  .readdirSync(DIR)
  .filter((f) => f.endsWith('.json'))
  .sort()

// snake_case setting names of the corpus → camelCase; `_ms` durations are integer ms already.
function settings(s) {
  const out = { restartQuarantine: false, retryCount: 0 }
  for (const [k, v] of Object.entries(s ?? {})) {
    const name = k.replace(/_ms$/, '').replace(/_([a-z])/g, (_, c) => c.toUpperCase())
    out[name] = v
  }
  return out
}

const FIELDS = {
  acquire: ['as', 'resources', 'ttl_ms', 'options', 'expect', 'expect_votes', 'expect_rounds', 'expect_message', 'limit', 'access'],
  extend: ['lock', 'ttl_ms', 'expect'],
  release: ['lock', 'expect_held'],
  finish: ['lock', 'expect'],
  keep_alive: ['lock'],
  expect_lost: ['lock', 'lost'],
  expect_valid: ['lock', 'valid'],
  expect_fence: ['lock', 'present'],
  expect_fence_increasing: ['locks'],
  redis: ['node', 'args', 'expect', 'expect_gt'],
  kill: ['node'],
  start: ['node'],
  restart: ['node'],
  pause: ['node'],
  resume: ['node'],
  sleep: ['ms'],
  campaign: ['as', 'election', 'value', 'ttl_ms', 'wait_ms', 'expect', 'expect_message'],
  proclaim: ['leadership', 'value', 'expect'],
  resign: ['leadership'],
  leader: ['election', 'expect'],
  expect_leading: ['leadership', 'leading'],
  expect_terms_increasing: ['leaderships'],
}
const OPTIONS = {
  retry_count: 'retryCount',
  wait_ms: 'wait',
  fencing: 'fencing',
  fair: 'fair',
  min_hold_ms: 'minHold'
}

function checkVotes(step, report, ctx) {
  if (!step.expect_votes) return
  assert.ok(Array.isArray(report) && report.length > 0, `${ctx}: no report`)
  for (const [vote, n] of Object.entries(step.expect_votes)) {
    const got = report.filter((r) => r.vote === vote).length
    assert.equal(got, n, `${ctx}: votes ${vote} in ${JSON.stringify(report)}`)
  }
}

/** `expect_rounds`: the report's number of rounds, and a positive elapsed time. */
function checkRounds(step, got, ctx) {
  if (!('expect_rounds' in step)) return
  assert.equal(got.rounds, step.expect_rounds, `${ctx}: rounds`)
  assert.ok(typeof got.elapsed === 'number' && got.elapsed > 0, `${ctx}: elapsed ${got.elapsed}`)
}

/** `expect_message`: each text is in err.message, where {nodeI} stands for node I's host:port. */
function checkMessage(step, message, urls, ctx) {
  for (let part of step.expect_message ?? []) {
    assert.ok(typeof message === 'string', `${ctx}: no error message`)
    urls.forEach((url, i) => {
      part = part.replaceAll(`{node${i}}`, url.split('/').pop().split('@').pop())
    })
    assert.ok(message.includes(part), `${ctx}: ${JSON.stringify(part)} not in ${JSON.stringify(message)}`)
  }
}

async function run(sc) {
  const cluster = await startCluster(sc.nodes)
  const manager = await LockManager.connect(cluster.urls, settings(sc.settings))
  const locks = {}
  const leaders = {}
  const keepers = []
  // "$a" stands for the token of lock (or leadership) `a`.
  const expand = (v) =>
    typeof v === 'string' && v.startsWith('$') ? (locks[v.slice(1)]?.value ?? leaders[v.slice(1)].token) : v
  try {
    for (const [i, step] of sc.steps.entries()) {
      const { op } = step
      const ctx = `${sc.name} step ${i} (${op})`
      assert.ok(FIELDS[op], `${ctx}: unknown op`)
      for (const k of Object.keys(step)) {
        if (k !== 'op' && k !== 'why') assert.ok(FIELDS[op].includes(k), `${ctx}: unknown field ${k}`)
      }
      switch (op) {
        case 'acquire': {
          const options = {}
          for (const [k, v] of Object.entries(step.options ?? {})) {
            assert.ok(OPTIONS[k], `${ctx}: unknown option ${k}`)
            options[OPTIONS[k]] = v
          }
          if ('access' in step) {
            assert.ok(['read', 'write'].includes(step.access), `${ctx}: unknown access ${JSON.stringify(step.access)}`)
          }
          let got
          let report
          let outcome
          try {
            // `limit`: a permit of the semaphore resources[0] (SPEC §11); `access`: that side of
            // the read-write lock resources[0].
            let lock
            if ('limit' in step) {
              lock = await manager.semaphore(step.resources[0], step.limit).acquire(step.ttl_ms, options)
            } else if ('access' in step) {
              const rw = manager.rwLock(step.resources[0])
              lock =
                step.access === 'read'
                  ? await rw.read(step.ttl_ms, options)
                  : await rw.write(step.ttl_ms, options)
            } else {
              lock = await manager.acquire(step.resources, step.ttl_ms, options)
            }
            locks[step.as] = lock
            got = 'ok'
            report = lock.report
            outcome = lock
          } catch (e) {
            assert.ok(typeof e.code === 'string', `${ctx}: ${e.stack}`)
            got = e.code
            report = e.report
            outcome = e
          }
          assert.equal(got, step.expect, `${ctx}: ${JSON.stringify(report)}`)
          // A lock says which side of a read-write lock it holds, and null otherwise.
          if (got === 'ok') assert.equal(outcome.access, step.access ?? null, `${ctx}: lock.access`)
          checkVotes(step, report, ctx)
          checkRounds(step, outcome, ctx)
          checkMessage(step, outcome instanceof Error ? outcome.message : undefined, cluster.urls, ctx)
          break
        }
        case 'finish': {
          let got = 'ok'
          try {
            await locks[step.lock].finish()
          } catch (e) {
            got = e.code
          }
          assert.equal(got, step.expect, ctx)
          break
        }
        case 'keep_alive':
          keepers.push(locks[step.lock].keepAlive())
          break
        case 'expect_lost':
          assert.equal(locks[step.lock].isLost(), step.lost, ctx)
          break
        case 'extend': {
          let got = 'ok'
          try {
            await locks[step.lock].extend(step.ttl_ms)
          } catch (e) {
            got = e.code
          }
          assert.equal(got, step.expect, ctx)
          break
        }
        case 'release': {
          const r = await locks[step.lock].release()
          assert.equal(r.held, step.expect_held, `${ctx}: ${JSON.stringify(r.report)}`)
          break
        }
        case 'expect_valid':
          assert.equal(locks[step.lock].isValid(), step.valid, ctx)
          break
        case 'expect_fence':
          assert.equal(locks[step.lock].fence !== null, step.present, ctx)
          if (step.present) assert.equal(typeof locks[step.lock].fence, 'bigint', ctx)
          break
        case 'expect_fence_increasing': {
          const fences = step.locks.map((n) => locks[n].fence)
          for (let j = 1; j < fences.length; j++) {
            assert.ok(fences[j - 1] < fences[j], `${ctx}: ${fences}`)
          }
          break
        }
        case 'redis': {
          const got = await redisStep(cluster, step, expand)
          if ('expect' in step) assert.deepEqual(got, expand(step.expect), `${ctx}: ${step.args}`)
          if ('expect_gt' in step) assert.ok(got > step.expect_gt, `${ctx}: ${got}`)
          break
        }
        case 'campaign': {
          let got = 'ok'
          let message
          try {
            const options = 'wait_ms' in step ? { wait: step.wait_ms } : {}
            leaders[step.as] = await manager.election(step.election).campaign(step.value, step.ttl_ms, options)
          } catch (e) {
            assert.ok(typeof e.code === 'string', `${ctx}: ${e.stack}`)
            got = e.code
            message = e.message
          }
          assert.equal(got, step.expect, ctx)
          checkMessage(step, message, cluster.urls, ctx)
          break
        }
        case 'proclaim': {
          let got = 'ok'
          try {
            await leaders[step.leadership].proclaim(step.value)
          } catch (e) {
            got = e.code
          }
          assert.equal(got, step.expect, ctx)
          break
        }
        case 'resign':
          await leaders[step.leadership].resign()
          break
        case 'expect_leading':
          assert.equal(leaders[step.leadership].isLeader(), step.leading, ctx)
          break
        case 'expect_terms_increasing': {
          const terms = step.leaderships.map((n) => leaders[n].term)
          for (let j = 1; j < terms.length; j++) {
            assert.ok(terms[j - 1] < terms[j], `${ctx}: ${terms}`)
          }
          break
        }
        case 'leader': {
          let who
          try {
            who = await manager.election(step.election).leader()
          } catch (e) {
            assert.equal(e.code, step.expect, `${ctx}: ${e.stack}`)
            break
          }
          if (step.expect === null) {
            assert.equal(who, null, `${ctx}: ${util.inspect(who)} leads, want nobody`)
          } else {
            assert.ok(who !== null && typeof step.expect === 'object', `${ctx}: ${util.inspect(who)}, want ${JSON.stringify(step.expect)}`)
            const mine = leaders[step.expect.leadership]
            assert.equal(who.value, step.expect.value, ctx)
            assert.equal(who.term, mine.term, ctx)
            assert.equal(who.token, mine.token, ctx)
            assert.ok(who.validityMs > 0, `${ctx}: ${util.inspect(who)}`)
          }
          break
        }
        case 'kill':
        case 'start':
        case 'restart':
        case 'pause':
        case 'resume':
          await cluster[op](step.node)
          break
        case 'sleep':
          await sleep(step.ms)
          break
      }
    }
  } finally {
    for (const k of keepers) k.stop()
    await manager.close()
    await cluster.quit()
  }
}

describe('shared corpus', { concurrency: 1 }, () => {
  it('has every scenario', () => assert.ok(files.length >= 20, `${files.length} scenarios`))
  for (const f of files) {
    const sc = JSON.parse(fs.readFileSync(path.join(DIR, f), 'utf8'))
    it(sc.name, { timeout: 60_000 }, () => run(sc))
  }
})
