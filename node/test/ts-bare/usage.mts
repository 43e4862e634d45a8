// A TypeScript user without @types/node configured (TypeScript 7 loads no @types by default,
// and this project's lib has neither the DOM nor esnext.disposable): the package's types must
// check on their own. Type-checked only (`tsc --noEmit`), never run.
import {
  LockManager,
  Redlock,
  LockContendedError,
  QuorumUnavailableError,
  IronlockError,
  type Holder,
  type Lock,
  type LockJSON,
} from 'ironlock'

export async function use(nodes: string[]): Promise<string> {
  const manager = new LockManager(nodes, { retryCount: 0 })
  manager.on('error', (e: Error) => void e)
  const shown: string[] = manager.nodes
  const quorum: number = manager.quorum
  const closed: boolean = manager.closed
  try {
    const lock: Lock = await manager.acquire(['r'], 5_000)
    const json: LockJSON = lock.toJSON()
    const holders: Holder[] = await manager.inspect('r')
    const held: boolean = await manager.releaseToken(json.resources, json.value)
    return `${shown.length} ${quorum} ${closed} ${holders.length} ${held} ${JSON.stringify(lock)}`
  } catch (e) {
    // Each error class narrows `code` to its one literal.
    if (e instanceof LockContendedError) {
      const code: 'CONTENDED' = e.code
      return code
    }
    if (e instanceof QuorumUnavailableError) {
      const code: 'UNAVAILABLE' = e.code
      return code
    }
    if (e instanceof IronlockError) return e.code
    throw e
  } finally {
    await new Redlock(nodes).quit()
  }
}
