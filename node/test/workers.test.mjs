// The addon in worker threads (test runners such as ava and vitest's threads pool, and worker
// pools such as piscina, load a package once per worker): 20 workers one after another, then 4
// at once, each requiring ironlock, acquiring, extending, releasing, closing its manager and
// ending, while the main thread holds a lock of its own; then a worker that ends without closing
// its manager, and one terminated while its acquire still waits. All of it runs in a child
// process, so that a crash (the second worker used to kill the process with SIGSEGV) shows up as
// its exit status instead of taking the test runner down.
//
// The first worker runs before the main thread loads the addon: the process then loads it on
// that worker's thread, which ends before the next worker starts (the SIGSEGV needed exactly
// that: the allocator took the first loading thread for the process's main thread).
//
// This file is both the test (run by `node --test`) and, with IRONLOCK_WORKERS_CHILD set, the
// child process; the workers run the CommonJS source in WORKER below.

import { spawn } from 'node:child_process'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import path from 'node:path'

const PACKAGE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const SEQUENTIAL = 20
const CONCURRENT = 4

// One worker: `workerData` = { urls, resource, held (the main thread's resource), mode }.
// mode 'full': acquire, extend, release, close, end, after checking that `held` is taken.
// 'first': the same without that check. 'unclosed': acquire and release, then end with the
// manager open. 'waiting': start an acquire of `held` (the main thread holds it) that
// would wait 20 s, report, and let the main thread terminate the worker.
const WORKER = `
const { parentPort, workerData } = require('node:worker_threads')
const { LockManager, LockContendedError } = require(${JSON.stringify(PACKAGE)})
const { urls, resource, held, mode } = workerData
;(async () => {
  const manager = await LockManager.connect(urls, { restartQuarantine: false, retryCount: 0 })
  if (mode === 'waiting') {
    manager.acquire([held], 20000, { wait: 20000 }).catch(() => {})
    parentPort.postMessage({ waiting: true })
    return
  }
  if (mode !== 'first') {
    // The main thread's lock is honoured across threads.
    const contended = await manager.acquire([held], 1000).then(
      () => 'acquired',
      (e) => (e instanceof LockContendedError ? 'contended' : String(e)),
    )
    if (contended !== 'contended') throw new Error('the main thread lock was not honoured: ' + contended)
  }
  const lock = await manager.acquire([resource], 10000)
  if (!lock.isValid()) throw new Error('invalid lock')
  if (mode !== 'unclosed') await lock.extend(10000)
  const released = await lock.release()
  if (!released.held) throw new Error('release: not held')
  if (mode !== 'unclosed') await manager.close()
  parentPort.postMessage({ ok: true, deletedOn: released.deletedOn })
})().catch((e) => parentPort.postMessage({ ok: false, error: String(e && e.stack || e) }))
`

/** The child process: runs the workers and prints one JSON summary line. */
async function child() {
  const { Worker } = await import('node:worker_threads')
  const require = createRequire(import.meta.url)
  const urls = JSON.parse(process.env.IRONLOCK_WORKERS_URLS)
  const prefix = process.env.IRONLOCK_WORKERS_PREFIX
  const held = `${prefix}:main`
  const summary = { sequential: 0, concurrent: 0, unclosed: 0, terminated: 0, failures: [] }

  /** Runs one worker to its end; resolves with the messages it posted and its exit code. */
  function run(resource, mode, onMessage) {
    const worker = new Worker(WORKER, { eval: true, workerData: { urls, resource, held, mode } })
    const messages = []
    return new Promise((resolve, reject) => {
      worker.on('message', (m) => {
        messages.push(m)
        onMessage?.(m, worker)
      })
      worker.on('error', reject)
      worker.on('exit', (code) => resolve({ messages, code }))
    })
  }
  function count(kind, { messages, code }) {
    const ok = messages.length === 1 && messages[0].ok === true && code === 0
    if (ok) summary[kind] += 1
    else summary.failures.push({ kind, code, messages })
  }

  // The first worker loads the addon before the main thread does (see the top of the file);
  // the main thread's lock does not exist yet, so that worker checks nothing about it.
  count('sequential', await run(`${prefix}:seq:0`, 'first'))
  const { LockManager } = require(PACKAGE)
  const manager = await LockManager.connect(urls, { restartQuarantine: false, retryCount: 0 })
  const mainLock = await manager.acquire([held], 60_000)
  for (let i = 1; i < SEQUENTIAL; i++) count('sequential', await run(`${prefix}:seq:${i}`, 'full'))
  const together = []
  for (let i = 0; i < CONCURRENT; i++) together.push(run(`${prefix}:con:${i}`, 'full'))
  for (const r of await Promise.all(together)) count('concurrent', r)

  // Ends with its manager open (the environment's cleanup hook closes it).
  count('unclosed', await run(`${prefix}:unclosed`, 'unclosed'))
  // Terminated while its acquire of the main thread's resource waits.
  const waiting = await run(`${prefix}:waiting`, 'waiting', (m, worker) => {
    if (m.waiting) setTimeout(() => worker.terminate(), 50)
  })
  if (waiting.messages.length === 1 && waiting.messages[0].waiting) summary.terminated += 1
  else summary.failures.push({ kind: 'terminated', ...waiting })

  // The main thread's lock is still valid, and once released nobody takes it: the terminated
  // worker's acquire must have stopped with its environment.
  summary.mainValid = mainLock.isValid()
  await mainLock.extend(60_000)
  summary.mainReleased = (await mainLock.release()).held
  await new Promise((resolve) => setTimeout(resolve, 500))
  const again = await manager.acquire([held], 1000).then(
    (l) => l.release().then(() => 'free'),
    (e) => String(e),
  )
  summary.afterRelease = again
  await manager.close()
  process.stdout.write(`${JSON.stringify(summary)}\n`)
}

