// Types of the `ironlock` npm package (lib/index.js). The native module's generated types are
// in ../index.d.ts; this file re-uses its setting shapes.

import type { Settings as NativeSettings } from '../index'

/** SPEC §5 error codes. */
export type ErrorCode =
  | 'CONTENDED'
  | 'UNAVAILABLE'
  | 'LOST'
  | 'INVALID_ARGUMENT'
  | 'CONNECTION'
  | 'INTERNAL'

/** How one node answered in the last round. `url` never contains a password. */
export interface NodeReport {
  url: string
  vote: 'for' | 'against' | 'error' | 'timeout' | 'not_eligible' | 'pending'
  error: string | null
}

/** Manager settings (SPEC §4) in camelCase; durations in integer milliseconds. */
export interface Settings extends Omit<NativeSettings, 'maxExtensions'> {
  /** How often one lock may be extended; `null` or absent = unlimited. */
  maxExtensions?: number | null
  /** node-redlock's name for `extensionThreshold`. */
  automaticExtensionThreshold?: number
}

/** Options of one acquire. */
export interface AcquireOptions {
  /** Keep retrying until this many milliseconds have passed. */
  wait?: number
  /** Overrides the manager's `retryCount` (0 = a single round). */
  retryCount?: number
  /** Compute a fencing token (`lock.fence`). */
  fencing?: boolean
  /** Cancels a waiting acquire; the promise then rejects with `signal.reason`. */
  signal?: AbortSignal
}

/** What a release did. */
export interface ReleaseResult {
  /** A quorum still held the keys with this lock's token and deleted them. */
  held: boolean
  /** Nodes on which keys were deleted. */
  deletedOn: number
  /** Per-node report of the release round. */
  report: NodeReport[]
  /** Milliseconds the release round took. */
  readonly elapsed: number
  /** Rounds run (1 for a release). */
  readonly rounds: number
}

/** Stops the auto-extension started by `lock.keepAlive()`. */
export interface KeepAlive {
  stop(): void
}

/** A lock granted by a quorum. Not released when garbage-collected: release it. */
export declare class Lock {
  private constructor()
  /** The resource names, as given. */
  readonly resources: string[]
  /** The random token stored under every key. */
  readonly value: string
  /** End of validity in epoch milliseconds. */
  readonly expiration: number
  /** Remaining validity in milliseconds (monotonic clock). */
  readonly validityMs: number
  /** The fencing token when acquired with `fencing: true`, else null. */
  readonly fence: bigint | null
  /** Per-node report of the last operation on this lock. */
  readonly report: NodeReport[]
  /** Milliseconds the last operation's (last) round took. */
  readonly elapsed: number
  /** Rounds the last operation ran (retries + 1 for the acquire; 1 after an extend). */
  readonly rounds: number
  isValid(): boolean
  isLost(): boolean
  /** Extends to `durationMs` from now; rejects with LockLostError if the lock is gone. */
  extend(durationMs: number): Promise<Lock>
  /** Deletes the keys still holding this lock's token; never rejects for a lost lock. */
  release(): Promise<ReleaseResult>
  /**
   * Releases and applies the loss rule: rejects with LockLostError when the lock was lost or
   * expired before, or the release found its token on fewer than a quorum.
   */
  finish(): Promise<ReleaseResult>
  /** Extends in the background until stopped, released or lost (then released at once). */
  keepAlive(): KeepAlive
  [Symbol.asyncDispose](): Promise<void>
}

/** A routine run by `using`: `signal` aborts when the lock is lost. */
export type Routine<T> = (signal: AbortSignal, lock: Lock) => Promise<T> | T

/** Takes Redlock locks over N independent Redis masters. */
export declare class LockManager {
  /** Validates at once (throws InvalidArgumentError / ConnectionError) and connects in the background. */
  constructor(nodes: string[], settings?: Settings)
  /** A manager whose first connection attempt to every node has finished. */
  static connect<T extends LockManager>(
    this: new (nodes: string[], settings?: Settings) => T,
    nodes: string[],
    settings?: Settings,
  ): Promise<T>
  /** Resolves once the first connection attempt to every node has finished. */
  ready(): Promise<void>
  acquire(resources: string[], durationMs: number, options?: AcquireOptions): Promise<Lock>
  release(lock: Lock): Promise<ReleaseResult>
  extend(lock: Lock, durationMs: number): Promise<Lock>
  using<T>(resources: string[], durationMs: number, routine: Routine<T>): Promise<T>
  using<T>(
    resources: string[],
    durationMs: number,
    options: AcquireOptions | undefined,
    routine: Routine<T>,
  ): Promise<T>
  close(): Promise<void>
}

/** node-redlock's name for the manager. */
export declare class Redlock extends LockManager {
  /** node-redlock's name for `close()`. */
  quit(): Promise<void>
}

/** Base class of every ironlock error. */
export declare class IronlockError extends Error {
  readonly code: ErrorCode
  /** Per-node report of the last round; empty when no node was asked. */
  readonly report: NodeReport[]
  /** Milliseconds the last round took (0 when no node was asked). */
  readonly elapsed: number
  /** Rounds run (0 when no node was asked). */
  readonly rounds: number
}
/** CONTENDED: the lock is held elsewhere. */
export declare class ResourceLockedError extends IronlockError {}
/** UNAVAILABLE: no quorum, nodes down, slow or quarantined. */
export declare class ExecutionError extends IronlockError {}
/** LOST: the lock expired or was taken over. */
export declare class LockLostError extends IronlockError {}
/** INVALID_ARGUMENT: bad input; the message names the argument. */
export declare class InvalidArgumentError extends IronlockError {}
/** CONNECTION: a node URL cannot be used at all. */
export declare class ConnectionError extends IronlockError {}
/** INTERNAL: a bug in ironlock. */
export declare class InternalError extends IronlockError {}

/** The version of the Rust core inside the native module. */
export declare const coreVersion: string

/** One node's part in the last round (the loose shape of `NodeReport`). */
export interface NodeReportObject {
  /** Node URL with any password replaced by `***`. */
  url: string
  /** `for`, `against`, `error`, `timeout`, `not_eligible` or `pending`. */
  vote: string
  /** The error text for `error` and `timeout` votes. */
  error?: string
}
