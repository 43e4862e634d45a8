'use strict'
// Leader elections: `manager.election(name)` gives an `Election` over the native
// `NativeElection`. `campaign` settles through the same completion path as `acquire` (and takes an
// AbortSignal the same way), `Leadership` wraps the granted `NativeLeadership`, and `observe()` is
// an async iterator over a `NativeObserver` that stops the native observer when the iteration
// ends (finished, `break`, abort or the manager closed). Every election rule is the core's.

const { inspect } = require('node:util')

const native = require('../index.js')
const errors = require('./errors.js')
const args = require('./args.js')
const { start, startCancellable } = require('./calls.js')
const { Released } = require('./lock.js')

const { fromNative } = errors

const DONE = Object.freeze({ done: true, value: undefined })

/** A native leader (or null) as the plain frozen object the API gives. */
function leaderOf(n) {
  if (n === null || n === undefined) return null
  return Object.freeze({ value: n.value, term: n.term, token: n.token, validityMs: n.validityMs })
}

/** `util.inspect` of `shown` under the class name `name`, one level deeper. */
function shownAs(name, shown, depth, options, show) {
  if (depth < 0) return options.stylize(`[${name}]`, 'special')
  return `${name} ${show(shown, { ...options, depth: options.depth === null ? null : options.depth - 1 })}`
}

/** The leader election `name` of a manager (`manager.election(name)`). */
class Election {
  #native
  /** `{manager, voters}`: the manager, and what errors' `attempts` need. */
  #context

  /** Elections are created by `LockManager#election`. */
  constructor(nativeElection, context) {
    if (!(nativeElection instanceof native.NativeElection)) {
      throw errors.invalid('Election: elections are created by LockManager.election')
    }
    this.#native = nativeElection
    this.#context = context ?? {}
  }

  /** The election's name, as given. */
  get name() {
    return this.#native.name
  }

  /** The manager the election runs on. */
  get manager() {
    return this.#context.manager
  }

  /**
   * Waits in line until this candidate leads, advertising `value`, and resolves to its
   * Leadership (kept extended in the background, `durationMs` at a time). Options: `wait` (ms;
   * then rejects with LockContendedError), `signal` (an AbortSignal: aborting takes the candidate
   * out of line on every node and rejects with `signal.reason`).
   */
  campaign(value, durationMs, options) {
    try {
      args.resource('value', value)
      args.ttl('durationMs', durationMs)
      const { wait, signal } =
        options === undefined || options === null ? {} : args.electionOptions(options, ['wait', 'signal'], 'campaign')
      const n = this.#native
      const voters = this.#context.voters
      const ok = (v) => new Leadership(v, { election: this, voters })
      const fail = (e) => fromNative(e, voters)
      const call = (id, token) => n.campaign(id, value, durationMs, wait, token)
      return signal ? startCancellable(signal, call, ok, fail) : start((id) => call(id), ok, fail)
    } catch (e) {
      return Promise.reject(e)
    }
  }

