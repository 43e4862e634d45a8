// Sentinel-managed masters and Redis Clusters given as ioredis users write them: ioredis's
// Sentinel options, `{cluster: [{host, port}]}`, a Sentinel-configured ioredis client and an
// ioredis `Cluster`; through LockManager and the node-redlock class, one voter each.
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { inspect } from 'node:util'

import Redis, { Cluster as RedisCluster } from 'ioredis'

import Redlock, { LockManager } from '../lib/index.mjs'
import { startRedisCluster, startSentinelGroup, TEST_SETTINGS, unique } from './harness.mjs'

/** `{addresses: [{host, port}], name}` of a URL the harness prints (no credentials, no db). */
function addresses(url) {
  const [hosts, name] = url.split('://')[1].split('#')
  return {
    addresses: hosts.split(',').map((hp) => {
      const i = hp.lastIndexOf(':')
      return { host: hp.slice(0, i), port: Number(hp.slice(i + 1)) }
    }),
    name,
  }
}

const fast = { restartQuarantine: false, connectTimeout: 5000, nodeTimeout: 500 }
const invalid = (pattern) => (e) => e.code === 'INVALID_ARGUMENT' && pattern.test(e.message)

describe('Sentinel voters in ioredis forms', () => {
  it('options objects and Sentinel-configured ioredis clients, in LockManager and Redlock', async () => {
    const group = await startSentinelGroup(1, 3)
    try {
      const { addresses: sentinels, name } = addresses(group.sentinelUrl)
      const client = new Redis({ sentinels, name, lazyConnect: true })
      const forms = [
        { sentinels, name },
        { sentinels: sentinels.map((a) => `${a.host}:${a.port}`), name, db: 0 },
        client,
      ]
      for (const form of forms) {
        const m = new LockManager([form], fast)
        assert.deepEqual(m.nodes, [group.sentinelUrl])
        const key = unique('sentinel-form')
        const lock = await m.acquire([key], 2000)
        assert.equal(await group.cmd(await group.master(), 'GET', key), lock.value)
        await lock.release()
        await m.close()
      }
      // The node-redlock class takes the Sentinel-configured client as one voter.
      const redlock = new Redlock([new Redis({ sentinels, name, lazyConnect: true })], { ...TEST_SETTINGS, ...fast })
      assert.equal(redlock.quorum, 1)
      assert.deepEqual(redlock.nodes, [group.sentinelUrl])
      const lock = await redlock.acquire([unique('redlock-sentinel')], 2000)
      await redlock.release(lock)
      await redlock.quit()
      client.disconnect()
      // Credentials and a database: percent-encoded, shown masked.
      const { host, port } = sentinels[0]
      const shown = new LockManager(
        [{ sentinels: [sentinels[0]], name, username: 'app', password: 'p@ss#w/rd%', db: 2, sentinelPassword: 's3cret#' }],
        { connectTimeout: 200 },
      )
      assert.deepEqual(shown.nodes, [`redis-sentinel://app:***@${host}:${port}/2#${name}`])
      assert.ok(!/p@ss|s3cret/.test(inspect(shown)), inspect(shown))
      await shown.close()
      // One sentinel login per manager: a node's must agree with the setting.
      assert.throws(
        () => new LockManager([{ sentinels, name, sentinelPassword: 'one1' }], { sentinelPassword: 'two2' }),
        (e) => invalid(/nodes\[0\]\.sentinelPassword: differs from settings\.sentinelPassword/)(e) && !/one1|two2/.test(e.message),
      )
      assert.throws(
        () => new LockManager([{ sentinels, name, sentinelPassword: 'one1' }, { sentinels, name, sentinelUsername: 'u', sentinelPassword: 'two2' }]),
        invalid(/nodes\[1\]\.sentinelPassword: differs from nodes\[0\]\.sentinelPassword/),
      )
      const same = new LockManager([{ sentinels, name, sentinelPassword: 'same' }], { sentinelPassword: 'same', connectTimeout: 200 })
      await same.close()
      const replica = new Redis({ sentinels, name, role: 'slave', lazyConnect: true })
      assert.throws(() => new LockManager([replica]), invalid(/nodes\[0\]\.role: a lock needs the master/))
      replica.disconnect()
    } finally {
      await group.quit()
    }
  })
})

describe('Redis Cluster voters in ioredis forms', () => {
  it('{cluster} objects and an ioredis Cluster, in LockManager and Redlock', async () => {
    const c = await startRedisCluster(3, 1)
    try {
      const { addresses: seeds } = addresses(c.clusterUrl)
      const firstTwo = `redis-cluster://${seeds.slice(0, 2).map((a) => `${a.host}:${a.port}`).join(',')}`
      const cluster = new RedisCluster(seeds.slice(0, 2), { lazyConnect: true })
      const forms = [
        [{ cluster: seeds }, c.clusterUrl],
        [{ cluster: seeds.slice(0, 2).map((a) => `${a.host}:${a.port}`) }, firstTwo],
        [cluster, firstTwo],
      ]
      for (const [form, url] of forms) {
        const m = new LockManager([form], fast)
        assert.deepEqual(m.nodes, [url])
        for (let i = 0; i < 5; i++) {
          const lock = await m.acquire([unique(`cluster-form${i}`)], 2000, { fencing: true })
          assert.equal(typeof lock.fence, 'bigint')
          await lock.release()
        }
        await m.close()
      }
      const redlock = new Redlock([cluster], { ...TEST_SETTINGS, ...fast })
      assert.deepEqual(redlock.nodes, [firstTwo])
      const lock = await redlock.acquire([unique('redlock-cluster')], 2000)
      await redlock.release(lock)
      await redlock.quit()
      const { host, port } = seeds[0]
      const shown = new LockManager(
        [{ cluster: [`${host}:${port}`], username: 'app', password: 'p@ss#w/rd%', tls: true }],
        { connectTimeout: 200 },
      )
      assert.deepEqual(shown.nodes, [`rediss-cluster://app:***@${host}:${port}`])
      assert.ok(!inspect(shown).includes('p@ss'))
      await shown.close()
    } finally {
      await c.quit()
    }
  })
})

describe('Sentinel and Cluster node objects name the bad part', () => {
  const cases = [
    [{ sentinels: [{ host: 'h', port: 1 }] }, /nodes\[0\]\.name: a Sentinel-managed master needs/],
    [{ sentinels: [{ host: 'h', port: 1 }], name: 'a b' }, /nodes\[0\]\.name: must be a plain name/],
    [{ sentinels: 'h:1', name: 'm' }, /nodes\[0\]\.sentinels: expected an array/],
    [{ sentinels: [], name: 'm' }, /nodes\[0\]\.sentinels: empty/],
    [{ sentinels: ['h:1'], name: 'm', host: 'x' }, /nodes\[0\]\.host: .* in sentinels/],
    [{ sentinels: [{ host: 'h', port: 0.5 }], name: 'm' }, /nodes\[0\]\.sentinels\[0\]\.port/],
    [{ cluster: ['c:1'], db: 1 }, /nodes\[0\]\.db: a Redis Cluster has only database 0/],
    [{ cluster: [{ host: 'c', port: 70000 }] }, /nodes\[0\]\.cluster\[0\]\.port/],
    [{ cluster: ['a,b'] }, /nodes\[0\]\.cluster\[0\]:/],
    [{ cluster: ['c:1'], port: 1 }, /nodes\[0\]\.port: .* in cluster/],
  ]
  for (const [node, pattern] of cases) {
    it(`${JSON.stringify(node)} → ${pattern}`, () => {
      assert.throws(() => new LockManager([node]), invalid(pattern))
    })
  }
})
