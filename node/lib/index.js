'use strict'
// The public API of the `ironlock` npm package: a thin layer over the generated native module
// (../index.js) for what napi cannot express — Error subclasses, AbortSignal wiring and
// Symbol.asyncDispose. Lock semantics all live in the Rust core.

const native = require('../index.js')
const errors = require('./errors.js')
const args = require('./args.js')

const { LockLostError, fromNative, normalizeReport } = errors
const kNative = Symbol('ironlock.native')
const asyncDispose = Symbol.asyncDispose

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

  /** Per-node report of the last operation on this lock. */
  get report() {
    return normalizeReport(this[kNative].report)
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
    try {
      await this[kNative].extend(durationMs)
    } catch (e) {
      throw fromNative(e)
    }
    return this
  }

  /** Deletes the keys still holding this lock's token. Never rejects for a lost lock. */
  async release() {
    try {
      const r = await this[kNative].release()
      return { held: r.held, deletedOn: r.deletedOn, report: normalizeReport(r.report) }
    } catch (e) {
      throw fromNative(e)
    }
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

/** Runs `routine(signal, lock)` while the core keeps the lock extended; releases after. */
async function runUsing(lock, routine, userSignal) {
  const n = lock[kNative]
  const controller = new AbortController()
  let finished = false
  // The caller's own signal (options.signal) aborts the routine too.
  const forward = () => controller.abort(abortReason(userSignal))
  userSignal?.addEventListener('abort', forward, { once: true })
  n.keepAlive()
  n.waitLost().then(
    (encoded) => {
      if (!finished && encoded !== null) controller.abort(fromNative({ message: encoded }))
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
  n.stopKeepAlive()
  const lost = n.isLost() || !n.isValid()
  const released = await lock.release()
  if (lost) {
    const reason = controller.signal.reason
    if (reason instanceof LockLostError) throw reason
    throw new LockLostError(
      `lock on ${JSON.stringify(lock.resources)} was lost while the routine ran`,
      { code: 'LOST', report: released.report, cause: failed ? failure : undefined },
    )
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
      n = new native.NativeManager(nodes, s)
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
  async acquire(resources, durationMs, options) {
    args.resources('resources', resources)
    args.number('durationMs', durationMs)
    const { options: o, signal } = args.acquireOptions(options)
    if (signal?.aborted) throw abortReason(signal)
    let token
    let onAbort
    if (signal) {
      token = new native.CancelToken()
      onAbort = () => token.cancel()
      signal.addEventListener('abort', onAbort, { once: true })
    }
    try {
      return new Lock(await this[kNative].acquire(resources, durationMs, o, token))
    } catch (e) {
      const err = fromNative(e)
      if (signal?.aborted && errors.decode(e?.message)?.code === 'ABORTED') {
        throw abortReason(signal)
      }
      throw err
    } finally {
      if (signal) signal.removeEventListener('abort', onAbort)
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
