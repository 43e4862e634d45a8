'use strict'
// The public API of the `ironlock` npm package: a thin layer over the generated native module
// (../index.js) for what napi cannot express — Error subclasses, AbortSignal wiring and
// Symbol.asyncDispose. Lock semantics all live in the Rust core.

const native = require('../index.js')
const errors = require('./errors.js')
const args = require('./args.js')

const { LockLostError, fromNative } = errors
const kNative = Symbol('ironlock.native')
const asyncDispose = Symbol.asyncDispose

// The native calls that talk to Redis (acquire, release, extend) take an id and settle it later
// through `complete`, one threadsafe function per manager (node/src/complete.rs): cheaper than a
// native Promise per call. `pending` maps ids to their settle functions.
const pending = new Map()
let nextId = 0
// The completion function does not keep the event loop alive by itself; this timer does, while
// any call is pending (a pending acquire must keep the process running, as a socket would).
const keeper = setInterval(() => {}, 1 << 30)
keeper.unref()

// A release returns once a quorum deleted the keys (an acquire once its outcome is decided); the
// other requests finish in the background. When the event loop empties after such calls, wait
// for them (at most 1 s) so that the last deletes reach every node before the process exits.
let undrained = false
process.on('beforeExit', () => {
  if (!undrained) return
  undrained = false
  native.drain(1000).then(
    () => {},
    () => {},
  )
})

/** Called by the native layer on the JS thread: `error` is an encoded envelope or null. */
function complete(id, error, value) {
  undrained = true
  const p = pending.get(id)
  if (p === undefined) return
  pending.delete(id)
  if (pending.size === 0) keeper.unref()
  if (error !== null && error !== undefined) {
    p.reject(p.fail(error))
    return
  }
  try {
    p.resolve(p.ok(value))
  } catch (e) {
    p.reject(e)
  }
}

const same = (v) => v

/**
 * Starts `begin(id)` (a native call that settles `id` through `complete`) and returns its
 * Promise: fulfilled with `ok(value)`, rejected with `fail(envelope)` — or with `fail(error)`
 * when `begin` throws at once (bad arguments).
 */
function start(begin, ok, fail) {
  nextId = nextId >= 0x7fffffff ? 1 : nextId + 1
  const id = nextId
  return new Promise((resolve, reject) => {
    try {
      begin(id)
    } catch (e) {
      reject(fail(e))
      return
    }
    if (pending.size === 0) keeper.ref()
    pending.set(id, { resolve, reject, ok, fail })
  })
}

const toLock = (n) => new Lock(n)

/**
 * `release()`'s result: `held`, `deletedOn`, and the release round's `report`, `elapsed` and
 * `rounds`, parsed from the core's report JSON when first read.
 */
function released(r) {
  const json = r[2]
  let parsed
  const core = () => {
    if (parsed === undefined) parsed = JSON.parse(json)
    return parsed
  }
  let report
  return {
    held: r[0],
    deletedOn: r[1],
    get report() {
      if (report === undefined) report = errors.normalizeReport(core())
      return report
    },
    set report(v) {
      report = v
    },
    get elapsed() {
      return core().elapsed_ms
    },
    get rounds() {
      return core().rounds
    },
  }
}

function abortReason(signal) {
  return signal.reason ?? new DOMException('This operation was aborted', 'AbortError')
}

/** A lock granted by a quorum. Release it explicitly (or with `await using`). */
class Lock {
  constructor(nativeLock) {
    if (!(nativeLock instanceof native.NativeLock)) {
      throw errors.invalid('Lock: locks are created by LockManager.acquire')
    }
    Object.defineProperty(this, kNative, { value: nativeLock })
  }

  /** The resource names, as given. */
  get resources() {
    return this[kNative].resources
  }

  /** The random token stored under every key. */
  get value() {
    return this[kNative].value
  }

  /** End of validity in epoch milliseconds (as node-redlock); use validityMs for decisions. */
  get expiration() {
    return this[kNative].expiration
  }

  /** Remaining validity in milliseconds, from the monotonic clock. */
  get validityMs() {
    return this[kNative].validityMs
  }

