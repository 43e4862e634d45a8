'use strict'
// The public API of the `ironlock` npm package: a thin layer over the generated native module
// (../index.js) for what napi cannot express — Error subclasses, the Node forms of the node list,
// AbortSignal wiring, Symbol.asyncDispose and node-redlock's API. Lock semantics all live in the
// Rust core.

const native = require('../binding.js') // index.js, with a message naming the missing package
const errors = require('./errors.js')
const { Lock } = require('./lock.js')
const { LockManager } = require('./manager.js')
const { Election, Leadership } = require('./election.js')
const { Redlock } = require('./redlock.js')

module.exports = {
  LockManager,
  Redlock,
  Lock,
  Election,
  Leadership,
  IronlockError: errors.IronlockError,
  ExecutionError: errors.ExecutionError,
  LockContendedError: errors.LockContendedError,
  QuorumUnavailableError: errors.QuorumUnavailableError,
  LockLostError: errors.LockLostError,
  InvalidArgumentError: errors.InvalidArgumentError,
  ConnectionError: errors.ConnectionError,
  InternalError: errors.InternalError,
  ResourceLockedError: errors.ResourceLockedError,
  coreVersion: native.coreVersion(),
  // node-redlock's CommonJS build: `const Redlock = require('redlock').default`.
  default: Redlock,
}
