// Quick start for the `ironlock` npm package (run by node/test/example.test.mjs).
// Nodes come from IRONLOCK_NODES (comma-separated URLs), default three local Redis servers.
import { setTimeout as sleep } from 'node:timers/promises'
import { LockManager, LockContendedError } from 'ironlock'

const nodes = (
  process.env.IRONLOCK_NODES ??
  'redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003'
).split(',')

// restartQuarantine keeps a freshly (re)started node out of the quorum for maxTtl + drift + 1 s.
// The demo nodes were just started, so it is off here; keep it on in production unless your
// nodes persist with `appendfsync always`.
const manager = new LockManager(nodes, { restartQuarantine: false, retryCount: 3 })

// 1. Acquire, work, release (in TypeScript or Node >= 24: `await using lock = …`).
const lock = await manager.acquire(['invoice:42'], 10_000, { fencing: true })
try {
  console.log(`locked ${lock.resources} for ${lock.validityMs} ms, fence ${lock.fence}`)

  // 2. Someone else trying the same resource is told who holds it.
  try {
    await manager.acquire(['invoice:42'], 10_000, { retryCount: 0 })
  } catch (err) {
    if (!(err instanceof LockContendedError)) throw err
    console.log(`second acquire: ${err.code}, votes ${err.report.map((n) => n.vote)}`)
  }
} finally {
  await lock.release()
}

// 3. Longer work: `using` extends the lock in the background and aborts `signal` if it is lost.
const total = await manager.using(['report:daily'], 1_000, async (signal) => {
  let sum = 0
  for (let i = 1; i <= 30; i++) {
    await sleep(50, undefined, { signal }) // rejects at once if the lock is lost
    sum += i
  }
  return sum
})
console.log(`using finished with ${total}`)

await manager.close()
