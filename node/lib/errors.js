'use strict'
// Error classes of SPEC §5, and the one decoder of the native layer's error envelope
// (`ironlock:{"code","message","report"}`, written by node/src/error.rs).

const ENVELOPE = 'ironlock:'

/** Base class of every ironlock error: `code` (SPEC §5) and the per-node `report`. */
class IronlockError extends Error {
  constructor(message, { code = 'INTERNAL', report = [], cause } = {}) {
    super(message, cause === undefined ? undefined : { cause })
    this.name = new.target.name
    this.code = code
    this.report = report
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

function normalizeReport(report) {
  if (!Array.isArray(report)) return []
  return report.map((n) => ({ url: n.url, vote: n.vote, error: n.error ?? null }))
}

function makeError(code, message, report, cause) {
  const Class = BY_CODE[code] ?? InternalError
  return new Class(message, {
    code: BY_CODE[code] ? code : 'INTERNAL',
    report: normalizeReport(report),
    cause,
  })
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
  decode,
  fromNative,
  invalid,
  normalizeReport,
}
