'use strict'
// Error classes (one per error kind, the same kinds in every language), node-redlock's
// `ExecutionError` / `ResourceLockedError`, and the one decoder of the native layer's error
// envelope: the core's own JSON encoding of an error (`ironlock::Error::to_json`) behind a prefix,
// `ironlock:{"code","message","report":{"elapsed_ms","rounds","nodes"}|null}`.

const native = require('../index.js')

const ENVELOPE = 'ironlock:'
// What an error needs to build node-redlock's `attempts` (see `withVoters`), and the built value,
// per error. WeakMaps rather than symbol properties: they hold the caller's node objects (which
// may carry a password), and `util.inspect(err, { showHidden: true })` prints symbol
// properties, never a WeakMap's entries.
const VOTERS = new WeakMap()
const ATTEMPTS = new WeakMap()

/**
 * Base class of every ironlock error: `code` (the error kind: `CONTENDED`, `UNAVAILABLE`, `LOST`,
 * `INVALID_ARGUMENT`, `CONNECTION` or `INTERNAL`), the per-node `report` of the last round, its
 * `elapsed` time in milliseconds and the number of `rounds` run (0 when no node was asked).
 */
class IronlockError extends Error {
  constructor(message, { code = 'INTERNAL', report = [], elapsed = 0, rounds = 0, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause })
    this.name = new.target.name
    this.code = code
    this.report = report
    this.elapsed = elapsed
    this.rounds = rounds
  }
}

/**
 * A quorum operation failed (node-redlock's class): every failed acquisition, and an extension or
 * a `finish` that lost the lock. `attempts` has one Promise of node-redlock's `ExecutionStats`
 * per round. Subclasses say why: LockContendedError, QuorumUnavailableError, LockLostError.
 */
class ExecutionError extends IronlockError {
  /** `new ExecutionError(message, attempts)` as in node-redlock, or `(message, options)`. */
  constructor(message, options) {
    super(message, Array.isArray(options) ? { code: 'UNAVAILABLE' } : options)
    if (Array.isArray(options)) {
      ATTEMPTS.set(this, Object.freeze([...options]))
    }
  }
}

/** CONTENDED: no quorum, and a node said another token holds a key: the lock is held elsewhere. */
class LockContendedError extends ExecutionError {}
/** UNAVAILABLE: no quorum and nobody holds the lock: nodes down, slow or quarantined. */
class QuorumUnavailableError extends ExecutionError {}
/** LOST: the lock expired or was taken over (extend, finish, or `using`'s signal). */
class LockLostError extends ExecutionError {}
/** INVALID_ARGUMENT: bad input; the message names the argument. */
class InvalidArgumentError extends IronlockError {}
/** CONNECTION: the node list cannot be used at all. */
class ConnectionError extends IronlockError {}
/** INTERNAL: a bug in ironlock (including a caught Rust panic). */
class InternalError extends IronlockError {}

/**
 * node-redlock's reason for a node's vote against: another lock holds one of the resources (or,
 * for extend and release, this lock's token is gone). Never thrown: it is a value in
 * `ExecutionStats.votesAgainst`.
 */
class ResourceLockedError extends Error {
  constructor(message) {
    super(message)
    this.name = 'ResourceLockedError'
  }
}

const BY_CODE = {
  CONTENDED: LockContendedError,
  UNAVAILABLE: QuorumUnavailableError,
  LOST: LockLostError,
  INVALID_ARGUMENT: InvalidArgumentError,
  CONNECTION: ConnectionError,
  INTERNAL: InternalError,
}

/** The per-node entries of a core report (`{elapsed_ms, rounds, nodes}`) or of a node array. */
function normalizeReport(report) {
  const nodes = Array.isArray(report) ? report : report?.nodes
  if (!Array.isArray(nodes)) return []
  return nodes.map((n) => ({ url: n.url, vote: n.vote, error: n.error ?? null }))
}

/** An error of class `code` from the core's report object (or null). */
function makeError(code, message, report, cause) {
  const Class = BY_CODE[code] ?? InternalError
  return new Class(message, {
    code: BY_CODE[code] ? code : 'INTERNAL',
    report: normalizeReport(report),
    elapsed: report?.elapsed_ms ?? 0,
    rounds: report?.rounds ?? 0,
    cause,
  })
}

/** At most about 80 characters of `text` for a message (the core's `cut` rule). */
function cut(text) {
  const chars = Array.from(String(text))
  if (chars.length <= 80) return chars.join('')
  return `${chars.slice(0, 80).join('')}… (${chars.length} characters)`
}

/** Bad input detected by the JS layer (types, unknown option names). */
function invalid(message) {
  return makeError('INVALID_ARGUMENT', message)
}