  /** The fencing token (bigint) when acquired with `fencing: true`, else null. */
  get fence() {
    return this[kNative].fence ?? null
  }

  /** Per-node report `[{url, vote, error}]` of the last operation on this lock. */
  get report() {
    return errors.normalizeReport(JSON.parse(this[kNative].reportJson))
  }

  /** Milliseconds the last operation's (last) round took. */
  get elapsed() {
    return JSON.parse(this[kNative].reportJson).elapsed_ms
  }

  /** Rounds the last operation ran (the acquire's retries + 1; 1 after an extend). */
  get rounds() {
    return JSON.parse(this[kNative].reportJson).rounds
  }

  /** True while neither lost nor released and validity remains. */
  isValid() {
    return this[kNative].isValid()
  }

  /** True once the lock is known lost. */
  isLost() {
    return this[kNative].isLost()
  }

  /** Extends the lock to `durationMs` from now; resolves to this lock. */
  async extend(durationMs) {
    args.number('durationMs', durationMs)
    const n = this[kNative]
    await start((id) => n.extend(id, durationMs), same, fromNative)
    return this
  }

  /** Deletes the keys still holding this lock's token. Never rejects for a lost lock. */
  release() {
    return start((id) => this[kNative].release(id), released, fromNative)
  }

  /**
   * Ends a critical section with the core's loss rule: releases, and resolves like `release()`
   * when the lock was held to the end; rejects with a LockLostError (carrying the release's
   * report) when it was lost or ran out of validity before, or the release found its token on
   * fewer than a quorum of nodes.
   */
  finish() {
    return start((id) => this[kNative].finish(id), released, fromNative)
  }

  /**
   * Keeps the lock extended in the background (when less than `extensionThreshold` of validity
   * is left) until `stop()` is called on the returned handle, the lock is released, or it is
   * lost; on loss the core releases it at once and `isLost()` turns true.
   */
  keepAlive() {
    const n = this[kNative]
    n.keepAlive()
    return { stop: () => n.stopKeepAlive() }
  }

  toString() {
    return `Lock(${JSON.stringify(this.resources)})`
  }
}

if (asyncDispose) {
  /** `await using lock = await manager.acquire(…)` releases at the end of the block. */
  Lock.prototype[asyncDispose] = async function dispose() {
    await this.release()
  }
}

/** The LockLostError with which `using` aborts its signal: the last round's report says why. */
function lostWhileRunning(n) {
  const report = JSON.parse(n.reportJson)
  const message = `lock on ${errors.cut(JSON.stringify(n.resources))} lost: auto-extension could not keep it`
  return errors.makeError('LOST', message, report)
}

/**
 * Runs `routine(signal, lock)` while the core keeps the lock extended, then ends it with the
 * core's loss rule (`finish`): the routine's result, or a LockLostError when the lock was not
 * held to the end (the signal's own reason when it aborted while the routine ran).
 */
async function runUsing(lock, routine, userSignal) {
  const n = lock[kNative]
  const controller = new AbortController()
  let finished = false
  // The caller's own signal (options.signal) aborts the routine too.
  const forward = () => controller.abort(abortReason(userSignal))
  userSignal?.addEventListener('abort', forward, { once: true })
  n.keepAlive()
  n.waitLost().then(
    (lost) => {
      if (!finished && lost) controller.abort(lostWhileRunning(n))
    },
    () => {},
  )
  let out
  let failure
  let failed = false
  try {
    out = await routine(controller.signal, lock)
  } catch (e) {
    failed = true
    failure = e
  }
  finished = true
  userSignal?.removeEventListener('abort', forward)
  try {
    await lock.finish()
  } catch (e) {
    if (!(e instanceof LockLostError)) throw failed ? failure : e
    const reason = controller.signal.reason
    if (reason instanceof LockLostError) throw reason
    if (failed) e.cause = failure
    throw e
  }
  if (failed) throw failure
  return out
}

/**
 * Takes Redlock locks over N independent Redis masters.
 * `nodes`: URLs (`redis://[user:password@]host:port[/db]`, `rediss://`, `unix://`);
 * `settings`: SPEC §4 settings in camelCase, durations in integer milliseconds.
 */
