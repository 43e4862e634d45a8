// Chaos worker (Node): contends for one resource through the ironlock npm package. Same CHAOS_*
// environment and same JSON log lines as worker.py (see run.py). Times are CLOCK_MONOTONIC
// seconds (process.hrtime is CLOCK_MONOTONIC on Linux), comparable with Python and C workers.
// With CHAOS_RW=1 it takes the read or the write side of manager.rwLock(resource) instead, as
// worker.py does; with CHAOS_ELECT=1 it is a candidate of a leader election (elect(), as
// worker.py's).
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
// The read-write referee (resp.py's RW_ENTER): the conflicting holders the entrant found.
const RW_ENTER =
  "if ARGV[1] == 'write' then " +
  "local w = redis.call('INCR', KEYS[1]) " +
  "return w - 1 + tonumber(redis.call('GET', KEYS[2]) or '0') end " +
  "redis.call('INCRBY', KEYS[2], 1) " +
  "return tonumber(redis.call('GET', KEYS[1]) or '0')"

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

const settings = {
  retryCount: 3,
  retryDelay: 50,
  nodeTimeout: Number(env.CHAOS_NODE_TIMEOUT_MS),
  maxTtl: Number(env.CHAOS_MAX_TTL_MS),
  restartQuarantine: env.CHAOS_QUARANTINE === '1',
  reseat: (env.CHAOS_RESEAT ?? '1') === '1',
  fair: env.CHAOS_FAIR === '1' // every acquire waits in line (SPEC §10)
}
const nodes = env.CHAOS_NODES.split(' ')
const manager = new LockManager(nodes, settings)
// The negative control: reads through a manager of only the first k nodes (a minority).
const minority = Number(env.CHAOS_RW_READ_NODES ?? 0)
const readers = minority > 0 ? new LockManager(nodes.slice(0, minority), settings) : manager
const keep = env.CHAOS_KEEP === '1' // long holds under auto-extension
// The read or the write side of a read-write lock: 1 in CHAOS_RW_WRITES writes, then a pause.
const rw = env.CHAOS_RW === '1' ? manager.rwLock(resource) : null
const rwReads = env.CHAOS_RW === '1' ? readers.rwLock(resource) : null
const writes1In = Number(env.CHAOS_RW_WRITES ?? 4)
const writePause = Number(env.CHAOS_RW_PAUSE_MS ?? 0)
const life = Number(env.CHAOS_INCARNATION ?? 0) // restarts of this worker after a death
let seed = (Number(env.CHAOS_SEED ?? 7) * 1000003 + wid * 1009 + life) >>> 0
const random = () => { // mulberry32
  seed = (seed + 0x6D2B79F5) >>> 0
  let t = seed
  t = Math.imul(t ^ (t >>> 15), t | 1)
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}
const writersKey = env.CHAOS_COUNTER_KEY + ':writers'
const readersKey = env.CHAOS_COUNTER_KEY + ':readers'
const referee = new Referee(Number(env.CHAOS_REFEREE_PORT))
const errors = {}
let n = 0

