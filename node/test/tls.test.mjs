// Mutual TLS with node:tls / ioredis names, against redis-server with tls-auth-clients yes.

import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'

import { LockManager, QuorumUnavailableError, InvalidArgumentError, ConnectionError } from '../lib/index.mjs'
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
      // connect() waits for a quorum: the refused handshake is its error, with what to set.
      const refused = await LockManager.connect([url], { ...base, tls: { ca } }).catch((x) => x)
      assert.ok(refused instanceof ConnectionError, String(refused))
      assert.match(refused.message, /requires a client certificate: set tls\.cert and tls\.key/)
      // A manager that does not wait starts anyway; its acquire says the same.
      const without = new LockManager([url], { ...base, tls: { ca } })
      const e = await without.acquire([unique()], 2000).catch((x) => x)
      assert.ok(e instanceof QuorumUnavailableError, String(e))
      // What to set, in the names a Node caller gives.
      assert.match(e.message, /requires a client certificate: set tls\.cert and tls\.key/)
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

  it('as the least-privilege user, with a server name and a CA per node', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'ironlock-node-pki-'))
    execFileSync(HARNESS, ['--pki', dir])
    const file = (f) => path.join(dir, f)
    const acl = ['--user', 'default', 'on', 'nopass', '~*', '&*', '+@all',
      '--user', 'app', 'on', '>app-Pa55', '~lk:*', '&lk:*', '+@all', '-@dangerous']
    const clusters = []
    const ports = []
    try {
      // Node 0's certificate names only redis-a.ironlock.test; node 1's is signed by another CA.
      for (const served of ['named', 'other-server']) {
        const port = await freePort()
        clusters.push(await startCluster(1, [
          '--tls-port', String(port), '--tls-cert-file', file(`${served}.pem`), '--tls-key-file', file(`${served}.key`),
          '--tls-ca-cert-file', file('ca.pem'), '--tls-auth-clients', 'yes', ...acl,
        ]))
        ports.push(port)
      }
      const urls = ports.map((p) => `rediss://app:app-Pa55@127.0.0.1:${p}`)
      const tls = { ca: readFileSync(file('ca.pem')), cert: readFileSync(file('client.pem')), key: readFileSync(file('client.key')) }
      const base = { restartQuarantine: false, retryCount: 0, connectTimeout: 5000, keyPrefix: 'lk:' }
      // Without per-node settings: each handshake error says what to set, in Node's names.
      const plain = new LockManager(urls, { ...base, tls })
      const e = await plain.acquire([unique()], 2000).catch((x) => x)
      assert.ok(e instanceof QuorumUnavailableError, String(e))
      assert.match(e.message, /does not name this host: connect by a name it holds, or set tls\.servername/)
      assert.match(e.message, /not signed by a trusted CA: set tls\.ca/)
      assert.ok(!e.message.includes('app-Pa55') && !JSON.stringify(e.report).includes('app-Pa55'))
      await plain.close()
      // ioredis-style node objects with their own tls: a server name, another CA.
      const nodes = [
        { host: '127.0.0.1', port: ports[0], username: 'app', password: 'app-Pa55', tls: { servername: 'redis-a.ironlock.test' } },
        { host: '127.0.0.1', port: ports[1], username: 'app', password: 'app-Pa55', tls: { ca: readFileSync(file('other-ca.pem'), 'utf8') } },
      ]
      const m = await LockManager.connect(nodes, { ...base, tls })
      const lock = await m.acquire([unique()], 2000, { fencing: true })
      assert.ok(lock.fence > 0n || lock.fence > 0)
      await lock.release()
      await m.close()
      // The manager-wide server name (settings.tls.servername), for node 0 alone.
      const one = await LockManager.connect(urls.slice(0, 1), { ...base, tls: { ...tls, servername: 'redis-a.ironlock.test' } })
      await (await one.acquire([unique()], 2000)).release()
      await one.close()
      assert.throws(() => new LockManager(urls, { tls: { servername: 42 } }), InvalidArgumentError)
      const bad = await LockManager.connect(urls, { ...base, tls: { servername: 'not a name' } }).catch((x) => x)
      assert.ok(bad instanceof InvalidArgumentError, String(bad))
      assert.match(bad.message, /settings\.tlsServerName: "not a name" is not a DNS name/)
    } finally {
      for (const c of clusters) await c.quit()
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
