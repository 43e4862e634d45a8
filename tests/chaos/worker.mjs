// Chaos worker (Node): contends for one resource through the ironlock npm package. Same CHAOS_*
// environment and same JSON log lines as worker.py (see run.py). Times are CLOCK_MONOTONIC
// seconds (process.hrtime is CLOCK_MONOTONIC on Linux), comparable with Python and C workers.
import { appendFileSync } from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath, pathToFileURL } from 'node:url'

const here = path.dirname(fileURLToPath(import.meta.url))
const pkg = process.env.IRONLOCK_NODE_PKG ?? path.join(here, '..', '..', 'node', 'lib', 'index.mjs')
const { LockManager, IronlockError } = await import(pathToFileURL(pkg).href)

const FENCED_WRITE =
  "local cur = tonumber(redis.call('GET', KEYS[1]) or '0') " +
  "if tonumber(ARGV[1]) > cur then redis.call('SET', KEYS[1], ARGV[1]) return 1 end " +
  'return 0'

const env = process.env
const mono = () => Number(process.hrtime.bigint()) / 1e9

// A minimal RESP client: commands of bulk strings, one integer reply each, in order.
class Referee {
  constructor (port) {
    this.buf = ''
    this.waiters = []
    this.sock = net.connect({ host: '127.0.0.1', port, noDelay: true })
    this.sock.setEncoding('utf8')
    this.sock.on('data', (d) => {
      this.buf += d
      let i
      while ((i = this.buf.indexOf('\r\n')) >= 0) {
        const line = this.buf.slice(0, i)
        this.buf = this.buf.slice(i + 2)
        const w = this.waiters.shift()
        if (line[0] === ':') w.resolve(Number(line.slice(1)))
        else w.reject(new Error(`unexpected referee reply ${line}`))
      }
    })
    this.sock.on('error', (e) => { for (const w of this.waiters.splice(0)) w.reject(e) })
  }

  command (...args) {
    let req = `*${args.length}\r\n`
    for (const a of args) {
      const s = String(a)
      req += `$${Buffer.byteLength(s)}\r\n${s}\r\n`
    }
    return new Promise((resolve, reject) => {
      this.waiters.push({ resolve, reject })
      this.sock.write(req)
    })
  }

  close () { this.sock.end() }
}

const wid = Number(env.CHAOS_WORKER)
const end = Number(env.CHAOS_END_MONO)
const ttl = Number(env.CHAOS_TTL_MS)
const hold = Number(env.CHAOS_HOLD_MS) / 1000
const wait = Number(env.CHAOS_WAIT_MS) / 1000
const margin = Number(env.CHAOS_MARGIN_MS) / 1000
const resource = env.CHAOS_RESOURCE
const logPath = env.CHAOS_LOG

const manager = new LockManager(env.CHAOS_NODES.split(' '), {
  retryCount: 3,
  retryDelay: 50,
  nodeTimeout: Number(env.CHAOS_NODE_TIMEOUT_MS),
  maxTtl: Number(env.CHAOS_MAX_TTL_MS),
  restartQuarantine: env.CHAOS_QUARANTINE === '1',
  reseat: (env.CHAOS_RESEAT ?? '1') === '1',
  fair: env.CHAOS_FAIR === '1' // every acquire waits in line (SPEC §10)
})
const keep = env.CHAOS_KEEP === '1' // long holds under auto-extension
const referee = new Referee(Number(env.CHAOS_REFEREE_PORT))
const errors = {}
let n = 0
while (mono() < end) {
  const left = end - mono()
  const invoke = mono() // the history's invoke (tests/history)
  let lock
  try {
    lock = await manager.acquire([resource], ttl, {
      fencing: true,
      wait: Math.max(10, Math.round(Math.min(wait, left) * 1000))
    })
  } catch (e) {
    if (!(e instanceof IronlockError)) throw e
    errors[e.code ?? e.name] = (errors[e.code ?? e.name] ?? 0) + 1
    appendFileSync(logPath, JSON.stringify({ worker: wid, lang: 'node', fail: e.code ?? e.name, invoke, at: mono() }) + '\n')
    await sleep(10)
    continue
  }
  const enter = mono()
  let deadline = enter + lock.validityMs / 1000
  const keeper = keep ? lock.keepAlive() : null
  n++
  const rec = { worker: wid, lang: 'node', token: lock.value, fence: lock.fence === null ? null : '@@FENCE@@', invoke, enter, deadline }
  if (deadline - enter > margin) {
    rec.referee = await referee.command('INCR', env.CHAOS_COUNTER_KEY)
    if (keeper) {
      // Work until the hold ends or the lock is lost; the deadline is the last validity seen
      // while the lock was neither lost nor about to expire.
      const until = enter + hold
      while (mono() < until) {
        const rem = lock.validityMs / 1000
        if (lock.isLost() || rem <= margin) {
          rec.lost = true
          break
        }
        deadline = mono() + rem
        rec.deadline = deadline
        await sleep(Math.max(0, Math.min(0.02, until - mono())) * 1000)
      }
    } else {
      await sleep(Math.max(0, Math.min(hold, deadline - margin - mono())) * 1000)
    }
    rec.fenced_write = await referee.command('EVAL', FENCED_WRITE, 1, env.CHAOS_FENCE_KEY, String(lock.fence ?? 0))
    await referee.command('DECR', env.CHAOS_COUNTER_KEY)
  } else {
    rec.skipped = true
  }
  rec.leave = mono()
  keeper?.stop()
  try {
    rec.released = (await lock.release()).held
  } catch (e) {
    if (!(e instanceof IronlockError)) throw e
    rec.released = false
    errors[e.code ?? e.name] = (errors[e.code ?? e.name] ?? 0) + 1
  }
  // the fence is a u64 (BigInt): write it as a bare JSON integer
  appendFileSync(logPath, JSON.stringify(rec).replace('"@@FENCE@@"', String(lock.fence)) + '\n')
}
appendFileSync(logPath, JSON.stringify({ worker: wid, lang: 'node', summary: true, acquired: n, errors }) + '\n')
referee.close()
await manager.close()
