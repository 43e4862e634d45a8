// Node benchmark driver (same command line and JSON line as bench/rust and bench/py).
//
// node driver.mjs --client ironlock|redlock|redlock-io5|sesame|semaphore|universal
//                 --workload a|b|c|d|e --urls U1,U2,..
//                 [--cycles N] [--concurrency C] [--prefix P] [--time-limit SECS]
//                 [--keepalive-s D --ttl-ms MS]
//
// (e) with --keepalive-s D (ironlock only): held-lock scale — N locks of ttl --ttl-ms, each kept
// alive by the core's auto-extension (`lock.keepAlive()`) from its grant, held D seconds.
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
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'

const TTL = 10_000
const HOLD_TTL = 60_000 // the longest ttl ironlock allows by default (maxTtl)

function parseArgs() {
  const a = { cycles: 1000, concurrency: 1, prefix: `bench:${process.pid}`, timeLimit: 30, holdMs: 0 }
  a.keepaliveS = 0
  a.ttlMs = 3000
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
    else if (k === '--keepalive-s') a.keepaliveS = Number(v) // (e): hold under auto-extension
    else if (k === '--ttl-ms') a.ttlMs = Number(v) // (e) with --keepalive-s: the locks' ttl
    else fail(`unknown argument ${k}`)
  }
  if (!a.client || !a.workload || !a.urls) fail('--client, --workload and --urls are required')
  if (a.keepaliveS && (a.workload !== 'e' || a.client !== 'ironlock')) {
    fail('--keepalive-s: workload e with the ironlock client only')
  }
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
      manager: m,
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

const run = promisify(execFile)

// user+system CPU seconds of the redis-server nodes at `urls` (INFO cpu through redis-cli, as
// bench.py reads it), or null when a node did not answer.
async function serverCpuS(urls) {
  let total = 0
  for (const u of urls) {
    let out
    try {
      out = (await run('redis-cli', ['-u', u, 'INFO', 'cpu'])).stdout
    } catch {
      return null
    }
    const field = (name) => {
      const m = out.match(new RegExp(`^${name}:([0-9.]+)`, 'm'))
      return m ? Number(m[1]) : null
    }
    const [user, sys] = [field('used_cpu_user'), field('used_cpu_sys')]
    if (user === null || sys === null) return null
    total += user + sys
  }
  return total
}

// Keys matching `pattern` over the nodes (redis-cli --scan), or null when a node did not answer.
async function keysMatching(urls, pattern) {
  let n = 0
  for (const u of urls) {
    try {
      const { stdout } = await run('redis-cli', ['-u', u, '--scan', '--pattern', pattern], { maxBuffer: 1 << 30 })
      n += stdout.split('\n').filter((l) => l).length
    } catch {
      return null
    }
  }
  return n
}

