'use strict'
// Error classes of SPEC §5, and the one decoder of the native layer's error envelope: the core's
// own JSON encoding of an error (`ironlock::Error::to_json`) behind a prefix,
// `ironlock:{"code","message","report":{"elapsed_ms","rounds","nodes"}|null}`.

const ENVELOPE = 'ironlock:'

/**
 * Base class of every ironlock error: `code` (SPEC §5), the per-node `report` of the last round,
 * its `elapsed` time in milliseconds and the number of `rounds` run (0 when no node was asked).
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

/** CONTENDED: the lock is held elsewhere (node-redlock's name). */
class ResourceLockedError extends IronlockError {}
/** UNAVAILABLE: no quorum and nobody holds the lock: nodes down, slow or quarantined. */
class ExecutionError extends IronlockError {}
/** LOST: the lock expired or was taken over. */
class LockLostError extends IronlockError {}
/** INVALID_ARGUMENT: bad input; the message names the argument. */
class InvalidArgumentError extends IronlockError {}
/** CONNECTION: a node URL cannot be used at all. */
class ConnectionError extends IronlockError {}
/** INTERNAL: a bug in ironlock. */
class InternalError extends IronlockError {}

const BY_CODE = {
  CONTENDED: ResourceLockedError,
  UNAVAILABLE: ExecutionError,
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

/** The ironlock error for anything the native layer threw or rejected with. */
function fromNative(err) {
  if (err instanceof IronlockError) return err
  const text = typeof err?.message === 'string' ? err.message : String(err)
  const d = decode(text)
  if (d) return makeError(d.code, d.message, d.report)
  // napi's own argument conversion (only reachable when the JS checks let a value through).
  if (typeof err?.code === 'string' && /^InvalidArg$|Expected$/.test(err.code)) {
    return makeError('INVALID_ARGUMENT', text, [], err)
  }
  return makeError('INTERNAL', text, [], err)
}

module.exports = {
  IronlockError,
  ResourceLockedError,
  ExecutionError,
  LockLostError,
  InvalidArgumentError,
  ConnectionError,
  InternalError,
  cut,
  decode,
  fromNative,
  invalid,
  makeError,
  normalizeReport,
}
