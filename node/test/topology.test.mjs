// Voters that are Sentinel-managed masters, and a real failover under a held, auto-extended
// lock: the holder keeps its lock or is told it lost it (its AbortSignal), and no second client
// gets the lock meanwhile.
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'

import { LockManager, LockLostError } from '../lib/index.mjs'
import { startRedisCluster, startSentinelGroup, unique } from './harness.mjs'

const MAX_TTL = 2000 // restart and failover quarantine: about 3 s

const settings = { maxTtl: MAX_TTL, connectTimeout: 5000, nodeTimeout: 500, retryCount: 0 }

describe('Sentinel voters', () => {
  it('keep exclusion through a failover under a held, auto-extended lock', async () => {
    const group = await startSentinelGroup(1, 3)
    try {
      await sleep(MAX_TTL * 1.01 + 1200) // the data nodes out of the uptime quarantine
      const holder = new LockManager([group.sentinelUrl], settings)
      const contender = new LockManager(group.sentinelUrl, settings)
      const key = unique('sentinel')
      const first = await group.master()
      let second
      let told = false
      const outcome = await holder
        .using([key], MAX_TTL, async (signal, lock) => {
          assert.equal(await group.cmd(first, 'GET', key), lock.value)
          second = await group.failover()
          const deadline = Date.now() + 3 * MAX_TTL
          while (Date.now() < deadline && !signal.aborted) {
            const tried = await contender.acquire([key], MAX_TTL).then(
              async (l) => {
                await l.release()
                return 'granted'
              },
              (e) => e.code,
            )
            assert.ok(['CONTENDED', 'UNAVAILABLE'].includes(tried), `a second holder: ${tried}`)
            await sleep(100)
          }
          told = signal.aborted
          assert.ok(!lock.isValid(), 'told only once the lock is no longer valid')
          throw signal.reason
        })
        .catch((e) => e)
      assert.ok(told, 'the holder was never told')
      assert.ok(outcome instanceof LockLostError, String(outcome))
      assert.notEqual(second, first)
      // Once the quarantine is over the voter counts on its new master.
      const deadline = Date.now() + 10_000
      let got
      while (!got) {
        got = await contender.acquire([key], MAX_TTL).catch((e) => {
          assert.equal(e.code, 'UNAVAILABLE', String(e))
          assert.ok(Date.now() < deadline, String(e))
          return undefined
        })
        if (!got) await sleep(200)
      }
      assert.equal(await group.cmd(second, 'GET', key), got.value)
      await got.release()
      await holder.close()
      await contender.close()
    } finally {
      await group.quit()
    }
  })

  it('name a bad URL and never show the sentinel password', async () => {
    assert.throws(
      () => new LockManager(['redis-sentinel://127.0.0.1:26379']),
      (e) => e.code === 'INVALID_ARGUMENT' && /nodes\[0\].*after '#'/.test(e.message),
    )
    const m = new LockManager('redis-sentinel://127.0.0.1:1,127.0.0.1:2#m', {
      sentinelPassword: 'hunter2pw',
      connectTimeout: 300,
      retryCount: 0,
    })
    const e = await m.acquire([unique()], 1000).catch((x) => x)
    assert.equal(e.code, 'UNAVAILABLE', String(e))
    assert.ok(!String(e.message).includes('hunter2pw') && /sentinels/.test(e.message), e.message)
    await m.close()
  })
})

describe('Redis Cluster voters', () => {
  it('lock any name, with fencing, and refuse one request across hash slots', async () => {
    const c = await startRedisCluster(3, 1)
    try {
      const m = new LockManager(c.clusterUrl, { restartQuarantine: false, connectTimeout: 5000 })
      for (let i = 0; i < 20; i++) {
        const lock = await m.acquire([unique(`cl${i}`)], 2000, { fencing: true })
        assert.equal(typeof lock.fence, 'bigint')
        assert.ok((await lock.release()).held !== false)
      }
      const tag = unique('tag')
      const e = await m.acquire([`${tag}:a`, `${tag}:b`], 2000, { retryCount: 0 }).catch((x) => x)
      assert.ok(/different hash slots/.test(e.message), e.message)
      const both = await m.acquire([`{${tag}}:a`, `{${tag}}:b`], 2000)
      await both.release()
      await m.close()
    } finally {
      await c.quit()
    }
  })
})
