// Fair (FIFO) locks (SPEC §10) from Node: grants in queue order, a head killed with SIGKILL in
// another process holds the line up for no longer than queueTimeout, AbortSignal and a deadline
// leave no entry, `using` takes `fair`, and bad input names the argument.

import { before, after, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'

import { LockManager, LockContendedError, InvalidArgumentError } from '../lib/index.mjs'
import { startCluster, TEST_SETTINGS, unique } from './harness.mjs'

const SETTINGS = { ...TEST_SETTINGS, retryDelay: 50, retryJitter: 10 }
const INDEX = fileURLToPath(new URL('../lib/index.js', import.meta.url))

describe('fair locks', () => {
  let cluster
  before(async () => {
    cluster = await startCluster(3)
  })
  after(async () => {
    await cluster.quit()
  })

  async function queued(name) {
    const n = await Promise.all(cluster.urls.map((_, i) => cluster.cmd(i, 'ZCARD', `${name}{${name}}:ironlock:queue`)))
    return n
  }
  async function waitQueued(name, n) {
    for (let i = 0; i < 500; i++) {
      if ((await queued(name)).every((c) => c === n)) return
      await sleep(10)
    }
    assert.fail(`${n} waiters never in line: ${await queued(name)}`)
  }

  it('serves eight waiters in the order they queued, each with its own manager', async () => {
    const name = unique()
    const holderM = await LockManager.connect(cluster.urls, SETTINGS)
    const managers = []
    try {
      const holder = await holderM.acquire([name], 10000)
      const order = []
      const done = []
      for (let i = 0; i < 8; i++) {
        const m = await LockManager.connect(cluster.urls, SETTINGS)
        managers.push(m)
        done.push(
          m.using([name], 5000, { wait: 20000, fair: true }, async () => {
            order.push(i)
            await sleep(10)
          }),
        )
        await waitQueued(name, i + 1)
      }
      await holder.release()
      await Promise.all(done)
      assert.deepEqual(order, [0, 1, 2, 3, 4, 5, 6, 7])
      await waitQueued(name, 0)
    } finally {
      await Promise.all([holderM, ...managers].map((m) => m.close()))
    }
  })

  it('a head killed with SIGKILL delays the queue by at most queueTimeout', async () => {
    const name = unique()
    const queueTimeout = 500
    const m = await LockManager.connect(cluster.urls, { ...SETTINGS, queueTimeout })
    const head = spawn(process.execPath, [
      '-e',
      `const { LockManager } = require(${JSON.stringify(INDEX)});
       LockManager.connect(${JSON.stringify(cluster.urls)}, { restartQuarantine: false, retryDelay: 50 })
         .then((m) => m.acquire([${JSON.stringify(name)}], 5000, { wait: 60000, fair: true }))
         .then(() => console.log('acquired'))`,
    ])
    let out = ''
    head.stdout.on('data', (d) => (out += d))
    try {
      const holder = await m.acquire([name], 10000)
      await waitQueued(name, 1)
      const second = m.acquire([name], 5000, { wait: 20000, fair: true }).then((l) => [Date.now(), l])
      await waitQueued(name, 2)
      head.kill('SIGKILL')
      const killed = Date.now()
      await holder.release()
      const [at, lock] = await second
      const delay = at - killed
      assert.ok(delay < queueTimeout + 1000, `the dead head held the queue for ${delay} ms`)
      await lock.release()
      assert.equal(out, '')
      await waitQueued(name, 0)
    } finally {
      head.kill('SIGKILL')
      await m.close()
    }
  })

  it('a waiter that gives up or is aborted leaves no entry; bad input names fair', async () => {
    const name = unique()
    const m = await LockManager.connect(cluster.urls, { ...SETTINGS, fair: true })
    try {
      const holder = await m.acquire([name], 10000)
      const e = await m.acquire([name], 1000, { wait: 200 }).catch((x) => x)
      assert.ok(e instanceof LockContendedError, String(e))
      assert.deepEqual(await queued(name), [0, 0, 0])
      const ac = new AbortController()
      const aborted = m.acquire([name], 1000, { wait: 20000, signal: ac.signal }).catch((x) => x)
      await waitQueued(name, 1)
      ac.abort(new Error('stop'))
      assert.equal((await aborted).message, 'stop')
      await waitQueued(name, 0)
      const bad = await m.acquire([name], 1000, { fair: 'yes' }).catch((x) => x)
      assert.ok(bad instanceof InvalidArgumentError, String(bad))
      assert.match(bad.message, /options\.fair: expected a boolean/)
      const badSetting = await LockManager.connect(cluster.urls, { queueTimeout: 0 }).catch((x) => x)
      assert.ok(badSetting instanceof InvalidArgumentError, String(badSetting))
      assert.match(badSetting.message, /queue_?[tT]imeout/)
      await holder.release()
      const sem = await m.semaphore(name, 2).acquire(5000, { fair: true })
      await sem.release()
    } finally {
      await m.close()
    }
  })
})