// A candidate (see worker.py's elect): campaigns again and again, leads for a random 50 ms to
// CHAOS_HOLD_MS checking every 20 ms that it still leads, then resigns or (1 in 10, and at the
// CHAOS_DIE_AT-th leadership of its first life) kills itself with SIGKILL while leading (the
// orchestrator starts it again). An observer logs every change
// of leader it sees, in order. Terms are bigints: written as bare JSON integers.
async function elect () {
  const election = manager.election(resource)
  const dieAt = life === 0 ? Number(env.CHAOS_DIE_AT ?? 0) : 0
  const put = (rec, term) => {
    rec.worker = wid
    rec.lang = 'node'
    rec.life = life
    appendFileSync(logPath, JSON.stringify(rec).replace('"@@TERM@@"', String(term)) + '\n')
  }
  const stop = new AbortController()
  const watching = (async () => {
    try {
      for await (const l of election.observe({ signal: stop.signal })) {
        put({ observed: l === null ? null : { term: '@@TERM@@', value: l.value }, at: mono() }, l?.term)
      }
    } catch (e) {
      put({ observer_error: e.code ?? e.name, at: mono() })
    }
  })()
  while (mono() < end) {
    const left = end - mono()
    const value = `w${wid}/${life}/${n}`
    const invoke = mono()
    let me
    try {
      me = await election.campaign(value, ttl, { wait: Math.max(10, Math.round(Math.min(wait, left) * 1000)) })
    } catch (e) {
      if (!(e instanceof IronlockError)) throw e
      errors[e.code ?? e.name] = (errors[e.code ?? e.name] ?? 0) + 1
      await sleep(10)
      continue
    }
    const enter = mono()
    let deadline = enter + me.validityMs / 1000
    n++
    const rec = { term: '@@TERM@@', token: me.token, value: me.value, invoke, enter, deadline, ending: (n === dieAt || random() < 0.1) && mono() < end ? 'die' : 'resign' }
    rec.referee = await referee.command('INCR', env.CHAOS_COUNTER_KEY)
    rec.fenced_write = await referee.command('EVAL', FENCED_WRITE, 1, env.CHAOS_FENCE_KEY, String(me.term))
    const until = enter + 0.05 + random() * (hold - 0.05)
    while (mono() < until) {
      const rem = me.validityMs / 1000
      if (!me.isLeader()) {
        rec.lost = true
        break
      }
      deadline = mono() + rem
      await sleep(Math.max(0, Math.min(0.02, until - mono())) * 1000)
    }
    rec.deadline = deadline
    await referee.command('DECR', env.CHAOS_COUNTER_KEY)
    rec.leave = mono()
    if (rec.ending === 'die') {
      put(rec, me.term)
      process.kill(process.pid, 'SIGKILL') // leading, unresigned: the orchestrator restarts us
    }
    rec.resigned = (await me.resign()).held
    put(rec, me.term)
  }
  stop.abort()
  await watching
  put({ summary: true, acquired: n, errors })
}

if (env.CHAOS_ELECT === '1') {
  await elect()
  referee.close()
  if (readers !== manager) await readers.close()
  await manager.close()
  process.exit(0)
}

while (mono() < end) {
  const left = end - mono()
  const invoke = mono() // the history's invoke (tests/history)
  let lock
  const side = rw ? (Math.floor(random() * writes1In) === 0 ? 'write' : 'read') : null
  try {
    const how = { fencing: true, wait: Math.max(10, Math.round(Math.min(wait, left) * 1000)) }
    if (side === 'write') lock = await rw.write(ttl, how)
    else if (side === 'read') lock = await rwReads.read(ttl, how)
    else lock = await manager.acquire([resource], ttl, how)
  } catch (e) {
    if (!(e instanceof IronlockError)) throw e
    errors[e.code ?? e.name] = (errors[e.code ?? e.name] ?? 0) + 1
    const fail = { worker: wid, lang: 'node', fail: e.code ?? e.name, invoke, at: mono() }
    if (side) fail.access = side
    appendFileSync(logPath, JSON.stringify(fail) + '\n')
    await sleep(10)
    continue
  }
  const enter = mono()
  let deadline = enter + lock.validityMs / 1000
  const keeper = keep ? lock.keepAlive() : null
  n++
  const rec = { worker: wid, lang: 'node', token: lock.value, fence: lock.fence === null ? null : '@@FENCE@@', invoke, enter, deadline }
  if (rw) {
    rec.access = lock.access // as the binding reports it
    rec.asked = side
  }
  if (rw && deadline - enter > margin) {
    // A write must see neither another writer nor a reader, a read no writer.
    rec.referee = await referee.command('EVAL', RW_ENTER, 2, writersKey, readersKey, side)
    await sleep(Math.max(0, Math.min(hold, deadline - margin - mono())) * 1000)
    if (side === 'write') {
      rec.fenced_write = await referee.command('EVAL', FENCED_WRITE, 1, env.CHAOS_FENCE_KEY, String(lock.fence ?? 0))
      await referee.command('DECR', writersKey)
    } else {
      await referee.command('DECRBY', readersKey, 1)
    }
  } else if (rw) {
    rec.skipped = true
  } else if (deadline - enter > margin) {
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
  if (side === 'write' && writePause) await sleep(writePause) // let the readers in
}
appendFileSync(logPath, JSON.stringify({ worker: wid, lang: 'node', summary: true, acquired: n, errors }) + '\n')
referee.close()
if (readers !== manager) await readers.close()
await manager.close()