class LockManager {
  constructor(nodes, settings) {
    args.stringArray('nodes', nodes)
    const s = args.settings(settings)
    let n
    try {
      n = new native.NativeManager(nodes, s, complete)
    } catch (e) {
      throw fromNative(e)
    }
    Object.defineProperty(this, kNative, { value: n })
  }

  /**
   * Creates a manager and waits for the first connection attempt to every node (a node that is
   * down does not fail it: it votes "error" until a background reconnection succeeds).
   */
  static async connect(nodes, settings) {
    const manager = new this(nodes, settings)
    await manager.ready()
    return manager
  }

  /** Resolves once the first connection attempt to every node has finished. */
  async ready() {
    try {
      await this[kNative].ready()
    } catch (e) {
      throw fromNative(e)
    }
  }

  /**
   * Acquires every resource (all or none) for `durationMs`.
   * Options: `wait` (ms to keep retrying), `retryCount`, `fencing`, `signal` (an AbortSignal
   * that cancels a waiting acquire; it then rejects with `signal.reason`).
   */
  acquire(resources, durationMs, options) {
    // Not `async`: one Promise per call; every failure, bad arguments included, still rejects.
    try {
      args.resources('resources', resources)
      args.number('durationMs', durationMs)
      const n = this[kNative]
      if (options === undefined || options === null) {
        return start((id) => n.acquire(id, resources, durationMs), toLock, fromNative)
      }
      const { options: o, signal } = args.acquireOptions(options)
      if (!signal) return start((id) => n.acquire(id, resources, durationMs, o), toLock, fromNative)
      if (signal.aborted) throw abortReason(signal)
      const token = new native.CancelToken()
      const onAbort = () => token.cancel()
      signal.addEventListener('abort', onAbort, { once: true })
      const fail = (envelope) => {
        signal.removeEventListener('abort', onAbort)
        const text = typeof envelope === 'string' ? envelope : envelope?.message
        if (signal.aborted && errors.decode(text)?.code === 'ABORTED') return abortReason(signal)
        return fromNative(envelope)
      }
      const ok = (v) => {
        signal.removeEventListener('abort', onAbort)
        return new Lock(v)
      }
      return start((id) => n.acquire(id, resources, durationMs, o, token), ok, fail)
    } catch (e) {
      return Promise.reject(e)
    }
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
   * releases. `signal` aborts at once (reason: a LockLostError) if the lock is lost; `using`
   * then rejects with that LockLostError. `options.signal`, if given, cancels a waiting acquire
   * and aborts the routine's signal as well (with its own reason). Call as `using(resources, durationMs, routine)` or,
   * like node-redlock, `using(resources, durationMs, options, routine)`.
   */
  async using(resources, durationMs, optionsOrRoutine, routine) {
    let options = optionsOrRoutine
    if (typeof optionsOrRoutine === 'function' && routine === undefined) {
      routine = optionsOrRoutine
      options = undefined
    }
    args.func('routine', routine)
    const lock = await this.acquire(resources, durationMs, options)
    return runUsing(lock, routine, options?.signal)
  }

  /** Stops background work. Held locks are not released; later calls reject UNAVAILABLE. */
  async close() {
    try {
      await this[kNative].close()
    } catch (e) {
      throw fromNative(e)
    }
  }
}

/** node-redlock's name for the manager (`new Redlock(urls, settings)`), with `quit()`. */
class Redlock extends LockManager {
  /** node-redlock's name for `close()`. */
  async quit() {
    return this.close()
  }
}

module.exports = {
  LockManager,
  Redlock,
  Lock,
  IronlockError: errors.IronlockError,
  ResourceLockedError: errors.ResourceLockedError,
  ExecutionError: errors.ExecutionError,
  LockLostError: errors.LockLostError,
  InvalidArgumentError: errors.InvalidArgumentError,
  ConnectionError: errors.ConnectionError,
  InternalError: errors.InternalError,
  coreVersion: native.coreVersion(),
}
