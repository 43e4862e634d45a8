// A TypeScript user of the package: type-checked with `tsc --noEmit` against lib/index.d.ts,
// then compiled (TypeScript lowers `await using` for Node < 24) and run against real nodes.
import Redlock2, {
  LockManager,
  Redlock,
  Lock,
  IronlockError,
  ExecutionError,
  LockContendedError,
  ResourceLockedError,
  LockLostError,
  type ExecutionStats,
  type RedlockAbortSignal,
  type RedlockAcquireSettings,
  type KeepAlive,
  type ErrorCode,
  type NodeReport,
  type ReleaseResult,
  type RwLock,
  type Settings,
  Election,
  Leadership,
  type Leader,
  type LeaderChanges,
  type CampaignOptions,
  type LeadershipJSON,
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

  // node-redlock's API: the default export, a comma-separated node string, per-call settings,
  // attempts, events, signal.error; and lock.finish / keepAlive / elapsed / rounds.
  const rl: Redlock = new Redlock2(nodes.join(','), { ...settings, automaticExtensionThreshold: 100 })
  const events: Error[] = []
  rl.on('error', (e: Error) => events.push(e))
  const perCall: RedlockAcquireSettings = { retryCount: -1, retryDelay: 50, retryJitter: 10, driftFactor: 0.02 }
  const lk = await rl.acquire([resource], 1_000, perCall)
  const stats: ExecutionStats[] = await Promise.all(lk.attempts)
  const sizes: number = stats[0].membershipSize + stats[0].quorumSize + stats[0].votesFor.size
  const timing: number = lk.elapsed + lk.rounds
  const keeper: KeepAlive = lk.keepAlive()
  keeper.stop()
  const done = await lk.finish()
  const releaseStats: ReadonlyArray<Promise<ExecutionStats>> = done.attempts
  const why: string = await rl.using([resource], 500, { automaticExtensionThreshold: 200 }, async (signal: RedlockAbortSignal) =>
    signal.error?.message ?? 'held',
  )
  await rl.quit()

  // Read-write locks: readers share, a writer excludes them; each side is a Lock whose `access`
  // says which.
  const rw: RwLock = manager.rwLock(`${resource}:rw`)
  let sides: Array<'read' | 'write' | null> = []
  {
    await using r1 = await rw.read(5_000, { fencing: true })
    await using r2 = await rw.read(5_000, { retryCount: 0 })
    sides = [r1.access, r2.access]
    try {
      await rw.write(1_000, { retryCount: 0, signal: new AbortController().signal })
      throw new Error('expected the writer to be refused')
    } catch (e) {
      if (!(e instanceof LockContendedError)) throw e
    }
  }
  const w: Lock = await rw.write(1_000)
  sides.push(w.access, (await manager.acquire([resource], 1_000).then(async (l) => (await l.release(), l))).access)
  await w.release()
  if (sides.join() !== 'read,read,write,' || rw.resource !== `${resource}:rw`) {
    throw new Error(`read-write lock misbehaved: ${sides}`)
  }
  // Leader election: campaign in line, the term as a bigint, leader(), proclaim, observe with
  // for await, and await using resigning at the end of the block.
  const election: Election = manager.election(`${resource}:elect`)
  const changes: LeaderChanges = election.observe({ signal: new AbortController().signal })
  const nobody: IteratorResult<Leader | null, undefined> = await changes.next()
  let term: bigint = 0n
  {
    const options: CampaignOptions = { wait: 2_000 }
    await using me = await election.campaign('a:1', 5_000, options)
    term = me.term
    const lost: Promise<boolean> = me.lost
    void lost
    await me.proclaim('a:2')
    const now: Leader | null = await election.leader()
    const json: LeadershipJSON = me.toJSON()
    if (!me.isLeader() || me.isLost() || now?.value !== 'a:2' || now.term !== term || json.term !== String(term)) {
      throw new Error('leadership misbehaved')
    }
    for await (const leader of changes) {
      if (leader !== null) break
    }
  }
  if (nobody.done || nobody.value !== null || (await election.leader()) !== null || term <= 0n) {
    throw new Error('election misbehaved')
  }
  if (!(Leadership.prototype instanceof Object) || election.name !== `${resource}:elect`) {
    throw new Error('election exports misbehaved')
  }
  if (sizes < 3 || timing <= 0 || !done.held || releaseStats.length !== 1 || why !== 'held') {
    throw new Error('Redlock misbehaved')
  }
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
  // @ts-expect-error access is null for a plain lock or a permit
  const side: 'read' | 'write' = l.access
  void side
  // @ts-expect-error access is read-only
  l.access = 'read'
  // @ts-expect-error a read-write lock has one resource
  void m.rwLock(['r'])
  // @ts-expect-error a read-write lock's sides take acquire options only
  void m.rwLock('r').write(1_000, { limit: 2 })
  // @ts-expect-error a campaign takes a value first
  void m.election('e').campaign(1_000)
  // @ts-expect-error campaign options are wait and signal only
  void m.election('e').campaign('v', 1_000, { fencing: true })
  // @ts-expect-error a term is a bigint, not a number
  void m.election('e').campaign('v', 1_000).then((l) => { const t: number = l.term; return t })
  // @ts-expect-error a leader is read-only
  void m.election('e').leader().then((l) => { if (l) l.term = 1n })
  // @ts-expect-error leader() may say nobody leads
  void m.election('e').leader().then((l) => l.value)
  // @ts-expect-error a ResourceLockedError is a vote reason, not an IronlockError (no code)
  void new ResourceLockedError('x').code
  // @ts-expect-error unknown per-call setting
  void new Redlock2().acquire(['r'], 1_000, { retryDelai: 5 })
  // @ts-expect-error attempts are Promises, as in node-redlock
  void new LockLostError('x', []).attempts[0].votesFor
  // @ts-expect-error codes are the SPEC §5 set
  const c: ErrorCode = 'NOPE'
  void c
  void (l instanceof IronlockError || l instanceof LockLostError)
}

main((process.env.IRONLOCK_NODES ?? '').split(',')).catch((e: unknown) => {
  console.error(e)
  process.exit(1)
})
