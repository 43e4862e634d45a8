// ES module entry point: the same objects as the CommonJS entry (lib/index.js). The default
// export is `Redlock`, as node-redlock's (`import Redlock from 'redlock'`).
import ironlock from './index.js'

export const {
  LockManager,
  Redlock,
  Lock,
  Election,
  Leadership,
  IronlockError,
  ExecutionError,
  LockContendedError,
  QuorumUnavailableError,
  LockLostError,
  InvalidArgumentError,
  ConnectionError,
  InternalError,
  ResourceLockedError,
  coreVersion,
} = ironlock

export default Redlock
