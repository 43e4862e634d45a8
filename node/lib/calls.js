'use strict'
// The Promises of the native calls that talk to Redis (acquire, release, extend, finish). Each
// takes an id and settles it later through `complete`, called by the event loop's callback that
// read the reply, by `settleStashed` in a microtask when the reply came in while a call was
// starting, or by one threadsafe function per manager (node/src/complete.rs): cheaper than a
// native Promise per call. `slots` maps ids to their settle functions.

const native = require('../index.js')
const { decode } = require('./errors.js')

// Pending calls by id: `slots[id]` is the call's `{resolve, reject, ok, fail}`, or, for a free
// id, the next free id (-1: none). Ids are reused once settled, so the table is as long as the
// most calls ever pending at once. (A Map keyed by ever-growing ids cost a rehash or a shrink
// every few calls: 1.4 % of the JS thread in bench (a).)
const slots = []
let free = -1
let pendingCount = 0
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
  const p = slots[id]
  if (typeof p !== 'object') return
  slots[id] = free
  free = id
  if (--pendingCount === 0) keeper.unref()
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
 * when `begin` throws at once (bad arguments). `begin` returns true when calls finished while it
 * started this one (their replies came in while it wrote its requests): the native layer keeps
 * them for `settleStashed`, called here in a microtask rather than inside the call.
 */
function start(begin, ok, fail) {
  let id = free
  if (id < 0) {
    id = slots.length
    slots.push(-1)
  }
  free = slots[id]
  return new Promise((resolve, reject) => {
    let stashed
    try {
      stashed = begin(id)
    } catch (e) {
      slots[id] = free
      free = id
      reject(fail(e))
      return
    }
    slots[id] = { resolve, reject, ok, fail }
    if (pendingCount++ === 0) keeper.ref()
    if (stashed === true) settled.then(settleStashed)
  })
}

const settleStashed = native.settleStashed
// `settled.then(settleStashed)` queues a microtask: a bare promise reaction, where Node's
// `queueMicrotask` also makes an AsyncResource and a bound function per call (1 % of the JS
// thread). `settleStashed` does not throw: it reports an exception of `complete` as uncaught.
const settled = Promise.resolve()

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
