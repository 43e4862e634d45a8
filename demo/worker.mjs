// Demo worker (Node): read-modify-write a shared counter under the lock until the deadline.
// Settings come from the environment set by demo/run.py; prints one JSON summary line.
import net from 'node:net'
const { LockManager } = await import(process.env.DEMO_NODE_PACKAGE ?? 'ironlock')

/** A minimal RESP client for the referee node: one request at a time. */
class Referee {
  constructor(port) {
    this.socket = net.connect(port, '127.0.0.1')
    this.buffer = Buffer.alloc(0)
    this.waiting = null
    this.socket.on('data', (chunk) => {
      this.buffer = Buffer.concat([this.buffer, chunk])
      this.drain()
    })
  }
  drain() {
    if (!this.waiting) return
    const end = this.buffer.indexOf('\r\n')
    if (end < 0) return
    const line = this.buffer.subarray(0, end).toString()
    if (line[0] === '$') {
      const n = Number(line.slice(1))
      if (n < 0) return this.finish(end + 2, null)
      if (this.buffer.length < end + 2 + n + 2) return
      return this.finish(end + 2 + n + 2, this.buffer.subarray(end + 2, end + 2 + n).toString())
    }
    if (line[0] === '-') return this.finish(end + 2, new Error(line))
    this.finish(end + 2, line.slice(1))
  }
  finish(consumed, value) {
    this.buffer = this.buffer.subarray(consumed)
    const { resolve, reject } = this.waiting
    this.waiting = null
    value instanceof Error ? reject(value) : resolve(value)
  }
  call(...args) {
    return new Promise((resolve, reject) => {
      this.waiting = { resolve, reject }
      this.socket.write(`*${args.length}\r\n` + args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join(''))
      this.drain()
    })
  }
}

function tally(votes, report) {
  for (const node of report ?? []) {
    const per = (votes[node.url] ??= {})
    per[node.vote] = (per[node.vote] ?? 0) + 1
  }
}

const env = process.env
const manager = new LockManager(env.DEMO_NODES.split(','), {
  maxTtl: 2000, retryDelay: 30, retryJitter: 20, nodeTimeout: 100,
})
const referee = new Referee(Number(env.DEMO_REFEREE_PORT))
const deadline = performance.now() + Number(env.DEMO_SECONDS) * 1000
let acquisitions = 0
const failures = {}
const votes = {}
while (performance.now() < deadline) {
  let lock
  try {
    lock = await manager.acquire([env.DEMO_RESOURCE], 1000, { wait: 2000 })
  } catch (err) {
    failures[err.code] = (failures[err.code] ?? 0) + 1
    tally(votes, err.report)
    continue
  }
  const value = Number((await referee.call('GET', env.DEMO_COUNTER)) ?? 0)
  await referee.call('SET', env.DEMO_COUNTER, String(value + 1))
  acquisitions += 1
  tally(votes, lock.report)
  await lock.release()
}
console.log(JSON.stringify({ name: env.DEMO_NAME, language: 'node', acquisitions, failures, votes }))
referee.socket.destroy()
await manager.close()
