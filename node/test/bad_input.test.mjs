// SPEC §6: every bad input is INVALID_ARGUMENT (CONNECTION for an unusable scheme), names the
// argument, never crashes the process, and leaves no key on Redis.

import { before, after, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { inspect } from 'node:util'

import { LockManager, InvalidArgumentError, ConnectionError, IronlockError } from '../lib/index.mjs'
import { startCluster, TEST_SETTINGS, unique } from './harness.mjs'

function isInvalid(name) {
  return (e) => {
    assert.ok(e instanceof InvalidArgumentError, `${e?.name}: ${e?.message}`)
    assert.ok(e instanceof IronlockError)
    assert.equal(e.code, 'INVALID_ARGUMENT')
    assert.ok(e.message.includes(name), `message ${JSON.stringify(e.message)} names ${name}`)
    assert.deepEqual(e.report, [])
    return true
  }
}

describe('bad input', () => {
  let cluster
  let manager
  let lock
  before(async () => {
    cluster = await startCluster(1)
    manager = await LockManager.connect(cluster.urls, { ...TEST_SETTINGS, maxTtl: 10_000 })
    lock = await manager.acquire([unique()], 5_000)
  })
  after(async () => {
    await lock?.release()
    await manager?.close()
    await cluster?.quit()
  })

  it('constructor: nodes', () => {
    const url = cluster.urls[0]
    // No nodes given: IRONLOCK_NODES, then REDIS_URL; neither is set here.
    delete process.env.IRONLOCK_NODES
    delete process.env.REDIS_URL
    const cases = [
      [undefined, 'nodes: none given, and neither IRONLOCK_NODES nor REDIS_URL is set'],
      [42, 'nodes'],
      [`${url},,${url}`, 'nodes: empty entry'],
      [[], 'nodes'],
      [[true], 'nodes[0]'],
      [[url, { port: 70_000 }], 'nodes[1].port'],
      [[{ port: 6379.5 }], 'nodes[0].port'],
      [[{ db: -1 }], 'nodes[0].db'],
      [[{ password: 5 }], 'nodes[0].password'],
      [[{ tls: { rejectUnauthorized: false } }], 'nodes[0].tls.rejectUnauthorized'],
      [[{ tls: { cert: 'x' } }], 'nodes[0].tls: a client certificate (cert) needs its key'],
      [[{ options: {}, startupNodes: [], isCluster: true, sendCommand() {} }], 'nodes[0].startupNodes: empty array'],
      [[{ options: { rootNodes: [] }, sendCommand() {} }], 'nodes[0]: a node-redis cluster client'],
      [[{ sentinels: [{ host: 'h' }] }], 'nodes[0].name: a Sentinel-managed master needs its name'],
      [[42], 'nodes[0]'],
      [[url, null], 'nodes[1]'],
      [[url, url], 'nodes[1]'],
      [[''], 'nodes[0]'],
      [['127.0.0.1:6379'], 'nodes[0]'],
      [['redis://127.0.0.1:notaport'], 'nodes[0]'],
    ]
    for (const [nodes, name] of cases) {
      assert.throws(() => new LockManager(nodes), isInvalid(name), JSON.stringify(nodes))
    }
    assert.throws(
      () => new LockManager(['http://127.0.0.1:1']),
      (e) => e instanceof ConnectionError && e.code === 'CONNECTION' && e.message.includes('nodes[0]'),
    )
  })

  it('a password with a reserved character is never shown', () => {
    for (const password of ['Hunter2#Secret', 'Hunter2?Secret', 'Hunter2/Secret']) {
      const url = `redis://alice:${password}@127.0.0.1:6379`
      assert.throws(() => new LockManager([url]), (e) => {
        const text = [e.message, e.stack, inspect(e)].join('\n')
        for (const run of ['Hun', 'unt', 'ter2', 'Sec', 'cret']) assert.ok(!text.includes(run), text)
        assert.ok(e instanceof InvalidArgumentError && e.message.startsWith('nodes[0]'), e.message)
        assert.ok(e.message.includes('127.0.0.1:6379') && e.message.includes('%23'), e.message)
        return true
      })
    }
  })

  it('constructor: settings', () => {
    const url = cluster.urls[0]
    const cases = [
      ['nope', 'settings'],
      [[1], 'settings'],
      [{ retryDelay: '200' }, 'settings.retryDelay'],
      [{ retryDelay: NaN }, 'settings.retryDelay'],
      [{ retryDelay: -1 }, 'settings.retryDelay'],
      [{ retryDelay: 1.5 }, 'settings.retryDelay'],
      [{ retryJitter: Infinity }, 'settings.retryJitter'],
      [{ retryCount: -2 }, 'settings.retryCount'],
      [{ retryCount: 0.5 }, 'settings.retryCount'],
      [{ retryCount: 2 ** 40 }, 'settings.retryCount'],
      [{ driftFactor: 0.5 }, 'settings.driftFactor'],
      [{ driftFactor: NaN }, 'settings.driftFactor'],
      [{ driftFactor: -0.1 }, 'settings.driftFactor'],
      [{ nodeTimeout: 0 }, 'settings.nodeTimeout'],
      [{ connectTimeout: -5 }, 'settings.connectTimeout'],
      [{ maxTtl: 0 }, 'settings.maxTtl'],
      [{ maxTtl: 2 ** 53 }, 'settings.maxTtl: must be at most 2^53 - 1 ms'],
      [{ retryDelay: 86_400_001 }, 'settings.retryDelay: must be at most a day (86400000 ms)'],
      [{ maxTtl: 10, minValidity: 20 }, 'settings.minValidity'],
      [{ extensionThreshold: 0 }, 'settings.extensionThreshold'],
      [{ maxExtensions: -1 }, 'settings.maxExtensions'],
      [{ restartQuarantine: 'yes' }, 'settings.restartQuarantine'],
      [{ keyPrefix: 5 }, 'settings.keyPrefix'],
      [{ keyPrefix: 'a\u0000b' }, 'settings.keyPrefix'],
      [{ retryCont: 3 }, 'settings.retryCont'],
      [{ retryDelay: 10n }, 'settings.retryDelay'],
      [{ replicaAcks: 17 }, 'settings.replicaAcks: must be 0 (off) to 16 replicas, got 17'],
    ]
    for (const [settings, name] of cases) {
      assert.throws(() => new LockManager([url], settings), isInvalid(name), String(Object.keys(settings)))
    }
  })

  it("constructor: every setting of the core's table is type-checked; optional ones take null", async () => {
    const url = cluster.urls[0]
    const kinds = createRequire(import.meta.url)('../index.js').settingKinds()
    const names = kinds.map(([name]) => name)
    for (const expected of ['retryCount', 'maxTtl', 'reseat', 'keyPrefix', 'maxExtensions', 'tlsCaCert']) {
      assert.ok(names.includes(expected), `${expected} in ${names}`)
    }
    for (const [name, kind] of kinds) {
      assert.throws(() => new LockManager([url], { [name]: {} }), isInvalid(`settings.${name}`), name)
      if (kind.startsWith('optional')) {
        await new LockManager([url], { ...TEST_SETTINGS, [name]: null }).close()
      }
    }
  })

  it('the native constructor converts by the same table and names a value of the wrong type', async () => {
    const require = createRequire(import.meta.url)
    const native = require('../index.js')
    const { fromNative } = require('../lib/errors.js')
    const open = (settings) => {
      try {
        return new native.NativeManager([cluster.urls[0]], settings, () => {})
      } catch (e) {
        throw fromNative(e)
      }
    }
    for (const [name, kind] of native.settingKinds()) {
      const wrong = kind === 'flag' ? 1 : kind === 'text' || kind === 'pem' ? 7 : 'x'
      assert.throws(() => open({ [name]: wrong }), isInvalid(`settings.${name}`), name)
    }
    assert.throws(() => open({ retryDelay: -1 }), isInvalid('settings.retryDelay'))
    assert.throws(() => open({ driftFactor: 0.7 }), isInvalid('settings.driftFactor'))
    assert.throws(() => open({ retryCount: -2 }), isInvalid('settings.retryCount'))
    assert.throws(() => open({ bogus: 1 }), isInvalid('settings.bogus'))
  })

  it('acquire: resources, duration and options', async () => {
    const r = unique()
    const cases = [
      [[undefined, 1000], 'resources'],
      [['r', 1000], 'resources'],
      [[[], 1000], 'resources'],
      [[[''], 1000], 'resources[0]'],
      [[[r, r], 1000], 'resources'],
      [[[r, 7], 1000], 'resources[1]'],
      [[[null], 1000], 'resources[0]'],
      [[[{}], 1000], 'resources[0]'],
      [[['bad\uD800'], 1000], 'resources[0]'],
      [[[r], undefined], 'durationMs'],
      [[[r], '1000'], 'durationMs'],
      [[[r], 1000n], 'durationMs'],
      [[[r], NaN], 'durationMs'],
      [[[r], -1], 'durationMs'],
      [[[r], 1.5], 'durationMs'],
      [[[r], Infinity], 'durationMs'],
      [[[r], 0], 'durationMs'],
      [[[r], 20_000], 'durationMs: must be at most maxTtl (10000 ms)'],
      [[[r], 1000, 'fast'], 'options'],
      [[[r], 1000, { wait: -1 }], 'options.wait'],
      [[[r], 1000, { wait: NaN }], 'options.wait'],
      [[[r], 1000, { wait: '1s' }], 'options.wait'],
      [[[r], 1000, { retryCount: 1.5 }], 'options.retryCount'],
      [[[r], 1000, { retryCount: -3 }], 'options.retryCount'],
      [[[r], 1000, { fencing: 1 }], 'options.fencing'],
      [[[r], 1000, { signal: {} }], 'options.signal'],
      [[[r], 1000, { retryDelay: 5 }], 'options.retryDelay'],
    ]
    for (const [args, name] of cases) {
      await assert.rejects(manager.acquire(...args), isInvalid(name), `${name}: ${String(args)}`)
    }
  })

  it('extend, release, using', async () => {
    for (const bad of [NaN, -1, 0.5, '5', undefined, 0, 20_000]) {
      await assert.rejects(lock.extend(bad), isInvalid(bad === 20_000 ? 'durationMs: must be at most maxTtl (10000 ms)' : 'durationMs'))
    }
    assert.ok(lock.isValid(), 'a rejected extend leaves the lock alone')
    await assert.rejects(manager.release({}), isInvalid('lock'))
    await assert.rejects(manager.extend(null, 1000), isInvalid('lock'))
    await assert.rejects(manager.using([unique()], 1000), isInvalid('routine'))
    await assert.rejects(manager.using([unique()], 1000, {}, 'not a function'), isInvalid('routine'))
  })

  it('messages quote inputs cut to about 80 characters', async () => {
    const url = cluster.urls[0]
    const long = 'x'.repeat(500)
    const messages = []
    const grab = (f) => {
      try {
        f()
      } catch (e) {
        assert.ok(e instanceof InvalidArgumentError || e instanceof ConnectionError, String(e))
        messages.push(e.message)
      }
    }
    const grabAsync = async (p) => messages.push((await p.catch((e) => e)).message)
    grab(() => new LockManager([url], { [long]: 1 }))
    grab(() => new LockManager([url], { retryCount: 1e300 }))
    grab(() => new LockManager([`redis://${long}:notaport`]))
    grab(() => new LockManager([`${long}://h:1`]))
    grab(() => new LockManager([url, url + '/' + long]))
    grab(() => new LockManager([{ host: '127.0.0.1', port: 1e300 }]))
    await grabAsync(manager.acquire([long, long], 1_000))
    await grabAsync(manager.acquire([unique()], 1_000, { [long]: 1 }))
    assert.equal(messages.length, 8, messages.join('\n'))
    for (const m of messages) {
      assert.ok(!m.includes('x'.repeat(81)) && !m.includes('0'.repeat(81)), m)
      assert.ok(m.length < 400, `${m.length} characters: ${m}`)
    }
    assert.ok(messages.some((m) => m.includes('(500 characters)')), messages.join('\n'))
  })

  it('left no key on Redis', async () => {
    // Only the lock taken in before() exists.
    assert.equal(await cluster.cmd(0, 'DBSIZE'), 1)
  })
})
