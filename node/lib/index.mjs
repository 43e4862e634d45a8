// ES module entry point: the same objects as the CommonJS entry (lib/index.js).
import ironlock from './index.js'

export const {
  LockManager,
  Redlock,
  Lock,
  IronlockError,
  ResourceLockedError,
  ExecutionError,
  LockLostError,
  InvalidArgumentError,
  ConnectionError,
  InternalError,
  coreVersion,
} = ironlock

export default ironlock
