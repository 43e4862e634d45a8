// Wraps a ```ts,setup-manager block (compiled by tsc, then run by node).
import { LockManager } from 'ironlock'

const manager = new LockManager(process.env.IRONLOCK_NODES!.split(','), { restartQuarantine: false })
try {
  // EXAMPLE
} finally {
  await manager.close()
}