async function main() {
  const { describe, it, before, after } = await import('node:test')
  const assert = (await import('node:assert/strict')).default
  const { startCluster, unique } = await import('./harness.mjs')

  describe('worker threads', () => {
    let cluster
    before(async () => {
      cluster = await startCluster(3)
    })
    after(async () => {
      await cluster?.quit()
    })

    it('load, use and unload the addon in 20 successive and 4 concurrent workers', { timeout: 180_000 }, async () => {
      const prefix = unique('workers')
      const env = {
        ...process.env,
        IRONLOCK_WORKERS_CHILD: '1',
        IRONLOCK_WORKERS_URLS: JSON.stringify(cluster.urls),
        IRONLOCK_WORKERS_PREFIX: prefix,
      }
      // Not a test process of the runner: its output is ours to read.
      delete env.NODE_TEST_CONTEXT
      const proc = spawn(process.execPath, [fileURLToPath(import.meta.url)], {
        env,
        stdio: ['ignore', 'pipe', 'pipe'],
      })
      let stdout = ''
      let stderr = ''
      proc.stdout.on('data', (d) => (stdout += d))
      proc.stderr.on('data', (d) => (stderr += d))
      // A child that hangs is killed (and then fails on its signal) rather than holding the runner.
      const killer = setTimeout(() => proc.kill('SIGKILL'), 120_000)
      const [code, signal] = await new Promise((resolve, reject) => {
        proc.on('error', reject)
        proc.on('exit', (c, s) => resolve([c, s]))
      }).finally(() => clearTimeout(killer))
      const context = `exit code ${code}, signal ${signal}\nstdout:\n${stdout}\nstderr:\n${stderr}`
      assert.equal(signal, null, context)
      assert.equal(code, 0, context)
      const summary = JSON.parse(stdout.trim().split('\n').at(-1))
      assert.deepEqual(summary.failures, [], context)
      assert.equal(summary.sequential, SEQUENTIAL, context)
      assert.equal(summary.concurrent, CONCURRENT, context)
      assert.equal(summary.unclosed, 1, context)
      assert.equal(summary.terminated, 1, context)
      assert.equal(summary.mainValid, true, context)
      assert.equal(summary.mainReleased, true, context)
      assert.equal(summary.afterRelease, 'free', context)

      // No key is left on any node (the last deletes of a release may still be in flight when a
      // release returns: poll for up to 200 ms).
      const keys = () => Promise.all(cluster.urls.map((_, i) => cluster.cmd(i, 'KEYS', `${prefix}*`)))
      let left = await keys()
      for (let i = 0; i < 40 && left.some((k) => k.length > 0); i++) {
        await new Promise((resolve) => setTimeout(resolve, 5))
        left = await keys()
      }
      assert.deepEqual(left, cluster.urls.map(() => []))
    })
  })
}

if (process.env.IRONLOCK_WORKERS_CHILD) await child()
else await main()
