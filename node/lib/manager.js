'use strict'
// `LockManager`: the core's lock manager behind the native `NativeManager`. It converts
// arguments and calls one native function per operation; every lock rule is the core's.

const { EventEmitter } = require('node:events')
const util = require('node:util')

const native = require('../index.js')
const errors = require('./errors.js')
const args = require('./args.js')
const { resolveNodes, applyLogins } = require('./nodes.js')
const { complete, start, startCancellable, abortReason } = require('./calls.js')
const { Lock, runUsing, createLock } = require('./lock.js')
const { Election } = require('./election.js')

const { fromNative } = errors
const kNative = Symbol('ironlock.native')
// `{urls, nodes, settings, natives}` per manager: the URLs and node objects may carry passwords,
// so they live in a WeakMap, which `util.inspect(…, { showHidden: true })` does not print.
const STATE = new WeakMap()
const kManager = Symbol('ironlock.manager')
/** Internal hooks shared with `Redlock` (lib/redlock.js). */
const internal = {
  /** `{urls, nodes, settings, natives}` of a manager. */
  state: (manager) => STATE.get(manager),
  /** A native manager over the same nodes with `settings` (throws InvalidArgumentError). */
  open(urls, settings) {
    try {
      return new native.NativeManager(urls, settings, complete)
    } catch (e) {
      throw fromNative(e)
    }
  },
  /** Acquires through native manager `n`: `acquire` below. */
  acquire: (...a) => acquire(...a),
  /** Called with every report of an operation on this manager's locks (Redlock's events). */
  observe: Symbol('ironlock.observe'),
}

/**
 * The acquire of `manager` through native manager `n` (the manager's own, or a Redlock variant).
 * `options`: the checked acquire options; an empty object is passed on as none (the native layer
 * then reads no property). With `limit`: one permit of the counting semaphore `resources[0]`;
 * with `access` (`'read'` or `'write'`): that side of the read-write lock `resources[0]`.
 */
function acquire(manager, n, resources, durationMs, options, signal, limit, access) {
  const state = STATE.get(manager)
  const voters = { nodes: state.nodes, resources: resources.length }
  const observe = manager[internal.observe]
  if (options !== undefined && isEmpty(options)) options = undefined
  const fail = (e) => {
    const err = fromNative(e, voters)
    observe?.(err.report, voters)
    return err
  }
  const ok = (v) => {
    // What `attempts` and `observe` need: the caller's node objects and the voters.
    const lock = createLock(v, { manager, nodes: state.nodes, observe, voters })
    if (observe) observe(lock.report, voters)
    return lock
  }
  const call = (id, token) =>
    limit !== undefined
      ? n.acquirePermit(id, resources[0], limit, durationMs, options, token)
      : access !== undefined
        ? n.acquireRw(id, resources[0], access, durationMs, options, token)
        : resources.length === 1
          ? n.acquireOne(id, resources[0], durationMs, options, token)
          : n.acquire(id, resources, durationMs, options, token)
  if (!signal) return start((id) => call(id), ok, fail)
  return startCancellable(signal, call, ok, fail)
}

function isEmpty(o) {
  for (const _ in o) return false
  return true
}

/** A counting semaphore of a manager (`manager.semaphore(resource, limit)`). */
class Semaphore {
  constructor(manager, resource, limit) {
    /** The resource name. */
    this.resource = resource
    /** How many permits may be held at once. */
    this.limit = limit
    Object.defineProperty(this, kManager, { value: manager })
  }

  /**
   * Acquires one permit for `durationMs` (options as `LockManager#acquire`: `wait`,
   * `retryCount`, `fencing`, `signal`).
   */
  acquire(durationMs, options) {
    try {
      args.ttl('durationMs', durationMs)
      const manager = this[kManager]
      const { options: o, signal } =
        options === undefined || options === null ? {} : args.acquireOptions(options)
      return acquire(manager, manager[kNative], [this.resource], durationMs, o, signal, this.limit)
    } catch (e) {
      return Promise.reject(e)
    }
  }
}

/** A read-write lock of a manager (`manager.rwLock(resource)`). */
class RwLock {
  constructor(manager, resource) {
    /** The resource name. */
    this.resource = resource
    Object.defineProperty(this, kManager, { value: manager })
  }

  /**
   * Acquires the read (shared) side for `durationMs` (options as `LockManager#acquire`: `wait`,
   * `retryCount`, `fencing`, `fair`, `signal`; `minHold` is refused).
   */
  read(durationMs, options) {
    return this.#acquire('read', durationMs, options)
  }

  /**
   * Acquires the write (exclusive) side for `durationMs` (options as `read`). While it waits,
   * new readers are refused.
   */
  write(durationMs, options) {
    return this.#acquire('write', durationMs, options)
  }

