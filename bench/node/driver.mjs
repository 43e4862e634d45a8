// Node benchmark driver (same command line and JSON line as bench/rust and bench/py).
//
// node driver.mjs --client ironlock|redlock|redlock-io5|sesame|semaphore|universal
//                 --workload a|b|c|d|e --urls U1,U2,..
//                 [--cycles N] [--concurrency C] [--prefix P] [--time-limit SECS]
//
// ironlock is loaded from BENCH_IRONLOCK_NODE (a copy of node/ with the release .node); the peers
// (redlock@5.0.0-beta.2, @sesamecare-oss/redlock, redis-semaphore's RedlockMutex,
// redlock-universal's createRedlock, ioredis 6 and ioredis 5 as `ioredis5`) from
// BENCH_PEERS_NODE/node_modules. Every peer runs as its README shows: one ioredis client per node,
// connected and warm, the library's default settings (retries off only in workload (c)).
import { createRequire } from 'node:module'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { readFileSync } from 'node:fs'

const TTL = 10_000
const HOLD_TTL = 60_000 // the longest ttl ironlock allows by default (maxTtl)

function parseArgs() {
  const a = { cycles: 1000, concurrency: 1, prefix: `bench:${process.pid}`, timeLimit: 30, holdMs: 0 }
  const argv = process.argv.slice(2)
  for (let i = 0; i < argv.length; i += 2) {
    const [k, v] = [argv[i], argv[i + 1]]
    if (v === undefined) fail(`${k} needs a value`)
    if (k === '--client') a.client = v
    else if (k === '--workload') a.workload = v
    else if (k === '--urls') a.urls = v.split(',')
    else if (k === '--cycles') a.cycles = Number(v)
    else if (k === '--concurrency') a.concurrency = Number(v)
    else if (k === '--prefix') a.prefix = v
    else if (k === '--time-limit') a.timeLimit = Number(v)
    else if (k === '--hold-ms') a.holdMs = Number(v)
    else if (k === '--fair') a.fair = v === '1' // ironlock: fair (FIFO) acquisition
    else if (k === '--limit') a.limit = Number(v) // permits of a semaphore of this limit
    else fail(`unknown argument ${k}`)
  }
  if (!a.client || !a.workload || !a.urls) fail('--client, --workload and --urls are required')
  return a
}

function fail(msg) {
  process.stderr.write(`node driver: ${msg}\n`)
  process.exit(2)
}

class Refused extends Error {}

async function makeClient(args) {
  const peers = createRequire(path.join(process.env.BENCH_PEERS_NODE, 'node_modules', 'x.js'))
  const contended = args.workload === 'c'
  if (args.client === 'ironlock') {
    const req = createRequire(path.join(process.env.BENCH_IRONLOCK_NODE, 'x.js'))
    const { LockManager } = req('./lib/index.js')
    // Fresh nodes: restartQuarantine off. (c): retry off. Otherwise the library's defaults.
    const settings = { restartQuarantine: false }
    if (contended) settings.retryCount = 0
    const m = await LockManager.connect(args.urls, settings)
    const options = args.fair ? { fair: true } : {}
    return {
      async acquire(key, ttl) {
        try {
          if (args.limit) return await m.semaphore(key, args.limit).acquire(ttl, options)
          return await m.acquire([key], ttl, options)
        } catch (e) {
          if (e.code === 'CONTENDED' || e.code === 'UNAVAILABLE') throw new Refused(e.message)
          throw e
        }
      },
      release: (lock) => lock.release(),
      close: () => m.close(),
      stats: () => m.stats(),
    }
  }
  // `redlock-io5`: node-redlock on ioredis 5 (the major node-redlock's own suite pins), to
  // tell the library's cost from the client's.
  const Redis = peers(args.client === 'redlock-io5' ? 'ioredis5' : 'ioredis')
  const clients = args.urls.map((u) => new Redis(u, { lazyConnect: false }))
  await Promise.all(clients.map((c) => c.ping()))
  const close = async () => {
    await Promise.all(clients.map((c) => c.quit()))
  }
  if (args.client === 'semaphore') {
    // redis-semaphore: one RedlockMutex (or, with --limit, RedlockSemaphore) per key (its
    // README); defaults except the ttl (lockTimeout) and, in (c), one attempt. Auto-refresh
    // stays on as shipped.
    const { RedlockMutex, RedlockSemaphore } = peers('redis-semaphore')
    const opts = (ttl) => (contended ? { lockTimeout: ttl, acquireAttemptsLimit: 1 } : { lockTimeout: ttl })
    return {
      async acquire(key, ttl) {
        const m = args.limit
          ? new RedlockSemaphore(clients, key, args.limit, opts(ttl))
          : new RedlockMutex(clients, key, opts(ttl))
        try {
          await m.acquire()
        } catch (e) {
          throw new Refused(e.message)
        }
        return m
      },
      release: (m) => m.release(),
      close,
    }
  }
  if (args.client === 'universal') {
    // redlock-universal: one createRedlock per key over IoredisAdapters (its README); defaults
    // except the ttl and, in (c), no retries.
    const { createRedlock, IoredisAdapter } = peers('redlock-universal')
    const adapters = clients.map((c) => new IoredisAdapter(c))
    return {
      async acquire(key, ttl) {
        const lock = createRedlock({ adapters, key, ttl, ...(contended ? { retryAttempts: 0 } : {}) })
        let handle
        try {
          handle = await lock.acquire()
        } catch (e) {
          throw new Refused(e.message)
        }
        return { lock, handle }
      },
      release: ({ lock, handle }) => lock.release(handle),
      close,
    }
  }
  const mod = args.client === 'sesame' ? peers('@sesamecare-oss/redlock') : peers('redlock')
  const Redlock = mod.Redlock ?? mod.default ?? mod
  // node-redlock counts retries: 0 = one round. Defaults: 10 retries, 200 ± 100 ms.
  const redlock = new Redlock(clients, contended ? { retryCount: 0 } : {})
  redlock.on?.('error', () => {}) // contention is reported as 'error' events; counted elsewhere
  return {
    async acquire(key, ttl) {
      try {
        return await redlock.acquire([key], ttl)
      } catch (e) {
        throw new Refused(e.message)
      }
    },
    release: (lock) => lock.release(),
    close,
  }
}