  /**
   * Who leads now, read from every node (QuorumUnavailableError when fewer than a quorum
   * answer): `{value, term, token, validityMs}`, or null when nobody leads.
   */
  async leader() {
    try {
      return leaderOf(await this.#native.leader())
    } catch (e) {
      throw fromNative(e)
    }
  }

  /**
   * The changes of leader, in order, as an async iterator: first who leads now, then every new
   * leader (or null when nobody leads). It finishes when the manager is closed, when
   * `options.signal` aborts, or when the loop leaves early (`break`).
   */
  observe(options) {
    const { signal } =
      options === undefined || options === null ? {} : args.electionOptions(options, ['signal'], 'observe')
    return new LeaderChanges(this.#native.observe(), signal)
  }

  /** `Election("scheduler")`. */
  toString() {
    return `Election(${errors.cut(JSON.stringify(this.name))})`
  }

  /** `util.inspect`: the name. */
  [inspect.custom](depth, options, show = inspect) {
    return shownAs('Election', { name: this.name }, depth, options, show)
  }
}

/**
 * The changes of leader of an election (`election.observe()`): an async iterator of
 * `Leader | null`. Ending it (`return()`, which `break` calls) stops the native observer.
 */
class LeaderChanges {
  #native
  #signal
  #onAbort
  #done = false

  constructor(nativeObserver, signal) {
    this.#native = nativeObserver
    if (signal?.aborted) {
      this.#finish()
    } else if (signal) {
      this.#signal = signal
      this.#onAbort = () => this.#finish()
      signal.addEventListener('abort', this.#onAbort, { once: true })
    }
  }

  #finish() {
    if (this.#done) return
    this.#done = true
    this.#native.stop()
    this.#signal?.removeEventListener('abort', this.#onAbort)
    this.#signal = undefined
  }

  /** The next leader (null: nobody leads); `done` once the manager closed or it was stopped. */
  async next() {
    if (this.#done) return DONE
    let change
    try {
      change = await this.#native.next()
    } catch (e) {
      this.#finish()
      throw fromNative(e)
    }
    // Aborted (or returned) while it waited: the end wins over a change read meanwhile.
    if (change.end || this.#done) {
      this.#finish()
      return DONE
    }
    return { done: false, value: leaderOf(change.leader) }
  }

  /** Ends the iteration (what `break` out of `for await` calls): stops the native observer. */
  async return() {
    this.#finish()
    return DONE
  }

  [Symbol.asyncIterator]() {
    return this
  }
}

if (Symbol.asyncDispose) {
  /** `await using changes = election.observe()` stops it at the end of the block. */
  LeaderChanges.prototype[Symbol.asyncDispose] = async function dispose() {
    await this.return()
  }
}

/**
 * This candidate's leadership (`election.campaign(…)`): extended in the background until it is
 * resigned or lost. Keep a reference while leading: one that is garbage-collected stops being
 * extended, and the next candidate leads once it expires.
 */
class Leadership {
  #native
  /** `{election, voters}`. */
  #context
  #lost

  /** Leaderships are created by `Election#campaign`. */
  constructor(nativeLeadership, context) {
    if (!(nativeLeadership instanceof native.NativeLeadership)) {
      throw errors.invalid('Leadership: leaderships are created by Election.campaign')
    }
    this.#native = nativeLeadership
    this.#context = context ?? {}
  }

  /** The election this leadership is of. */
  get election() {
    return this.#context.election
  }

  /** The term (bigint): this leadership's fencing token, larger than every earlier leader's. */
  get term() {
    return this.#native.term
  }

  /** The value this leader advertises, as last proclaimed. */
  get value() {
    return this.#native.value
  }

  /** The leadership's token (as `leader().token` shows it). */
  get token() {
    return this.#native.token
  }

  /** Remaining validity in milliseconds (monotonic clock); 0 once lost or resigned. */
  get validityMs() {
    return this.#native.validityMs
  }

  /** True while this candidate leads (not lost, resigned or run out). */
  isLeader() {
    return this.#native.isLeader()
  }

  /** True once the leadership is known lost. */
  isLost() {
    return this.#native.isLost()
  }

  /**
   * A Promise that resolves with `true` when the leadership is lost (before its validity ends,
   * so before another candidate can lead), or with `false` once it is resigned. Made on first
   * read; the same Promise after.
   */
  get lost() {
    if (this.#lost === undefined) {
      this.#lost = this.#native.waitLost().catch((e) => {
        throw fromNative(e)
      })
    }
    return this.#lost
  }

  /**
   * Advertises `value`, only while still leader: rejects with LockLostError when no longer the
   * leader, QuorumUnavailableError when too few nodes wrote it.
   */
  proclaim(value) {
    try {
      args.resource('value', value)
      const n = this.#native
      const voters = this.#context.voters
      return start(
        (id) => n.proclaim(id, value),
        () => undefined,
        (e) => fromNative(e, voters),
      )
    } catch (e) {
      return Promise.reject(e)
    }
  }

  /**
   * Steps down: stops the extensions and deletes the election's key where it still holds this
   * leadership, waking the next candidate in line; resolves like `lock.release()` and never
   * rejects for a lost leadership.
   */
  resign() {
    const n = this.#native
    const voters = this.#context.voters
    return start(
      (id) => n.resign(id),
      (bits, json) => new Released(bits, json, voters),
      (e) => fromNative(e, voters),
    )
  }

  /** `Leadership("scheduler", term 7)`. */
  toString() {
    return `Leadership(${errors.cut(JSON.stringify(this.#native.election))}, term ${this.#native.term})`
  }

  /**
   * `JSON.stringify(leadership)`: `{election, value, term, token, validityMs, lost}`, `term` as a
   * decimal string (JSON has no bigint).
   */
  toJSON() {
    const n = this.#native
    return {
      election: n.election,
      value: n.value,
      term: String(n.term),
      token: n.token,
      validityMs: n.validityMs,
      lost: n.isLost(),
    }
  }

  /** `util.inspect`: election, term, value, validity left, lost; the token only as a prefix. */
  [inspect.custom](depth, options, show = inspect) {
    const n = this.#native
    const shown = {
      election: n.election,
      term: n.term,
      value: n.value,
      validityMs: n.validityMs,
      lost: n.isLost(),
      token: `${n.token.slice(0, 8)}…`,
    }
    return shownAs('Leadership', shown, depth, options, show)
  }
}

if (Symbol.asyncDispose) {
  /** `await using me = await election.campaign(…)` resigns at the end of the block. */
  Leadership.prototype[Symbol.asyncDispose] = async function dispose() {
    await this.resign()
  }
}

module.exports = { Election, Leadership }
