'use strict'
// The Promises of the native calls that talk to Redis (acquire, release, extend, finish). Each
// takes an id and settles it later through `complete`, called by the event loop's callback that
// read the reply, or by one threadsafe function per manager (node/src/complete.rs): cheaper than
// a native Promise per call. `pending` maps ids to their settle functions.

const native = require('../index.js')
const { decode } = require('./errors.js')

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

/**
 * Called by the native layer on the JS thread: `error` is an encoded envelope or null; `report`
 * is a release's report JSON (its `value` is `deletedOn * 2 + held`), else undefined.
 */
function complete(id, error, value, report) {
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
    p.resolve(p.ok(value, report))
  } catch (e) {
    p.reject(e)
  }
}

/**
 * Starts `begin(id)` (a native call that settles `id` through `complete`) and returns its
 * Promise: fulfilled with `ok(value, report)`, rejected with `fail(envelope)` — or with `fail(error)`
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

/** What an aborted signal rejects with: its reason, or an AbortError as `fetch` does. */
function abortReason(signal) {
  return signal.reason ?? new DOMException('This operation was aborted', 'AbortError')
}

/**
 * `start` for a call that `signal` can cancel (an acquire, a campaign): `begin(id, token)` gets a
 * native `CancelToken` that the signal's `abort` cancels. Rejects with `signal.reason` when it is
 * aborted before or while the call waits (the native layer settles it ABORTED then).
 */
function startCancellable(signal, begin, ok, fail) {
  if (signal.aborted) return Promise.reject(abortReason(signal))
  const token = new native.CancelToken()
  const onAbort = () => token.cancel()
  signal.addEventListener('abort', onAbort, { once: true })
  return start(
    (id) => begin(id, token),
    (v, report) => {
      signal.removeEventListener('abort', onAbort)
      return ok(v, report)
    },
    (envelope) => {
      signal.removeEventListener('abort', onAbort)
      const text = typeof envelope === 'string' ? envelope : envelope?.message
      if (signal.aborted && decode(text)?.code === 'ABORTED') return abortReason(signal)
      return fail(envelope)
    },
  )
}

module.exports = { complete, start, startCancellable, abortReason }