function cpuUs() {
  const u = process.cpuUsage()
  return u.user + u.system
}

function currentRssKb() {
  return Number(readFileSync('/proc/self/statm', 'utf8').split(' ')[1]) * 4
}

async function runCycles(client, args, prefix, cycles, deadline, out) {
  let next = 0
  const worker = async () => {
    for (;;) {
      const i = next++
      if (i >= cycles || performance.now() >= deadline) return
      const t0 = performance.now()
      try {
        const lock = await client.acquire(`${prefix}:${i}`, args.workload === 'e' ? HOLD_TTL : TTL)
        if (args.workload === 'e') {
          out.held.push(lock)
          out.ok++
          continue
        }
        await client.release(lock)
        out.ok++
        out.lat.push((performance.now() - t0) * 1000)
      } catch (e) {
        out.failed++
        out.error ??= `${e.name}: ${e.message}`
      }
    }
  }
  await Promise.all(Array.from({ length: args.concurrency }, worker))
}

async function runContended(client, args, deadline, out) {
  let done = 0
  const key = `${args.prefix}:hot`
  const driverPause = args.workload === 'c'
  const worker = async (w) => {
    while (done < args.cycles && performance.now() < deadline) {
      const t0 = performance.now()
      for (;;) {
        try {
          const lock = await client.acquire(key, TTL)
          if (args.holdMs) await sleep(args.holdMs)
          await client.release(lock)
          done++
          out.ok++
          out.perWorker[w]++
          out.lat.push((performance.now() - t0) * 1000)
          break
        } catch (e) {
          if (!(e instanceof Refused)) throw e
          out.failed++
        }
        if (done >= args.cycles || performance.now() >= deadline) return
        if (driverPause) await sleep(Math.random() * 2)
      }
    }
  }
  out.perWorker = Array(args.concurrency).fill(0)
  await Promise.all(Array.from({ length: args.concurrency }, (_, w) => worker(w)))
}

const pct = (s, p) => (s.length ? s[Math.round((s.length - 1) * p)] : 0)

async function main() {
  const args = parseArgs()
  const client = await makeClient(args)
  const newOut = () => ({ ok: 0, failed: 0, lat: [], held: [], error: undefined })
  const warm = newOut()
  await runCycles(
    client,
    { ...args, workload: 'a' },
    `${args.prefix}:warm`,
    Math.max(50, args.concurrency * 4),
    performance.now() + 10_000,
    warm,
  )
  if (warm.ok === 0) fail(`warm-up failed: ${warm.error}`)
  const base = currentRssKb()
  const out = newOut()
  const deadline = performance.now() + args.timeLimit * 1000
  const c0 = cpuUs()
  const t0 = performance.now()
  if (args.workload === 'c' || args.workload === 'd') await runContended(client, args, deadline, out)
  else await runCycles(client, args, args.prefix, args.cycles, deadline, out)
  const secs = (performance.now() - t0) / 1000
  const cpu = cpuUs() - c0
  const line = {
    ok: out.ok,
    failed: out.failed,
    target: args.cycles,
    complete: out.ok >= args.cycles,
    seconds: secs,
    cps: out.ok / secs,
    p50_us: 0,
    p99_us: 0,
    cpu_us_per_cycle: out.ok ? cpu / out.ok : 0,
  }
  out.lat.sort((x, y) => x - y)
  line.p50_us = pct(out.lat, 0.5)
  line.p99_us = pct(out.lat, 0.99)
  if (out.perWorker) {
    // Jain's index (Σx)² / (n·Σx²): 1 when every worker got the same share.
    const sum = out.perWorker.reduce((a, b) => a + b, 0)
    const sq = out.perWorker.reduce((a, b) => a + b * b, 0)
    line.jain = sq ? (sum * sum) / (out.perWorker.length * sq) : 0
    line.per_worker = out.perWorker
    // ironlock: rounds and release wake-ups per grant (as the Rust driver reports them).
    if (client.stats && out.ok) {
      const st = client.stats()
      line.rounds_per_grant = Number((st.rounds / st.granted).toFixed(2))
      line.wakeups_per_grant = Number((st.wakeups / st.granted).toFixed(2))
    }
  }
  if (args.workload === 'e') {
    line.rss_base_kb = base
    line.rss_peak_kb = Math.max(process.resourceUsage().maxRSS, currentRssKb())
    for (let i = 0; i < out.held.length; i += 64) {
      await Promise.allSettled(out.held.slice(i, i + 64).map((l) => client.release(l)))
    }
  }
  if (out.error && args.workload !== 'c' && args.workload !== 'd') line.error = out.error
  process.stdout.write(`${JSON.stringify(line)}\n`)
  await client.close()
  process.exit(line.complete ? 0 : 3)
}

main().catch((e) => fail(e.stack ?? String(e)))
