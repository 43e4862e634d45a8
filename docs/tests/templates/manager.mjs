// Wraps a ```js,setup-manager block: `manager` over the test nodes (fresh, so the restart
// quarantine is off).
import { LockManager } from 'ironlock'

const manager = new LockManager(process.env.IRONLOCK_NODES.split(','), { restartQuarantine: false })
try {
  // EXAMPLE
} finally {
  await manager.close()
}