// (e) with --keepalive-s: held-lock scale. `cycles` locks `<prefix>:<i>` of ttl --ttl-ms are
// acquired `concurrency` at a time, each put under the core's auto-extension (`keepAlive()`) as
// soon as it is granted; then all are held D seconds (the hold phase: the only one whose client
// CPU, server CPU and extensions are measured), checked (lost, validity) and released, and the
// nodes are checked for leftover keys. Extensions are the manager's `stats().extensions`.
async function runKeepAlive(client, args, deadline) {
  const m = client.manager
  const rssBefore = currentRssKb()
  const out = { ok: 0, failed: 0, lat: [], error: undefined }
  const held = []
  let next = 0
  const c0 = cpuUs()
  const t0 = performance.now()
  const worker = async () => {
    for (;;) {
      const i = next++
      if (i >= args.cycles || performance.now() >= deadline) return
      const t = performance.now()
      try {
        const lock = await m.acquire([`${args.prefix}:${i}`], args.ttlMs)
        held.push({ lock, keeper: lock.keepAlive() })
        out.lat.push((performance.now() - t) * 1000)
      } catch (e) {
        out.failed++
        out.error ??= `${e.name}: ${e.message}`
      }
    }
  }
  await Promise.all(Array.from({ length: args.concurrency }, worker))
  out.ok = held.length
  const acquireS = (performance.now() - t0) / 1000
  const acquireCpu = cpuUs() - c0
  const rssHeld = currentRssKb()

  // The hold phase.
  const srv0 = await serverCpuS(args.urls)
  const st0 = m.stats()
  const h0 = cpuUs()
  const ht = performance.now()
  await sleep(args.keepaliveS * 1000)
  const h1 = cpuUs()
  const holdS = (performance.now() - ht) / 1000
  const st1 = m.stats()
  const srv1 = await serverCpuS(args.urls)

  // Lost: isLost(), or no longer valid, or the release no longer found it held on a quorum (more
  // than N - Q nodes answered that the token was gone). A release that found fewer than a quorum
  // holding it only because nodes did not answer in time (timeouts, errors) is unconfirmed, not
  // lost: the key check below sees its keys go.
  const bad = new Uint8Array(held.length)
  let lostSignal = 0
  let invalid = 0
  held.forEach(({ lock }, i) => {
    if (lock.isLost()) {
      lostSignal++
      bad[i] = 1
    } else if (!lock.isValid()) {
      invalid++
      bad[i] = 1
    }
  })
  let notHeld = 0
  let unconfirmed = 0
  let firstUnconfirmed = null
  let r = 0
  const tr = performance.now()
  const releaser = async () => {
    for (;;) {
      const i = r++
      if (i >= held.length) return
      let against = 0
      let why
      try {
        const res = await held[i].lock.release()
        if (res.held) continue
        against = res.report.filter((v) => v.vote === 'against').length
        why = res.report.map((v) => `${v.url}=${v.vote}${v.error ? ` (${v.error})` : ''}`).join('; ')
      } catch (e) {
        why = `${e.name}: ${e.message}` // recorded: the key check decides
      }
      if (against > args.urls.length - m.quorum) {
        notHeld++
        bad[i] = 1
      } else {
        unconfirmed++
        firstUnconfirmed ??= why
      }
    }
  }
  await Promise.all(Array.from({ length: args.concurrency }, releaser))
  const releaseS = (performance.now() - tr) / 1000
  const lost = bad.reduce((a, b) => a + b, 0)

  // Nothing left on the nodes: a release returns at a quorum, the other deletes finish within
  // node_timeout; look again for up to 3 s.
  let keysLeft = null
  for (let k = 0; k < 30; k++) {
    keysLeft = await keysMatching(args.urls, `${args.prefix}:*`)
    if (keysLeft === 0) break
    await sleep(100)
  }

  const extensions = st1.extensions - st0.extensions
  const serverS = srv0 !== null && srv1 !== null ? srv1 - srv0 : null
  const round = (x, d) => Number(x.toFixed(d))
  const extra = {
    acquire_s: round(acquireS, 3),
    hold_s: round(holdS, 3),
    ttl_ms: args.ttlMs,
    hold_cpu_pct: round(((h1 - h0) / 1e6 / holdS) * 100, 2),
    extensions,
    extension_failures: st1.extension_failures - st0.extension_failures,
    extensions_per_lock: round(extensions / Math.max(out.ok, 1), 3),
    server_cpu_hold_us: serverS === null ? null : round(serverS * 1e6, 3),
    server_us_per_extension: serverS === null || !extensions ? null : round((serverS * 1e6) / extensions, 3),
    lost,
    lost_signal: lostSignal,
    invalid_at_end: invalid,
    not_held_at_release: notHeld,
    release_unconfirmed: unconfirmed,
    lost_before_hold: st0.lost,
    lost_stat: st1.lost,
    rss_before_kb: rssBefore,
    rss_held_kb: rssHeld,
    bytes_per_lock: round(((rssHeld - rssBefore) * 1024) / Math.max(out.ok, 1), 1),
    release_s: round(releaseS, 3),
    keys_left: keysLeft,
  }
  const failure = []
  if (lost) {
    failure.push(
      `${lost} of ${out.ok} locks lost (lost signal ${lostSignal}, invalid at the end ${invalid}, not held at release ${notHeld})`,
    )
  }
  if (keysLeft === null) failure.push('could not count the keys left on the nodes')
  else if (keysLeft) {
    const e = firstUnconfirmed ? ` (${unconfirmed} releases unconfirmed, e.g. ${firstUnconfirmed})` : ''
    failure.push(`${keysLeft} keys left on the nodes after the release${e}`)
  }
  return { out, acquireS, acquireCpu, extra, failure: failure.join('; ') || null }
}

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
  if (args.keepaliveS) {
    const r = await runKeepAlive(client, args, performance.now() + args.timeLimit * 1000)
    r.out.lat.sort((x, y) => x - y)
    const line = {
      ok: r.out.ok,
      failed: r.out.failed,
      target: args.cycles,
      complete: r.out.ok >= args.cycles,
      seconds: r.acquireS,
      cps: r.out.ok / r.acquireS,
      p50_us: pct(r.out.lat, 0.5),
      p99_us: pct(r.out.lat, 0.99),
      cpu_us_per_cycle: r.out.ok ? r.acquireCpu / r.out.ok : 0,
      ...r.extra,
    }
    const acquireError = r.out.error ? `; first failed acquire: ${r.out.error}` : ''
    const error = r.failure ? r.failure + acquireError : r.out.error
    if (error) line.error = error
    process.stdout.write(`${JSON.stringify(line)}\n`)
    await client.close()
    process.exit(r.failure ? 4 : line.complete ? 0 : 3)
  }
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
