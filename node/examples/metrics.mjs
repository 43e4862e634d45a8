// ironlock's stats as Prometheus metrics through prom-client (run by node/test/example.test.mjs).
// Nodes come from IRONLOCK_NODES (comma-separated URLs).
import client from 'prom-client'
import { LockManager } from 'ironlock'

const nodes = (process.env.IRONLOCK_NODES ?? 'redis://127.0.0.1:7001').split(',')
const manager = new LockManager(nodes, { restartQuarantine: process.env.IRONLOCK_QUARANTINE !== 'off' })

// One counter per stats field, read at every scrape; each latency histogram as _sum and _count.
const stats = manager.stats()
for (const name of Object.keys(stats)) {
  const base = name.replace(/_latency$/, '_seconds')
  const fields = typeof stats[name] === 'number'
    ? [[`${name}_total`, (s) => s[name]]]
    : [[`${base}_sum`, (s) => s[name].sum_seconds], [`${base}_count`, (s) => s[name].count]]
  for (const [metric, read] of fields) {
    new client.Counter({
      name: `ironlock_${metric}`,
      help: `ironlock ${metric}`,
      collect() {
        this.reset()
        this.inc(read(manager.stats()))
      },
    })
  }
}

await manager.using(['report:daily'], 10_000, async () => {})
console.log(await client.register.metrics())
await manager.close()
