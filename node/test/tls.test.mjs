// Mutual TLS with node:tls / ioredis names, against redis-server with tls-auth-clients yes.

import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'

import { LockManager, QuorumUnavailableError, InvalidArgumentError } from '../lib/index.mjs'
import { HARNESS, startCluster, unique } from './harness.mjs'

async function freePort() {
  const server = createServer()
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address()
  await new Promise((resolve) => server.close(resolve))
  return port
}

describe('mutual TLS', () => {
  it('needs the client certificate, says so, and locks with it', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'ironlock-node-pki-'))
    execFileSync(HARNESS, ['--pki', dir])
    const file = (f) => path.join(dir, f)
    const port = await freePort()
    const cluster = await startCluster(1, [
      '--tls-port', String(port), '--tls-cert-file', file('server.pem'), '--tls-key-file', file('server.key'),
      '--tls-ca-cert-file', file('ca.pem'), '--tls-auth-clients', 'yes',
    ])
    const url = `rediss://127.0.0.1:${port}`
    const base = { restartQuarantine: false, retryCount: 0, connectTimeout: 5000 }
    const ca = readFileSync(file('ca.pem'))
    try {
      const without = await LockManager.connect([url], { ...base, tls: { ca } })
      const e = await without.acquire([unique()], 2000).catch((x) => x)
      assert.ok(e instanceof QuorumUnavailableError, String(e))
      assert.match(e.message, /requires a client certificate/)
      await without.close()
      // settings.tls with Buffers.
      const m = await LockManager.connect([url], {
        ...base,
        tls: { ca, cert: readFileSync(file('client.pem')), key: readFileSync(file('client.key')) },
      })
      const lock = await m.acquire([unique()], 2000, { fencing: true })
      assert.ok(lock.fence > 0n || lock.fence > 0)
      await lock.release()
      await m.close()
      // An ioredis-style node object carrying tls { ca, cert, key } (strings).
      const node = {
        host: '127.0.0.1', port,
        tls: { ca: ca.toString(), cert: readFileSync(file('client.pem'), 'utf8'), key: readFileSync(file('client.key'), 'utf8') },
      }
      const m2 = await LockManager.connect([node], base)
      await (await m2.acquire([unique()], 2000)).release()
      await m2.close()
      assert.throws(() => new LockManager([url], { tls: { cert: 'x' } }), InvalidArgumentError)
    } finally {
      await cluster.quit()
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
