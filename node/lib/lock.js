'use strict'
// `Lock`: a granted lock over the native lock (an external value that the native `lock…`
// functions take), the result of a release, and `using`'s routine runner (auto-extension, the
// lost-lock AbortSignal, and the core's loss rule at the end).

const { inspect } = require('node:util')

const native = require('../index.js')
const errors = require('./errors.js')
const args = require('./args.js')
const { start } = require('./calls.js')

const { LockLostError, fromNative } = errors
// A lock's native lock, for `runUsing` (set by the class's static block).
let nativeOf
// What `createLock` passes to the constructor: nothing else may construct a Lock.
const kCreate = Symbol('ironlock.createLock')

/** The core's report of a native lock's last operation: `{elapsed_ms, rounds, nodes}`. */
function coreReport(n) {
  return JSON.parse(native.lockReportJson(n))
}

/**
 * `release()`'s and `finish()`'s result: `held`, `deletedOn`, and the release round's `report`,
 * `elapsed`, `rounds` and (node-redlock's) `attempts`, parsed from the core's JSON when first read.
 * A class rather than an object literal with getters: V8 defines a literal's accessors one by
 * one for every object, the prototype's once.
 */
class Released {
  #json
  #parsed
  #report
  #attempts
  #voters

  /** `bits`: `deletedOn * 2 + held`; `json`: the core's report of the release round. */
  constructor(bits, json, voters) {
    this.held = bits % 2 === 1
    this.deletedOn = Math.floor(bits / 2)
    this.#json = json
    this.#voters = voters
  }

  #core() {
    if (this.#parsed === undefined) this.#parsed = JSON.parse(this.#json)
    return this.#parsed
  }

  get report() {
    if (this.#report === undefined) this.#report = errors.normalizeReport(this.#core())
    return this.#report
  }

  set report(v) {
    this.#report = v
  }

  get elapsed() {
    return this.#core().elapsed_ms
  }

  get rounds() {
    return this.#core().rounds
  }

  get attempts() {
    if (this.#attempts === undefined) {
      this.#attempts = errors.attemptsOf({ report: this.report, rounds: this.rounds }, this.#voters)
    }
    return this.#attempts
  }

  toJSON() {
    const { held, deletedOn, report, elapsed, rounds, attempts } = this
    return { held, deletedOn, report, elapsed, rounds, attempts }
  }
}

/** A lock granted by a quorum. Release it explicitly (or with `await using`, or `using`). */
class Lock {
  /**
   * Locks are created by `LockManager.acquire` (through `createLock`). `context`: `{manager,
   * nodes, observe}` — the manager, the caller's node objects (for `attempts`), and a function
   * told every report.
   */
  constructor(nativeLock, context, key) {
    if (key !== kCreate) {
      throw errors.invalid('Lock: locks are created by LockManager.acquire')
    }
    this.#native = nativeLock
    this.#context = context ?? {}
  }

  // Private fields: `util.inspect(…, { showHidden: true })` does not print them (the context's
  // node objects may carry passwords), and they cost less per lock than a WeakMap entry.
  #native
  /** `{manager, nodes, observe, voters}` (see the constructor). */
  #context

  static {
    nativeOf = (lock) => lock.#native
  }

  /** The manager that granted this lock (node-redlock's `lock.redlock`). */
  get manager() {
    return this.#context.manager
  }

  /** node-redlock's name for `manager`. */
  get redlock() {
    return this.#context.manager
  }