  #acquire(access, durationMs, options) {
    try {
      args.ttl('durationMs', durationMs)
      const manager = this[kManager]
      const { options: o, signal } =
        options === undefined || options === null ? {} : args.acquireOptions(options)
      return acquire(manager, manager[kNative], [this.resource], durationMs, o, signal, undefined, access)
    } catch (e) {
      return Promise.reject(e)
    }
  }
}

/**
 * Takes Redlock locks over N independent Redis masters.
 * `nodes`: URLs (`redis://[user:password@]host:port[/db]`, `rediss://`, `unix://`), one
 * comma-separated string of them, ioredis / node-redis clients or their options objects (their
 * settings are read; ironlock opens its own connections; ioredis's Sentinel options
 * `{sentinels, name, …}` or a Sentinel-configured client is one Sentinel-managed voter,
 * `{cluster: [{host, port}, …], …}` or an ioredis `Cluster` one Redis Cluster voter), or nothing
 * (`IRONLOCK_NODES`, then `REDIS_URL`). `settings`: the manager settings in camelCase (`retryCount`, `maxTtl`,
 * `restartQuarantine`, …), durations in integer milliseconds.
 */
class LockManager extends EventEmitter {
  constructor(nodes, settings) {
    super()
    // Settings first: an unknown name (`masters`, another library's word for the nodes) is
    // named as such, not reported as a missing node list.
    const s = args.settings(settings)
    const { urls, nodes: given, nodeTls, keyPrefix, logins } = resolveNodes(nodes)
    // A Sentinel node's login at its sentinels is the manager's (one per manager).
    applyLogins(s, logins)
    // TLS options a node object carries are that node's own (over settings.tls).
    if (nodeTls?.length) s.nodeTls = nodeTls
    // The key prefix the client objects agree on, unless given explicitly.
    if (keyPrefix !== undefined && s.keyPrefix === undefined) s.keyPrefix = keyPrefix
    const n = internal.open(urls, s)
    Object.defineProperty(this, kNative, { value: n })
    STATE.set(this, { urls, nodes: given.some((x) => x !== null) ? given : undefined, settings: s, natives: [n] })
  }

  /**
   * Creates a manager and waits until a quorum of its nodes is connected. Rejects with
   * ConnectionError, naming each node that is not connected and why, when fewer than a quorum
   * are once every node's first connection attempt has ended (the manager is closed then). A
   * node that is down while a quorum is up votes "error" until a background reconnection
   * succeeds. `new LockManager(…)` does not wait: it starts whatever is reachable.
   */
  static async connect(nodes, settings) {
    const manager = new this(nodes, settings)
    try {
      await manager[kNative].ready(true)
    } catch (e) {
      await manager.close().catch(() => {})
      throw fromNative(e)
    }
    return manager
  }

  /** Resolves once the manager has started (see `connect`). */
  async ready() {
    try {
      await this[kNative].ready()
    } catch (e) {
      throw fromNative(e)
    }
  }

  /**
   * Acquires every resource (all or none) for `durationMs`.
   * Options: `wait` (ms to keep retrying), `retryCount` (0 = one round, -1 = until acquired),
   * `fencing`, `signal` (an AbortSignal that cancels a waiting acquire; it then rejects with
   * `signal.reason`).
   */
  acquire(resources, durationMs, options) {
    // Not `async`: one Promise per call; every failure, bad arguments included, still rejects.
    try {
      args.resources('resources', resources)
      args.ttl('durationMs', durationMs)
      if (options === undefined || options === null) {
        return acquire(this, this[kNative], resources, durationMs)
      }
      const { options: o, signal } = args.acquireOptions(options)
      return acquire(this, this[kNative], resources, durationMs, o, signal)
    } catch (e) {
      return Promise.reject(e)
    }
  }

  /**
   * The counting semaphore `resource` with `limit` permits: at most `limit`
   * holders at once. `semaphore.acquire(durationMs, options)` resolves to a Lock (a permit:
   * extend, release, finish, keepAlive, fence, report) or rejects with LockContendedError when
   * every permit stays held. A permit needs floor(limit × N / (limit + 1)) + 1 admitting nodes.
   */
  semaphore(resource, limit) {
    args.resource('resource', resource)
    if (!Number.isInteger(limit) || limit < 0 || limit > 0xffffffff) {
      throw errors.invalid(`limit: expected an integer between 1 and 10000, got ${args.describe(limit)}`)
    }
    return new Semaphore(this, resource, limit)
  }

  /**
   * The read-write lock `resource`: `rw.read(durationMs, options)` is shared with other readers,
   * `rw.write(durationMs, options)` excludes readers and other writers, and a plain lock of the
   * same name excludes both. A writer that waits holds back new readers. Each resolves to a Lock
   * (`lock.access` is `'read'` or `'write'`) or rejects with LockContendedError.
   */
  rwLock(resource) {
    args.resource('resource', resource)
    return new RwLock(this, resource)
  }

