// `LockManager.connect()` waits for a quorum of connected nodes (issue 29, item 6): with every
// node down it rejects at once with ConnectionError naming each node and why, instead of
// resolving and letting the first acquire fail seconds later. Real nodes, killed for real.

import { before, after, describe, it } from 'node:test'
import assert from 'node:assert/strict'

import { LockManager, ConnectionError } from '../lib/index.mjs'
import { startCluster, TEST_SETTINGS, unique } from './harness.mjs'

describe('LockManager.connect()', () => {
  let cluster
  before(async () => {
    cluster = await startCluster(3)
  })
  after(async () => {
    await cluster?.quit()
  })

  it('rejects with ConnectionError naming every node and why when none is up', async () => {
    for (let i = 0; i < 3; i++) await cluster.kill(i)
    try {
      const e = await LockManager.connect(cluster.urls, { ...TEST_SETTINGS, connectTimeout: 1000 }).catch((x) => x)
      assert.ok(e instanceof ConnectionError, String(e))
      assert.equal(e.code, 'CONNECTION')
      assert.match(e.message, /0 of 3 nodes connected, fewer than the quorum of 2/)
      // Each node is named with its own reason: refused at once, not a connection timeout.
      for (let i = 0; i < 3; i++) {
        assert.match(e.message, new RegExp(`nodes\\[${i}\\] redis://127\\.0\\.0\\.1:\\d+: [^;]*refused`, 'i'))
      }
      assert.doesNotMatch(e.message, /timed out|within connect_timeout/i)
    } finally {
      for (let i = 0; i < 3; i++) await cluster.start(i)
    }
  })

  it('rejects with one node of three up, and starts with two of three', async () => {
    await cluster.kill(1)
    await cluster.kill(2)
    try {
      const e = await LockManager.connect(cluster.urls, TEST_SETTINGS).catch((x) => x)
      assert.ok(e instanceof ConnectionError, String(e))
      assert.match(e.message, /1 of 3 nodes connected, fewer than the quorum of 2 \(nodes\[1\] [^;]+; nodes\[2\] /)
      assert.doesNotMatch(e.message, /nodes\[0\]/)
      await cluster.start(1)
      const m = await LockManager.connect(cluster.urls, { ...TEST_SETTINGS, retryCount: 0 })
      try {
        const lock = await m.acquire([unique('two-of-three')], 5_000)
        await lock.release()
      } finally {
        await m.close()
      }
    } finally {
      // Node 1 may be up again already ("node 1 is running").
      await cluster.start(1).catch(() => {})
      await cluster.start(2)
    }
  })

  it('does not wait with new LockManager(): it starts, and the acquire says what is down', async () => {
    for (let i = 0; i < 3; i++) await cluster.kill(i)
    try {
      const m = new LockManager(cluster.urls, { ...TEST_SETTINGS, retryCount: 0 })
      try {
        await m.ready()
        const e = await m.acquire([unique('lazy')], 2_000).catch((x) => x)
        assert.equal(e.code, 'UNAVAILABLE', String(e))
      } finally {
        await m.close()
      }
    } finally {
      for (let i = 0; i < 3; i++) await cluster.start(i)
    }
  })
})