  /** The resource names, as given. */
  get resources() {
    return native.lockResources(this.#native)
  }

  /** The random token stored under every key. */
  get value() {
    return native.lockValue(this.#native)
  }

  /** End of validity in epoch milliseconds (as node-redlock); use validityMs for decisions. */
  get expiration() {
    return native.lockExpiration(this.#native)
  }

  /** Remaining validity in milliseconds, from the monotonic clock. */
  get validityMs() {
    return native.lockValidityMs(this.#native)
  }

  /** The fencing token (bigint) when acquired with `fencing: true`, else null. */
  get fence() {
    return native.lockFence(this.#native) ?? null
  }

  /** For a read-write lock (`manager.rwLock`): `'read'` or `'write'`; null for a lock or a permit. */
  get access() {
    return native.lockAccess(this.#native) ?? null
  }

  /** Per-node report `[{url, vote, error}]` of the last operation on this lock. */
  get report() {
    return errors.normalizeReport(coreReport(this.#native))
  }

  /** Milliseconds the last operation's (last) round took. */
  get elapsed() {
    return coreReport(this.#native).elapsed_ms
  }

  /** Rounds the last operation ran (the acquire's retries + 1; 1 after an extend). */
  get rounds() {
    return coreReport(this.#native).rounds
  }

  /** node-redlock's `attempts` of the last operation (the acquire, or the last extend). */
  get attempts() {
    const core = coreReport(this.#native)
    const report = errors.normalizeReport(core)
    return errors.attemptsOf({ report, rounds: core.rounds }, this.#voters())
  }

  /** True while neither lost nor released and validity remains. */
  isValid() {
    return native.lockIsValid(this.#native)
  }

  /** True once the lock is known lost. */
  isLost() {
    return native.lockIsLost(this.#native)
  }

  #voters() {
    const c = this.#context
    return c.voters ?? { nodes: c.nodes, resources: native.lockResources(this.#native).length }
  }

  #fail() {
    const voters = this.#voters()
    const observe = this.#context.observe
    return (e) => {
      const err = fromNative(e, voters)
      observe?.(err.report, voters)
      return err
    }
  }

  #ok(map) {
    const observe = this.#context.observe
    if (!observe) return map
    const voters = this.#voters()
    return (v, report) => {
      const out = map(v, report)
      observe(out.report, voters)
      return out
    }
  }

  /** Extends the lock to `durationMs` from now; resolves to this lock. */
  async extend(durationMs) {
    args.ttl('durationMs', durationMs)
    const n = this.#native
    await start(
      (id) => native.lockExtend(n, id, durationMs),
      this.#ok(() => this),
      this.#fail(),
    )
    return this
  }

  /** Deletes the keys still holding this lock's token. Never rejects for a lost lock. */
  release() {
    const voters = this.#voters()
    const n = this.#native
    return start(
      (id) => native.lockRelease(n, id),
      this.#ok((bits, json) => new Released(bits, json, voters)),
      this.#fail(),
    )
  }

  /**
   * Ends a critical section with the core's loss rule: releases, and resolves like `release()`
   * when the lock was held to the end; rejects with a LockLostError (carrying the release's
   * report) when it was lost or ran out of validity before, or the release found its token on
   * fewer than a quorum of nodes.
   */
  finish() {
    const voters = this.#voters()
    const n = this.#native
    return start(
      (id) => native.lockFinish(n, id),
      this.#ok((bits, json) => new Released(bits, json, voters)),
      this.#fail(),
    )
  }

  /**
   * Keeps the lock extended in the background (when less than `extensionThreshold` of validity
   * is left) until `stop()` is called on the returned handle, the lock is released, or it is
   * lost; on loss the core releases it at once and `isLost()` turns true.
   */
  keepAlive() {
    const n = this.#native
    native.lockKeepAlive(n)
    return { stop: () => native.lockStopKeepAlive(n) }
  }

  /** `Lock(["a"])`; a read-write lock's side after the name: `Lock(["doc"], read)`. */
  toString() {
    const access = native.lockAccess(this.#native)
    const shown = errors.cut(JSON.stringify(this.resources))
    return access ? `Lock(${shown}, ${access})` : `Lock(${shown})`
  }

  /**
   * `JSON.stringify(lock)`: `{resources, value, fence, expiration, validityMs, lost}`. `fence`
   * is a decimal string (JSON has no bigint) or null; `value` is the token another process
   * needs for `releaseToken`. Nothing about the nodes (no URL, no password).
   */
  toJSON() {
    const n = this.#native
    const fence = native.lockFence(n)
    return {
      resources: native.lockResources(n),
      value: native.lockValue(n),
      fence: fence === null || fence === undefined ? null : String(fence),
      expiration: native.lockExpiration(n),
      validityMs: native.lockValidityMs(n),
      lost: native.lockIsLost(n),
    }
  }

  /**
   * `util.inspect`: resources, the side of a read-write lock (`access`, shown only for one),
   * validity left, fence and lost; the token only as a prefix.
   */
  [inspect.custom](depth, options, show = inspect) {
    const n = this.#native
    const access = native.lockAccess(n)
    const shown = {
      resources: native.lockResources(n),
      ...(access ? { access } : {}),
      validityMs: native.lockValidityMs(n),
      fence: native.lockFence(n) ?? null,
      lost: native.lockIsLost(n),
      value: `${native.lockValue(n).slice(0, 8)}…`,
    }
    if (depth < 0) return options.stylize('[Lock]', 'special')
    return `Lock ${show(shown, { ...options, depth: options.depth === null ? null : options.depth - 1 })}`
  }
}

if (Symbol.asyncDispose) {
  /** `await using lock = await manager.acquire(…)` releases at the end of the block. */
  Lock.prototype[Symbol.asyncDispose] = async function dispose() {
    await this.release()
  }
}

/** The LockLostError with which `using` aborts its signal: the last round's report says why. */
function lostWhileRunning(n) {
  const message = `lock on ${errors.cut(JSON.stringify(native.lockResources(n)))} lost: auto-extension could not keep it`
  return errors.makeError('LOST', message, coreReport(n))
}

/**
 * Runs `routine(signal, lock)` while the core keeps the lock extended, then ends it with the
 * core's loss rule (`finish`): the routine's result, or a LockLostError when the lock was not
 * held to the end (the signal's own reason when it aborted while the routine ran). `signal`
 * also has node-redlock's `signal.error`: the abort reason once aborted, else undefined.
 */
async function runUsing(lock, routine, userSignal, abortReason) {
  const n = nativeOf(lock)
  const controller = new AbortController()
  const signal = controller.signal
  Object.defineProperty(signal, 'error', {
    get: () => (signal.aborted ? signal.reason : undefined),
  })
  let finished = false
  // The caller's own signal (options.signal) aborts the routine too.
  const forward = () => controller.abort(abortReason(userSignal))
  userSignal?.addEventListener('abort', forward, { once: true })
  native.lockKeepAlive(n)
  native.lockWaitLost(n).then(
    (lost) => {
      if (!finished && lost) controller.abort(lostWhileRunning(n))
    },
    () => {},
  )
  let out
  let failure
  let failed = false
  try {
    out = await routine(signal, lock)
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
    const reason = signal.reason
    if (reason instanceof LockLostError) throw reason
    if (failed) e.cause = failure
    throw e
  }
  if (failed) throw failure
  return out
}

/** A Lock over native lock `n` (what an acquire settles with); `context` as the constructor's. */
function createLock(n, context) {
  return new Lock(n, context, kCreate)
}

module.exports = { Lock, Released, runUsing, createLock }
