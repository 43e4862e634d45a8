'use strict'
// `Redlock`: node-redlock 5's API over the same core. Nodes may be ioredis / node-redis clients
// (their settings are read; ironlock keeps its own connections), options objects or URLs;
// node-redlock's per-call settings, `ExecutionError.attempts`, `ResourceLockedError` votes,
// `using` with `signal.aborted` / `signal.error`, and `on("error")` for every node that did not
// vote for an operation.

const errors = require('./errors.js')
const args = require('./args.js')
const { LockManager, internal } = require('./manager.js')

/** node-redlock's default `automaticExtensionThreshold`. */
const EXTENSION_THRESHOLD = 500
/**
 * Per-call settings the core keeps per manager: a call that changes one of them runs on a
 * manager of its own over the same nodes (opened on first use, closed by `quit`).
 */
const PER_MANAGER = ['retryDelay', 'retryJitter', 'driftFactor', 'extensionThreshold']
/** At most this many such setting combinations per Redlock (each keeps its own connections). */
const MAX_VARIANTS = 16
const PER_CALL = {
  retryDelay: args.number,
  retryJitter: args.number,
  driftFactor: args.count,
  extensionThreshold: args.number,
}

const noop = () => {}
const kVariants = Symbol('ironlock.variants')

class Redlock extends LockManager {
  /**
   * `new Redlock(clients, settings?)` as in node-redlock; `settings` also takes every ironlock
   * setting (`maxTtl`, `restartQuarantine`, …). node-redlock's third argument (custom Lua
   * scripts) is not supported.
   */
  constructor(clients, settings, scripts) {
    if (scripts !== undefined) {
      throw errors.invalid(
        "scripts: custom Lua scripts are not supported (ironlock's scripts are part of its protocol)",
      )
    }
    const s = { ...args.plainObject('settings', settings) }
    if (s.automaticExtensionThreshold === undefined && s.extensionThreshold === undefined) {
      s.automaticExtensionThreshold = EXTENSION_THRESHOLD
    }
    super(clients, s)
    // As node-redlock: "error" events never crash a process that does not listen to them.
    this.on('error', noop)
    Object.defineProperty(this, kVariants, { value: new Map() })
    Object.defineProperty(this, internal.observe, {
      value: (report, voters) => {
        if (!this.listeners('error').some((l) => l !== noop)) return
        for (const e of errors.statsOf(report, voters).votesAgainst.values()) {
          process.nextTick(() => this.emit('error', e))
        }
      },
    })
  }

  /** The native manager for per-call `overrides` of the settings in PER_MANAGER. */
  #native(overrides) {
    const state = internal.state(this)
    const merged = { ...state.settings, ...overrides }
    const key = JSON.stringify(PER_MANAGER.map((k) => merged[k] ?? null))
    const base = JSON.stringify(PER_MANAGER.map((k) => state.settings[k] ?? null))
    if (key === base) return state.natives[0]
    let n = this[kVariants].get(key)
    if (n === undefined) {
      if (this[kVariants].size >= MAX_VARIANTS) {
        throw errors.invalid(
          `settings: at most ${MAX_VARIANTS} different per-call combinations of ${PER_MANAGER.join(', ')} per Redlock (each keeps its own connections); set them on the Redlock instead`,
        )
      }
      n = internal.open(state.urls, merged)
      this[kVariants].set(key, n)
      state.natives.push(n)
    }
    return n
  }

  /**
   * Acquires `resources` for `duration` ms. `settings` (node-redlock's per-call settings):
   * `retryCount` (-1 = until acquired), `retryDelay`, `retryJitter`, `driftFactor`,
   * `automaticExtensionThreshold`; and ironlock's `wait`, `fencing`, `signal`.
   */
  acquire(resources, duration, settings) {
    try {
      args.resources('resources', resources)
      args.ttl('durationMs', duration)
      const { options, signal } = args.acquireOptions(settings, PER_CALL)
      const overrides = {}
      const native = {}
      for (const [k, v] of Object.entries(options)) {
        if (PER_MANAGER.includes(k)) overrides[k] = v
        else native[k] = v
      }
      const n = this.#native(overrides)
      return internal.acquire(this, n, resources, duration, native, signal)
    } catch (e) {
      return Promise.reject(e)
    }
  }

  // release(lock, settings?), extend(lock, duration, settings?) and using(resources, duration,
  // settings?, routine) are the manager's: one round each for release and extend (node-redlock's
  // per-call settings of those two are accepted and not used), and `using` acquires through
  // this class's acquire, so it takes node-redlock's per-call settings too.

  /**
   * Closes ironlock's connections and, as node-redlock does, quits the client instances it
   * was given.
   */
  async quit() {
    await this.close()
    const clients = (internal.state(this).nodes ?? []).filter((c) => typeof c?.quit === 'function')
    await Promise.all(clients.map((c) => Promise.resolve(c.quit()).catch(noop)))
  }
}

module.exports = { Redlock }