/** `{code, message, report}` from an encoded native message, or null. */
function decode(text) {
  if (typeof text !== 'string' || !text.startsWith(ENVELOPE)) return null
  try {
    return JSON.parse(text.slice(ENVELOPE.length))
  } catch {
    return null
  }
}

/**
 * The ironlock error for anything the native layer threw or rejected with; `voters` (see
 * `withVoters`) names the nodes in its `attempts`.
 */
function fromNative(err, voters) {
  if (err instanceof IronlockError) return withVoters(err, voters)
  const text = typeof err?.message === 'string' ? err.message : String(err)
  const d = decode(text)
  if (d) return withVoters(makeError(d.code, d.message, d.report), voters)
  // napi's own argument conversion (only reachable when the JS checks let a value through).
  if (typeof err?.code === 'string' && /^InvalidArg$|Expected$/.test(err.code)) {
    return makeError('INVALID_ARGUMENT', text, [], err)
  }
  return makeError('INTERNAL', text, [], err)
}

/**
 * Attaches what `attempts` needs and the report cannot say: `{nodes, resources}`, where
 * `nodes[i]` is node i as the caller gave it when it was a client instance (node-redlock keys
 * its votes by client), else null (the report's password-free URL is used),
 * and `resources` is the number of resources of the operation. Not enumerable: inspecting an
 * error never walks into client objects.
 */
function withVoters(err, voters) {
  if (voters && err instanceof IronlockError && !VOTERS.has(err)) {
    VOTERS.set(err, voters)
  }
  return err
}

/** Why a node did not vote for, as node-redlock's `votesAgainst` values. */
function voteReason(node, resources) {
  if (node.vote === 'against') {
    return new ResourceLockedError(
      `The operation was applied to: 0 of the ${resources} requested resources.`,
    )
  }
  const why = {
    error: 'the node answered with an error or is not connected',
    timeout: 'the node did not answer within nodeTimeout',
    not_eligible: 'the node restarted less than maxTtl ago (restart quarantine): its vote does not count',
    reseated: 'the node had restarted and lost the keys; the extension wrote them back (re-seat), but it is still in restart quarantine',
  }[node.vote]
  const e = new Error(node.error ?? why ?? `vote ${node.vote}`)
  Object.defineProperties(e, {
    url: { value: node.url, enumerable: true },
    vote: { value: node.vote, enumerable: true },
  })
  return e
}

/**
 * node-redlock's `ExecutionStats` of one reported round. A node whose answer came after the
 * outcome was decided (vote `pending`) is in neither set: its vote did not count.
 */
function statsOf(report, voters) {
  const nodes = voters?.nodes ?? []
  const votesFor = new Set()
  const votesAgainst = new Map()
  report.forEach((n, i) => {
    const key = nodes[i] ?? n.url
    // A node that had not answered when the outcome was decided voted neither way in the round.
    if (n.vote === 'pending') return
    if (n.vote === 'for') votesFor.add(key)
    else votesAgainst.set(key, voteReason(n, voters?.resources ?? 1))
  })
  return {
    membershipSize: report.length,
    quorumSize: native.quorum(report.length),
    votesFor,
    votesAgainst,
  }
}

/**
 * One resolved Promise of `ExecutionStats` per round of the operation (node-redlock's shape).
 * The core reports the votes of the last round only: that round has them; the earlier rounds
 * (retries that failed) carry the membership and quorum sizes with empty vote collections.
 */
function attemptsOf({ report, rounds }, voters) {
  if (report.length === 0) return Object.freeze([])
  const last = statsOf(report, voters ?? undefined)
  const earlier = () => ({
    membershipSize: last.membershipSize,
    quorumSize: last.quorumSize,
    votesFor: new Set(),
    votesAgainst: new Map(),
  })
  const n = Math.max(rounds, 1)
  return Object.freeze(
    Array.from({ length: n }, (_, i) => Promise.resolve(i === n - 1 ? last : earlier())),
  )
}

// One Promise of `{membershipSize, quorumSize, votesFor, votesAgainst}` per round, built on first
// read from the report and the voters attached to the error (an accessor, so that inspecting an
// error does not show it).
Object.defineProperty(ExecutionError.prototype, 'attempts', {
  get() {
    if (!ATTEMPTS.has(this)) ATTEMPTS.set(this, attemptsOf(this, VOTERS.get(this)))
    return ATTEMPTS.get(this)
  },
  configurable: true,
})

module.exports = {
  IronlockError,
  ExecutionError,
  LockContendedError,
  QuorumUnavailableError,
  LockLostError,
  InvalidArgumentError,
  ConnectionError,
  InternalError,
  ResourceLockedError,
  attemptsOf,
  statsOf,
  cut,
  decode,
  fromNative,
  invalid,
  makeError,
  normalizeReport,
  withVoters,
}
