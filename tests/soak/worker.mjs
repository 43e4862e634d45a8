// Soak worker (Node): manager churn, then lock cycles through one manager while auto-extended
// locks stay held. Driven by run.py; the protocol (SOAK_* environment, JSON lines) is in
// README.md.
import { existsSync, writeSync } from 'node:fs'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath, pathToFileURL } from 'node:url'

const here = path.dirname(fileURLToPath(import.meta.url))
const pkg = process.env.IRONLOCK_NODE_PKG ?? path.join(here, '..', '..', 'node', 'lib', 'index.mjs')
const { LockManager, IronlockError } = await import(pathToFileURL(pkg).href)

function env (name) {
  const v = process.env[name]
  if (v === undefined) {
    process.stderr.write(`soak worker.mjs: ${name} is not set (run tests/soak/run.py)\n`)
    process.exit(2)
  }
  return v
}

// With --expose-gc (run.py passes it) a full collection runs with every progress line and before
// each sample point of the managers phase, so that the RSS run.py samples follows the live
// objects, not how far V8 lets its heap grow first.
const collect = globalThis.gc ?? (() => {})
const emit = (fields) => {
  if (fields.event === 'progress' || fields.event.startsWith('managers_')) collect()
  writeSync(1, JSON.stringify(fields) + '\n')
}
const now = () => Number(process.hrtime.bigint()) / 1e6 // ms, CLOCK_MONOTONIC

const nodes = env('SOAK_NODES').split(',')
const settings = {
  retryCount: 0,
  nodeTimeout: Number(env('SOAK_NODE_TIMEOUT_MS')),
  maxTtl: Number(env('SOAK_MAX_TTL_MS'))
}
const ttl = Number(env('SOAK_TTL_MS'))
const managers = Number(env('SOAK_MANAGERS'))
const managersMarks = new Set(env('SOAK_MANAGERS_MARKS').split(',').map(Number))
const heldCount = Number(env('SOAK_HELD'))
const prefix = env('SOAK_PREFIX')
const control = env('SOAK_CONTROL')
const maxMs = Number(env('SOAK_MAX_SECONDS')) * 1000

/** Waits until the control file `name` appears, or SOAK_MAX_SECONDS have passed. */
async function waitFor (name) {
  const until = now() + maxMs
  while (!existsSync(path.join(control, name)) && now() < until) await sleep(50)
}

// Managers: create, sometimes lock once, close.
let last = now()
let managerErrors = 0
for (let k = 0; k < managers; k++) {
  let m
  try {
    m = await LockManager.connect(nodes, settings)
  } catch (e) {
    if (!(e instanceof IronlockError)) throw e
    managerErrors++
  }
  if (m) {
    if (k % 10 === 0) {
      try {
        await (await m.acquire([`${prefix}:churn`], ttl)).release()
      } catch (e) {
        if (!(e instanceof IronlockError)) throw e
      }
    }
    await m.close()
  }
  if (now() - last >= 500) {
    emit({ event: 'progress', phase: 'managers', done: k + 1 })
    last = now()
  }
  if (managersMarks.has(k + 1)) {
    emit({ event: 'managers_mark', done: k + 1 })
    await waitFor(`mark-${k + 1}`)
  }
}
emit({ event: 'managers_done', done: managers, manager_errors: managerErrors })
await waitFor('go')

// Cycles through one manager while `heldCount` locks stay held under auto-extension.
let manager
try {
  manager = await LockManager.connect(nodes, settings)
} catch (e) {
  process.stderr.write(`soak worker.mjs: ${e.message}\n`)
  process.exit(2)
}
const held = []
for (let i = 0; i < heldCount; i++) {
  const lock = await manager.acquire([`${prefix}:held:${i}`], ttl)
  held.push({ lock, keeper: lock.keepAlive() })
}
// The first time each held lock is seen lost: when (ms into the cycles) and its last report.
const lostReports = new Map()
const noteLost = () => {
  held.forEach(({ lock }, i) => {
    if (!lostReports.has(i) && (lock.isLost() || !lock.isValid())) {
      lostReports.set(i, { lock: i, at_ms: Math.round(now() - started), report: lock.report })
    }
  })
}
const resources = Array.from({ length: 16 }, (_, i) => `${prefix}:cycle:${i}`)
let done = 0
let granted = 0
const failed = {}
const unclear = []
let maxAcquire = 0
let maxRelease = 0
const started = now()
const stop = path.join(control, 'stop')
for (;;) {
  if (done % 64 === 0 && (existsSync(stop) || now() - started >= maxMs)) break
  const resource = resources[done % 16]
  let t = now()
  let lock
  try {
    lock = await manager.acquire([resource], ttl)
  } catch (e) {
    if (!(e instanceof IronlockError)) throw e
    failed[e.code] = (failed[e.code] ?? 0) + 1
    const clear = e.code === 'UNAVAILABLE' && e.message.includes(resource)
    if (!clear && unclear.length < 5) unclear.push(`${e.code}: ${e.message}`)
  }
  maxAcquire = Math.max(maxAcquire, now() - t)
  done++
  if (lock) {
    granted++
    t = now()
    await lock.release()
    maxRelease = Math.max(maxRelease, now() - t)
  }
  if (now() - last >= 500) {
    noteLost()
    const failures = Object.values(failed).reduce((a, b) => a + b, 0)
    emit({ event: 'progress', phase: 'cycles', done, granted, failed: failures })
    last = now()
  }
}
noteLost()
const heldLost = lostReports.size
for (const { lock, keeper } of held) {
  keeper.stop()
  await lock.release()
}
emit({
  event: 'end',
  done,
  granted,
  failed,
  unclear,
  max_acquire_ms: maxAcquire,
  max_release_ms: maxRelease,
  held: heldCount,
  held_lost: heldLost,
  held_lost_reports: [...lostReports.values()]
})
await waitFor('quit')
await manager.close()