  /**
   * The leader election `name`: `election.campaign(value, durationMs, options)` waits in line
   * until this candidate leads (candidates lead in the order they queued), `election.leader()`
   * reads who leads, `election.observe()` follows every change of leader. Its key is the lock key
   * of `name` (a plain lock of that name excludes every candidate). Throws InvalidArgumentError
   * at once for a bad name.
   */
  election(name) {
    args.resource('name', name)
    let n
    try {
      n = this[kNative].election(name)
    } catch (e) {
      throw fromNative(e)
    }
    return new Election(n, { manager: this, voters: { nodes: STATE.get(this).nodes, resources: 1 } })
  }

  /** Releases `lock` (node-redlock's `redlock.release(lock)`). */
  async release(lock) {
    if (!(lock instanceof Lock)) throw errors.invalid('lock: expected a Lock')
    return lock.release()
  }

  /** Extends `lock` to `durationMs` from now; resolves to the lock. */
  async extend(lock, durationMs) {
    if (!(lock instanceof Lock)) throw errors.invalid('lock: expected a Lock')
    return lock.extend(durationMs)
  }

  /**
   * Acquires, runs `routine(signal, lock)` while the lock is extended automatically, then
   * releases with the core's loss rule. `signal` aborts at once (reason: a LockLostError) if
   * the lock is lost; `using` then rejects with that LockLostError. `options.signal`, if
   * given, cancels a waiting acquire and aborts the routine's signal as well (with its own
   * reason). Call as `using(resources, durationMs, routine)` or, like node-redlock,
   * `using(resources, durationMs, options, routine)`.
   */
  async using(resources, durationMs, optionsOrRoutine, routine) {
    let options = optionsOrRoutine
    if (typeof optionsOrRoutine === 'function' && routine === undefined) {
      routine = optionsOrRoutine
      options = undefined
    }
    args.func('routine', routine)
    const lock = await this.acquire(resources, durationMs, options)
    return runUsing(lock, routine, options?.signal, abortReason)
  }

  /**
   * The manager's counters and latency histograms since it was created, with the
   * same field names in every language: `granted`, `contended`, `unavailable`, `rounds`,
   * `retries`, `wakeups`, `extensions`, `extension_failures`, `releases`, `lost`, `reseats`,
   * `quarantines`, `reconnects`, `votes_for`, `votes_against`, `votes_error`, `votes_timeout`,
   * `votes_not_eligible` (numbers), and `acquire_latency` / `round_latency` (`{ buckets: [upper
   * bounds in s], counts, count, sum_seconds }`; the last count is above the last bound).
   * Zero until connected. Synchronous.
   */
  stats() {
    try {
      return JSON.parse(this[kNative].statsJson())
    } catch (e) {
      throw fromNative(e)
    }
  }

  /** The node URLs, passwords replaced by `***`. */
  get nodes() {
    return this[kNative].nodes
  }

  /** Q = floor(N / 2) + 1: how many nodes must grant a lock. */
  get quorum() {
    return this[kNative].quorum
  }

  /** True once `close()` was called. */
  get closed() {
    return STATE.get(this).closed === true
  }

  /**
   * Who holds `resource` on each node, in node order: `[{url, token, ttl, permits, limit,
   * error}]` — the lock's token and its ttl in ms (null where the key does not exist), the
   * permits `[{token, ttl}]` of the semaphore of the same name and the limit it is in use with
   * (null without holders), and why a node could not be asked. Read-only; for monitoring.
   */
  async inspect(resource) {
    args.resource('resource', resource)
    try {
      const holders = await this[kNative].inspect(resource)
      return holders.map((h) => ({
        url: h.url,
        token: h.token ?? null,
        ttl: h.ttl ?? null,
        permits: h.permits,
        limit: h.limit ?? null,
        error: h.error ?? null,
      }))
    } catch (e) {
      throw fromNative(e)
    }
  }

  /**
   * Deletes `resources` on every node where they still hold `token` (a lock taken elsewhere,
   * whose `value` was handed over); resolves to whether a quorum still held it.
   */
  async releaseToken(resources, token) {
    args.resources('resources', resources)
    args.string('token', token)
    try {
      return await this[kNative].releaseToken(resources, token)
    } catch (e) {
      throw fromNative(e)
    }
  }

  /** `util.inspect`: the nodes (passwords as `***`), the quorum and whether closed. */
  [util.inspect.custom](depth, options, show = util.inspect) {
    const name = this.constructor.name
    if (depth < 0) return options.stylize(`[${name}]`, 'special')
    const shown = { nodes: this.nodes, quorum: this.quorum, closed: this.closed }
    return `${name} ${show(shown, { ...options, depth: options.depth === null ? null : options.depth - 1 })}`
  }

  /** Stops background work. Held locks are not released; later calls reject UNAVAILABLE. */
  async close() {
    STATE.get(this).closed = true
    try {
      await Promise.all(STATE.get(this).natives.map((n) => n.close()))
    } catch (e) {
      throw fromNative(e)
    }
  }
}

module.exports = { LockManager, internal }
