// Real redis-server nodes for the tests, through the `ironlock-harness` binary (one JSON line
// with the URLs, then one command per line). Closing its stdin kills every node, so a crashed
// test never leaves redis-server behind.

import { spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import path from 'node:path'

const here = path.dirname(fileURLToPath(import.meta.url))
export const REPO = path.resolve(here, '../..')
export const HARNESS =
  process.env.IRONLOCK_HARNESS ?? path.join(REPO, 'target/debug/ironlock-harness')

/** A unique resource name per call (the harness nodes are fresh, but keep tests independent). */
let seq = 0
export function unique(prefix = 'r') {
  seq += 1
  return `${prefix}:${process.pid}:${Date.now()}:${seq}`
}

export class Cluster {
  #child
  #lines = []
  #waiters = []
  #exited = false

  constructor(child) {
    this.#child = child
    const rl = createInterface({ input: child.stdout })
    rl.on('line', (line) => {
      const w = this.#waiters.shift()
      if (w) w.resolve(line)
      else this.#lines.push(line)
    })
    child.on('exit', (code) => {
      this.#exited = true
      for (const w of this.#waiters.splice(0)) w.reject(new Error(`harness exited (${code})`))
    })
  }

  #next(timeoutMs) {
    const line = this.#lines.shift()
    if (line !== undefined) return Promise.resolve(line)
    if (this.#exited) return Promise.reject(new Error('harness exited'))
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('harness did not answer')), timeoutMs)
      this.#waiters.push({
        resolve: (l) => {
          clearTimeout(timer)
          resolve(l)
        },
        reject: (e) => {
          clearTimeout(timer)
          reject(e)
        },
      })
    })
  }

  async init() {
    const info = JSON.parse(await this.#next(30_000))
    this.urls = info.urls
    this.ports = info.ports
    this.sentinelUrl = info.sentinel_url
    this.clusterUrl = info.cluster_url
    return this
  }

  /** With `startSentinelGroup`: the data node the sentinels name as master now. */
  async master() {
    return Number(await this.send('master'))
  }

  /** With `startSentinelGroup`: SENTINEL FAILOVER, until the old master is a replica. */
  async failover() {
    const child = this.#child
    child.stdin.write('failover\n')
    const answer = await this.#next(60_000)
    if (answer.startsWith('error:')) throw new Error(`harness: failover: ${answer}`)
    return Number(answer)
  }

  async send(line) {
    this.#child.stdin.write(`${line}\n`)
    const answer = await this.#next(15_000)
    if (answer.startsWith('error:')) throw new Error(`harness: ${line}: ${answer}`)
    return answer
  }

  /** One Redis command on node `i`; the reply as a JSON value. */
  async cmd(i, ...args) {
    return JSON.parse(await this.send(`cmd ${i} ${args.join(' ')}`))
  }

  kill(i) {
    return this.send(`kill ${i}`)
  }
  start(i) {
    return this.send(`start ${i}`)
  }
  restart(i) {
    return this.send(`restart ${i}`)
  }
  pause(i) {
    return this.send(`pause ${i}`)
  }
  resume(i) {
    return this.send(`resume ${i}`)
  }

  /** Stops every node and waits for the harness to exit. */
  async quit() {
    if (this.#exited) return
    const exited = new Promise((resolve) => this.#child.once('exit', resolve))
    this.#child.stdin.end()
    await exited
  }
}

/** Starts `n` fresh nodes, each with the extra redis-server arguments `extra`. */
export async function startCluster(n, extra = []) {
  const args = ['--nodes', String(n), ...(extra.length ? ['--', ...extra] : [])]
  const child = spawn(HARNESS, args, { stdio: ['pipe', 'pipe', 'inherit'] })
  const spawned = new Promise((resolve, reject) => {
    child.once('spawn', resolve)
    child.once('error', reject)
  })
  await spawned
  return new Cluster(child).init()
}

/** A master with `replicas` replicas under `sentinels` sentinels (`sentinelUrl` names it). */
export async function startSentinelGroup(replicas = 1, sentinels = 3) {
  const child = spawn(HARNESS, ['--sentinel', `${replicas},${sentinels}`], {
    stdio: ['pipe', 'pipe', 'inherit'],
  })
  await new Promise((resolve, reject) => {
    child.once('spawn', resolve)
    child.once('error', reject)
  })
  return new Cluster(child).init()
}

/** A Redis Cluster of `masters` masters with `replicas` replicas each (`clusterUrl` names it). */
export async function startRedisCluster(masters = 3, replicas = 1) {
  const child = spawn(HARNESS, ['--cluster', `${masters},${replicas}`], {
    stdio: ['pipe', 'pipe', 'inherit'],
  })
  await new Promise((resolve, reject) => {
    child.once('spawn', resolve)
    child.once('error', reject)
  })
  return new Cluster(child).init()
}

/** Settings for fresh test nodes (uptime 0 would put them all in restart quarantine). */
export const TEST_SETTINGS = { restartQuarantine: false }
