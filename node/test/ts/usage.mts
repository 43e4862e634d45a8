// A TypeScript user of the package: type-checked with `tsc --noEmit` against lib/index.d.ts,
// then compiled (TypeScript lowers `await using` for Node < 24) and run against real nodes.
import {
  LockManager,
  Redlock,
  Lock,
  IronlockError,
  ExecutionError,
  LockContendedError,
  ResourceLockedError,
  LockLostError,
  type ExecutionStats,
  type ErrorCode,
  type NodeReport,
  type ReleaseResult,
  type Settings,
} from 'ironlock'

const settings: Settings = { restartQuarantine: false, retryCount: 0, maxExtensions: null }

async function main(nodes: string[]): Promise<void> {
  const manager = await LockManager.connect(nodes, settings)
  const resource = `ts:${process.pid}:${Date.now()}`
  let inside: Lock | undefined
  {
    await using lock = await manager.acquire([resource], 5_000, { fencing: true })
    inside = lock
    const fence: bigint | null = lock.fence
    const validity: number = lock.validityMs
    const expiration: number = lock.expiration
    if (!lock.isValid() || fence === null || validity <= 0 || expiration < Date.now()) {
      throw new Error('lock not held inside the block')
    }
    try {
      await manager.acquire([resource], 1_000)
      throw new Error('expected contention')
    } catch (e) {
      if (!(e instanceof LockContendedError) || !(e instanceof ExecutionError)) throw e
      const code: ErrorCode = e.code
      const report: NodeReport[] = e.report
      const [last]: ExecutionStats[] = (await Promise.all(e.attempts)).slice(-1)
      const reasons = [...last.votesAgainst.values()]
      if (code !== 'CONTENDED' || report.length !== nodes.length) throw e
      if (!reasons.some((r) => r instanceof ResourceLockedError)) throw e
    }
  }
  if (inside.isValid()) throw new Error('await using did not release the lock')
  const again = await manager.acquire([resource], 1_000)
  const released: ReleaseResult = await again.release()
  if (!released.held) throw new Error('release reported not held')

  const n: number = await manager.using([resource], 300, async (signal: AbortSignal, lock: Lock) => {
    await new Promise((resolve) => setTimeout(resolve, 400))
    return signal.aborted || !lock.isValid() ? 0 : 1
  })
  const redlock = new Redlock(nodes, settings)
  const aborted: boolean = await redlock.using([resource], 300, { retryCount: 1 }, (signal) => signal.aborted)
  await redlock.quit()
  await manager.close()
  if (n !== 1 || aborted) throw new Error('using misbehaved')
  console.log('await using released the lock')
}

// Never called: each line must fail to type-check.
export function typeErrors(m: LockManager, l: Lock): void {
  // @ts-expect-error resources is a string array
  void m.acquire('r', 1_000)
  // @ts-expect-error durations are numbers
  void m.acquire(['r'], '1s')
  // @ts-expect-error unknown acquire option
  void m.acquire(['r'], 1_000, { retryDelay: 5 })
  // @ts-expect-error unknown setting
  void new LockManager(['redis://127.0.0.1:1'], { retryCont: 1 })
  // @ts-expect-error fence is read-only
  l.fence = 1n
  // @ts-expect-error codes are the SPEC §5 set
  const c: ErrorCode = 'NOPE'
  void c
  void (l instanceof IronlockError || l instanceof LockLostError)
}

main((process.env.IRONLOCK_NODES ?? '').split(',')).catch((e: unknown) => {
  console.error(e)
  process.exit(1)
})
