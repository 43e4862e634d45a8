// Types of the `ironlock` npm package (lib/index.js; lib/index.d.mts for `import`). The native
// module's generated types are in ../index.d.ts.

// No import of `node:events` (nor any global of @types/node): these types check whether or not
// the project configures `"types": ["node"]` (TypeScript 7 loads no @types by default).

/**
 * The part of `node:events`' `EventEmitter` a manager offers (at run time it is one), declared
 * here so that the package's types do not need @types/node.
 */
declare class EventEmitter {
  /** Adds `listener` for `eventName`. */
  addListener(eventName: string | symbol, listener: (...args: any[]) => void): this
  /** Adds `listener` for `eventName`. */
  on(eventName: string | symbol, listener: (...args: any[]) => void): this
  /** Adds `listener` for the next `eventName` only. */
  once(eventName: string | symbol, listener: (...args: any[]) => void): this
  /** Adds `listener` for `eventName` before the others. */
  prependListener(eventName: string | symbol, listener: (...args: any[]) => void): this
  /** Adds `listener` for the next `eventName` only, before the others. */
  prependOnceListener(eventName: string | symbol, listener: (...args: any[]) => void): this
  /** Removes `listener` for `eventName`. */
  removeListener(eventName: string | symbol, listener: (...args: any[]) => void): this
  /** Removes `listener` for `eventName`. */
  off(eventName: string | symbol, listener: (...args: any[]) => void): this
  /** Removes every listener (of `eventName`, when given). */
  removeAllListeners(eventName?: string | symbol): this
  /** Warns when more than `n` listeners are added for one event. */
  setMaxListeners(n: number): this
  /** The limit set by `setMaxListeners`. */
  getMaxListeners(): number
  /** The listeners of `eventName`. */
  listeners(eventName: string | symbol): Function[]
  /** The listeners of `eventName`, including `once` wrappers. */
  rawListeners(eventName: string | symbol): Function[]
  /** Calls the listeners of `eventName` with `args`; true when there were any. */
  emit(eventName: string | symbol, ...args: any[]): boolean
  /** How many listeners `eventName` has (that are `listener`, when given). */
  listenerCount(eventName: string | symbol, listener?: Function): number
  /** The events that have listeners. */
  eventNames(): Array<string | symbol>
}

/**
 * `Symbol.asyncDispose`, as @types/node and TypeScript's `esnext.disposable` lib declare it, so
 * that `Lock[Symbol.asyncDispose]` type-checks with neither.
 */
declare global {
  interface SymbolConstructor {
    readonly asyncDispose: unique symbol
  }
}

/**
 * The global `AbortSignal` (of @types/node or the DOM lib) where one is declared; otherwise the
 * part of it ironlock uses.
 */
export type AbortSignalLike = typeof globalThis extends { AbortSignal: { prototype: infer S } }
  ? S
  : {
      readonly aborted: boolean
      readonly reason: any
      addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void
      removeEventListener(type: 'abort', listener: () => void): void
    }

/** Error codes: the error kinds, the same in every language. */
export type ErrorCode =
  | 'CONTENDED'
  | 'UNAVAILABLE'
  | 'LOST'
  | 'INVALID_ARGUMENT'
  | 'CONNECTION'
  | 'INTERNAL'

/** How one node answered in the last round. `url` never contains a password. */
export interface NodeReport {
  /** Node URL with any password replaced by `***`. */
  url: string
  /** The node's answer; `pending` when the round was decided before it answered. */
  vote: 'for' | 'against' | 'error' | 'timeout' | 'not_eligible' | 'pending' | 'reseated'
  /** The error text for `error` and `timeout` votes, else null. */
  error: string | null
}

/**
 * Manager settings in camelCase; durations in integer milliseconds. Every field is
 * optional and defaults as in the core; the names and kinds come from the core's settings table
 * (`settingKinds()`), which is what the constructor checks against.
 */
export interface Settings {
  /** Further rounds after the first (0 = try once, -1 = retry until acquired). Default 10. */
  retryCount?: number
  /** Mean pause between rounds, ms. Default 200. */
  retryDelay?: number
  /** Uniform ± spread of the pause, ms. Default 100. */
  retryJitter?: number
  /** Drift allowance per unit of ttl, in [0, 0.5). Default 0.01. */
  driftFactor?: number
  /** Fixed drift allowance, ms. Default 2. */
  driftConstant?: number
  /** Per-node request timeout, ms. Default 50. */
  nodeTimeout?: number
  /** Per-node connection timeout, ms. Default 1000. */
  connectTimeout?: number
  /** Largest ttl allowed and the restart quarantine, ms. Default 60000. */
  maxTtl?: number
  /** Keep restarted nodes out of the quorum. Default true. */
  restartQuarantine?: boolean
  /**
   * Replica acknowledgement, 0 (off, the default) to 16: a node's "yes" counts only once this
   * many of its master's replicas acknowledged the write (WAIT); a node whose master changed
   * then counts at once instead of sitting out the failover quarantine. Safe only when every
   * client of these nodes sets it, to the number of replicas each master has; refused with a
   * `redis-cluster://` node.
   */
  replicaAcks?: number
  /**
   * Re-seat on extension: write a held lock's keys back on a node that restarted and lost
   * them (never over another client's key), so the lock survives a rolling restart. Default
   * true.
   */
  reseat?: boolean
  /** Prepended to every resource name to form the Redis key. Default "". */
  keyPrefix?: string
  /** A grant needs validity above this, ms. Default 0. */
  minValidity?: number
  /** How often one lock may be extended; `null` or absent = unlimited. */
  maxExtensions?: number | null
  /** Auto-extension extends when remaining validity falls below this, ms; `null` or absent = ttl / 3. */
  extensionThreshold?: number | null
  /** Acquire fairly (FIFO across the quorum) unless an acquire says otherwise. Default false. */
  fair?: boolean
  /** How long a fair waiter's queue entry outlives its last heartbeat, ms; `null` or absent = 2 × retryDelay. */
  queueTimeout?: number | null
  /** The name the nodes' certificates must hold when the URLs name them otherwise (see `tls.servername`). */
  tlsServerName?: string
  /** The ACL user `redis-sentinel://` voters log in to their sentinels with. */
  sentinelUsername?: string
  /** The password `redis-sentinel://` voters log in to their sentinels with (never shown). */
  sentinelPassword?: string
  /** node-redlock's name for `extensionThreshold`. */
  automaticExtensionThreshold?: number
  /** Trust only this CA (PEM) for `rediss://` nodes instead of the system's roots. */
  tlsCaCert?: string | Uint8Array
  /** Client certificate (PEM) for mutual TLS (servers with `tls-auth-clients yes`). */
  tlsClientCert?: string | Uint8Array
  /** Private key (PEM) of `tlsClientCert`. */
  tlsClientKey?: string | Uint8Array
  /**
   * node:tls / ioredis names for the same: `{ ca, cert, key }` (strings or Buffers), and
   * `servername`, the name the nodes' certificates must hold when the URLs name them otherwise
   * (an IP address); also sent as SNI. Verification is never off.
   */
  tls?: { ca?: string | Uint8Array; cert?: string | Uint8Array; key?: string | Uint8Array; servername?: string }
}

/** ioredis-style options of one node (`tls` true or `{ ca }`; verification is never off). */
export interface NodeOptions {
  /** Host name or address (default 127.0.0.1). */
  host?: string
  /** TCP port (default 6379). */
  port?: number
  /** Unix socket path. */
  path?: string
  /** ACL user name. */
  username?: string
  /** Password (never shown in errors, reports or logs). */
  password?: string
  /** Database number. */
  db?: number
  /**
   * TLS: `true`, or node:tls options of which `ca`, `cert`, `key` and `servername` are read:
   * this node's own, over the manager's `settings.tls`.
   */
  tls?:
    | boolean
    | {
        ca?: string | Uint8Array | Array<string | Uint8Array>
        cert?: string | Uint8Array
        key?: string | Uint8Array
        servername?: string
        [option: string]: unknown
      }
  /** ioredis's key prefix; ironlock uses it as `keyPrefix` when every client agrees. */
  keyPrefix?: string
}

/** node-redis-style options of one node. */
export interface NodeRedisOptions {
  /** `redis://` or `rediss://` URL. */
  url?: string
  /** Where to connect (node-redis's `socket`). */
  socket?: { host?: string; port?: number; path?: string; tls?: boolean; ca?: string | Uint8Array }
  /** ACL user name. */
  username?: string
  /** Password (never shown in errors, reports or logs). */
  password?: string
  /** Database number. */
  database?: number
}

/** A sentinel or cluster seed address: `{host, port}`, `"host:port"` or a port number. */
export type NodeAddress = { host?: string; port?: number } | string | number

/**
 * A Sentinel-managed master as ioredis's Sentinel options: one voter. The credentials and `db`
 * are the data nodes'; `sentinelUsername` / `sentinelPassword` must equal the manager's settings
 * when both are given (a manager has one sentinel login). TLS applies to the sentinels and the
 * master alike (`rediss-sentinel://`).
 */
export interface SentinelNodeOptions {
  /** The sentinels (port 26379 when not given). */
  sentinels: NodeAddress[]
  /** The master's name among the sentinels. */
  name: string
  /** ACL user name of the data nodes. */
  username?: string
  /** Password of the data nodes (never shown). */
  password?: string
  /** Database number. */
  db?: number
  /** ACL user name at the sentinels (the manager's `sentinelUsername`). */
  sentinelUsername?: string
  /** The sentinels' password (the manager's `sentinelPassword`; never shown). */
  sentinelPassword?: string
  /** TLS with the master and the sentinels alike: `true`, or node:tls options as `NodeOptions.tls`. */
  tls?: NodeOptions['tls']
  /** ioredis's TLS options for the sentinels: must agree with `tls` (on for both, or off). */
  sentinelTLS?: NodeOptions['tls']
  /** ioredis's key prefix; ironlock uses it as `keyPrefix` when every client agrees. */
  keyPrefix?: string
}

/** A Redis Cluster given by its seed nodes: one voter (database 0 only). */
export interface ClusterNodeOptions {
  /** The seed nodes (port 6379 when not given); the others are found from them. */
  cluster: NodeAddress[]
  /** ACL user name of the cluster's nodes. */
  username?: string
  /** Password of the cluster's nodes (never shown). */
  password?: string
  /** TLS: `true`, or node:tls options as `NodeOptions.tls`. */
  tls?: NodeOptions['tls']
  /** A key prefix; ironlock uses it as `keyPrefix` when every node object agrees. */
  keyPrefix?: string
}

/** An ioredis `Cluster` instance: its `startupNodes` and `options.redisOptions` are read. */
export interface ClusterClientLike {
  /** Set by ioredis on every `Cluster`. */
  isCluster: true
  /** The seed nodes the cluster client was created with. */
  startupNodes: NodeAddress[]
  /** The cluster client's options (`redisOptions`: username, password, tls; `keyPrefix`). */
  options: object
}

/**
 * One node: a URL, an options object (a standalone node's, ioredis's Sentinel options, or a
 * cluster's seeds), or an ioredis / node-redis client instance (its `options` are read; an
 * ioredis `Cluster` or Sentinel-configured client is one voter; ironlock opens its own
 * connections).
 */
export type RedisNode =
  | string
  | NodeOptions
  | NodeRedisOptions
  | SentinelNodeOptions
  | ClusterNodeOptions
  | ClusterClientLike
  | { options: object }

/**
 * The nodes of a manager: node values, one comma-separated string of URLs, or nothing
 * (`IRONLOCK_NODES`, then `REDIS_URL`).
 */
export type Nodes = Iterable<RedisNode> | string | null | undefined

/** Options of one acquire. */
export interface AcquireOptions {
  /** Keep retrying until this many milliseconds have passed. */
  wait?: number
  /** Overrides the manager's `retryCount` (0 = a single round, -1 = until acquired). */
  retryCount?: number
  /** Compute a fencing token (`lock.fence`). */
  fencing?: boolean
  /**
   * Wait in line (FIFO across the quorum); unset takes the manager's `fair` setting. Readers
   * and writers of a read-write lock wait in the same line as fair locks of the name.
   */
  fair?: boolean
  /**
   * Hold the lock at least this many milliseconds after the grant: a release before then
   * leaves it taken until then (a job that finished early is not run again meanwhile by a
   * machine whose schedule is a little behind). At most the duration; plain locks only
   * (refused for semaphore permits and read-write locks).
   */
  minHold?: number
  /** Cancels a waiting acquire; the promise then rejects with `signal.reason`. */
  signal?: AbortSignalLike
}

/** node-redlock's per-call settings of `Redlock.acquire` / `Redlock.using`, and ironlock's options. */
export interface RedlockAcquireSettings extends AcquireOptions {
  /** Mean pause between rounds for this call, in ms. */
  retryDelay?: number
  /** Uniform ± spread of the pause for this call, in ms. */
  retryJitter?: number
  /** Clock drift allowance per unit of ttl for this call. */
  driftFactor?: number
  /** node-redlock's name for `extensionThreshold`. */
  automaticExtensionThreshold?: number
  /** `using` extends when the remaining validity falls below this many ms. */
  extensionThreshold?: number
}

/** A node as node-redlock keys its votes: the client given, else the node's password-free URL. */
export type Voter = string | object

/** node-redlock's summary of one round. */
export interface ExecutionStats {
  /** Nodes asked. */
  readonly membershipSize: number
  /** Nodes needed. */
  readonly quorumSize: number
  /** The nodes that voted for. */
  readonly votesFor: Set<Voter>
  /** Why each other node did not vote for: a `ResourceLockedError`, or the node's error. */
  readonly votesAgainst: Map<Voter, Error>
}

/** node-redlock's result of an operation: one Promise of `ExecutionStats` per round. */
export interface ExecutionResult {
  /** One Promise of `ExecutionStats` per round (the core reports the last round's votes). */
  readonly attempts: ReadonlyArray<Promise<ExecutionStats>>
}

/** What a release did. */
export interface ReleaseResult extends ExecutionResult {
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
  /** Stops extending; the lock stays held until it expires or is released. */
  stop(): void
}

/** A lock granted by a quorum. Not released when garbage-collected: release it. */
export declare class Lock {
  /** Locks come only from `acquire`. */
  private constructor()
  /** The manager that granted this lock. */
  readonly manager: LockManager
  /** node-redlock's name for `manager`. */
  readonly redlock: LockManager
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
  /**
   * Which side of a read-write lock (`manager.rwLock(resource)`) this is: `'read'` (shared with
   * other readers) or `'write'` (exclusive); null for a plain lock or a semaphore permit.
   */
  readonly access: 'read' | 'write' | null
  /** Per-node report of the last operation on this lock. */
  readonly report: NodeReport[]
  /** Milliseconds the last operation's (last) round took. */
  readonly elapsed: number
  /** Rounds the last operation ran (retries + 1 for the acquire; 1 after an extend). */
  readonly rounds: number
  /** node-redlock's per-round stats of the last operation (the acquire or the last extend). */
  readonly attempts: ReadonlyArray<Promise<ExecutionStats>>
  /** Still within its validity and not lost. */
  isValid(): boolean
  /** An extension found it gone, or its validity ran out before an extension. */
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
  /** `await using lock = …` releases it at the end of the block. */
  [Symbol.asyncDispose](): Promise<void>
  /** `JSON.stringify(lock)`: what identifies the lock and its validity; nothing about the nodes. */
  toJSON(): LockJSON
}

/** `JSON.stringify(lock)`'s object. */
export interface LockJSON {
  /** The resource names. */
  resources: string[]
  /** The token stored under every key (what `releaseToken` needs in another process). */
  value: string
  /** The fencing token as a decimal string (JSON has no bigint), or null. */
  fence: string | null
  /** End of validity in epoch milliseconds. */
  expiration: number
  /** Remaining validity in milliseconds when serialized. */
  validityMs: number
  /** Known lost when serialized. */
  lost: boolean
}

/** What one node holds under a resource's key (`LockManager#inspect`). */
export interface Holder {
  /** The node's URL, password replaced by `***`. */
  url: string
  /** The token stored under the key; null when the key does not exist (or the node failed). */
  token: string | null
  /** The key's remaining time to live in milliseconds; null when it does not exist. */
  ttl: number | null
  /** The permits of the semaphore of the same name on this node, longest-lived first. */
  permits: Array<{ token: string; ttl: number }>
  /** The limit that semaphore is in use with on this node; null while it has no holders. */
  limit: number | null
  /** Why the node could not be asked; null when it answered. */
  error: string | null
}

/** `using`'s signal: aborted when the lock is lost; `error` is then the reason (node-redlock). */
export type RedlockAbortSignal = AbortSignalLike & { readonly error?: Error }

/** A routine run by `using`: `signal` aborts when the lock is lost. */
export type Routine<T> = (signal: RedlockAbortSignal, lock: Lock) => Promise<T> | T

/** Takes Redlock locks over N independent Redis masters. */
export declare class LockManager extends EventEmitter {
  /** Validates at once (throws InvalidArgumentError / ConnectionError) and connects in the background. */
  constructor(nodes?: Nodes, settings?: Settings)
  /**
   * A manager with a quorum of nodes connected. Rejects with ConnectionError, naming each node
   * that is not connected and why, when fewer than a quorum are after every node was tried once.
   */
  static connect<T extends LockManager>(
    this: new (nodes?: Nodes, settings?: Settings) => T,
    nodes?: Nodes,
    settings?: Settings,
  ): Promise<T>
  /** Resolves once the manager has started (see `connect`). */
  ready(): Promise<void>
  /**
   * Acquires every resource (all or none) for `durationMs`, retrying as the settings and
   * `options` say; rejects with LockContendedError, QuorumUnavailableError or
   * InvalidArgumentError (naming the argument).
   */
  acquire(resources: string[], durationMs: number, options?: AcquireOptions): Promise<Lock>
  /**
   * The counting semaphore `resource` with `limit` permits (1 to 10000): at most `limit` holders
   * at once across the quorum. A permit needs floor(limit × N / (limit + 1)) + 1 admitting
   * nodes (more than a majority for a limit of 2 or more).
   */
  semaphore(resource: string, limit: number): Semaphore
  /**
   * The read-write lock `resource`: readers share it, a writer excludes readers and other
   * writers, and a plain lock of the same name excludes both (and is excluded by either). A
   * writer that is waiting holds back new readers, so writers are not starved by a stream of
   * readers. Throws InvalidArgumentError at once when `resource` is not a string.
   */
  rwLock(resource: string): RwLock
  /**
   * The leader election `name`: `campaign` waits in line until this candidate leads (in the
   * order candidates queued), `leader()` reads who leads, `observe()` follows every change of
   * leader. Throws InvalidArgumentError at once for a bad name (`name: …`).
   */
  election(name: string): Election
  /** Releases `lock` (node-redlock's `redlock.release(lock)`). */
  release(lock: Lock): Promise<ReleaseResult>
  /** Extends `lock` to `durationMs` from now; resolves to the lock. */
  extend(lock: Lock, durationMs: number): Promise<Lock>
  /**
   * Acquires, runs `routine` while the lock is extended automatically, then releases with the
   * loss rule; rejects with LockLostError if the lock was lost (the routine's signal aborts).
   */
  using<T>(resources: string[], durationMs: number, routine: Routine<T>): Promise<T>
  /** As above, with acquire options (`signal` also aborts the routine's signal). */
  using<T>(
    resources: string[],
    durationMs: number,
    options: AcquireOptions | undefined,
    routine: Routine<T>,
  ): Promise<T>
  /** Counters and latency histograms since the manager was created (zero until connected). */
  stats(): Stats
  /** The node URLs, passwords replaced by `***`. */
  readonly nodes: string[]
  /** Q = floor(N / 2) + 1: how many nodes must grant a lock. */
  readonly quorum: number
  /** True once `close()` was called. */
  readonly closed: boolean
  /** Who holds `resource` on each node, in node order (read-only; for monitoring and tools). */
  inspect(resource: string): Promise<Holder[]>
  /**
   * Deletes `resources` on every node where they still hold `token` (a lock taken elsewhere,
   * whose `value` was handed over); resolves to whether a quorum still held it.
   */
  releaseToken(resources: string[], token: string): Promise<boolean>
  /** Stops background work; held locks are not released; later calls reject UNAVAILABLE. */
  close(): Promise<void>
}

/** A latency histogram: `counts[i]` calls took at most `buckets[i]` s (the last count: more). */
export interface Latency {
  /** Upper bounds of the buckets, in seconds (0.0001 … 10). */
  readonly buckets: ReadonlyArray<number>
  /** Calls per bucket (not cumulative); one more than `buckets`: the last is above 10 s. */
  readonly counts: ReadonlyArray<number>
  /** Calls recorded. */
  readonly count: number
  /** Their total duration in seconds. */
  readonly sum_seconds: number
}

/** `LockManager#stats()`: the same field names in every language. */
export interface Stats {
  /** Acquire calls that returned a lock. */
  readonly granted: number
  /** Acquire calls that failed: the lock is held elsewhere. */
  readonly contended: number
  /** Acquire calls that failed: no quorum of eligible nodes. */
  readonly unavailable: number
  /** Acquire rounds run (every try of every call). */
  readonly rounds: number
  /** Rounds after the first of their call. */
  readonly retries: number
  /** Waits ended early by a release notification. */
  readonly wakeups: number
  /** Extensions a quorum granted. */
  readonly extensions: number
  /** Extensions that failed. */
  readonly extension_failures: number
  /** Releases of locks this manager granted. */
  readonly releases: number
  /** Locks lost while held. */
  readonly lost: number
  /** Keys re-seated on restarted nodes. */
  readonly reseats: number
  /** Restart quarantines entered by nodes. */
  readonly quarantines: number
  /** Node reconnections. */
  readonly reconnects: number
  /** Node votes, summed over the nodes: counted "yes". */
  readonly votes_for: number
  /** "No" votes. */
  readonly votes_against: number
  /** Errors (including "not connected"). */
  readonly votes_error: number
  /** Timeouts. */
  readonly votes_timeout: number
  /** "Yes" votes not counted (restart quarantine). */
  readonly votes_not_eligible: number
  /** Acquire calls, call to outcome. */
  readonly acquire_latency: Latency
  /** Acquire rounds, first request to decision. */
  readonly round_latency: Latency
}

/** A counting semaphore (`manager.semaphore(resource, limit)`). */
export interface Semaphore {
  /** The resource name. */
  readonly resource: string
  /** How many permits may be held at once. */
  readonly limit: number
  /**
   * Acquires one permit for `durationMs`: a Lock like any other (extend, release, finish,
   * keepAlive, fence, report). Rejects with LockContendedError when every permit stays held,
   * QuorumUnavailableError when too few nodes could admit it (the message says how many).
   */
  acquire(durationMs: number, options?: AcquireOptions): Promise<Lock>
}

/**
 * A read-write lock (`manager.rwLock(resource)`). Both sides are Locks like any other (extend,
 * release, finish, keepAlive, fence, report), granted by the same majority of nodes as a lock;
 * `lock.access` says which side. Fencing tokens grow across reads and writes alike.
 */
export interface RwLock {
  /** The resource name. */
  readonly resource: string
  /**
   * Acquires the read (shared) side for `durationMs`: granted alongside other readers; rejects
   * with LockContendedError while a writer holds the resource or waits for it, or a plain lock
   * of the same name holds it. With `fair: true` it waits in line: admitted when no writer or
   * plain lock holds it or waits ahead of it. `minHold` is refused with InvalidArgumentError
   * (`min_hold: …`).
   */
  read(durationMs: number, options?: AcquireOptions): Promise<Lock>
  /**
   * Acquires the write (exclusive) side for `durationMs`: rejects with LockContendedError while
   * readers, another writer or a plain lock of the same name hold the resource. While it waits
   * (`wait`, `retryCount`), new readers are refused, and a release by the last reader wakes it.
   * A writer that gives up or is aborted stops holding readers back. With `fair: true` it waits
   * in line: granted when nobody holds the resource and it heads the line. `minHold` is refused
   * with InvalidArgumentError (`min_hold: …`).
   */
  write(durationMs: number, options?: AcquireOptions): Promise<Lock>
}

/**
 * Who leads an election (`election.leader()`, `election.observe()`): a plain frozen object.
 */
export interface Leader {
  /** The value the leader advertises (its address, say), as it last proclaimed it. */
  readonly value: string
  /**
   * The leader's term: the fencing token of its grant. Every later leader's term is larger, so
   * a write carrying a smaller term than one already seen comes from a deposed leader.
   */
  readonly term: bigint
  /** The leader's token (its `leadership.token`). */
  readonly token: string
  /**
   * How long the leadership stays valid at most, in milliseconds, as the majority of nodes that
   * hold it see it (less the read's own duration).
   */
  readonly validityMs: number
}

/** Options of `election.campaign`. */
export interface CampaignOptions {
  /**
   * Give up after this many milliseconds in line (rejects with LockContendedError; the candidate
   * leaves the line on every node). Unset: wait as long as it takes.
   */
  wait?: number
  /**
   * Cancels the campaign: the candidate leaves the line on every node, and the promise rejects
   * with `signal.reason`.
   */
  signal?: AbortSignalLike
}

/** Options of `election.observe`. */
export interface ObserveOptions {
  /** Ends the iteration when aborted (the loop finishes; nothing is thrown). */
  signal?: AbortSignalLike
}

/**
 * The leader election `name` of a manager (`manager.election(name)`). Candidates wait in line
 * and lead one at a time, in the order they queued; a candidate learns it leads only once a
 * majority of nodes granted it. Its key is the lock key of `name`: a plain lock of that name
 * excludes every candidate.
 */
export declare class Election {
  /** Elections come only from `manager.election(name)`. */
  private constructor()
  /** The election's name, as given. */
  readonly name: string
  /** The manager the election runs on. */
  readonly manager: LockManager
  /**
   * Waits in line until this candidate leads, then resolves to its Leadership, extended in the
   * background `durationMs` at a time until it is resigned or lost. Candidates are served in the
   * order they queued; the leadership is granted only once a majority of nodes granted it, with
   * `value` (at most 65536 bytes of UTF-8) and its term written on them. Rejects with
   * LockContendedError after `options.wait`, with `signal.reason` when `options.signal` aborts
   * (either way the candidate leaves the line on every node), with InvalidArgumentError naming
   * the argument (`value: …`, `durationMs: …`, `options.wait: …`) on bad input.
   */
  campaign(value: string, durationMs: number, options?: CampaignOptions): Promise<Leadership>
  /**
   * Who leads now, read from every node: the token a majority of nodes hold under the
   * election's key, with its value and term; null when nobody leads. Rejects with
   * QuorumUnavailableError when fewer than a majority of nodes answer.
   */
  leader(): Promise<Leader | null>
  /**
   * Every change of leader, in order: first who leads now (null: nobody), then each new leader
   * or new value (terms only grow), or null when nobody leads any more. A change undone before a
   * read sees it (a candidate that led and resigned between two reads) is not delivered. The
   * iteration finishes when the manager is closed, when `options.signal` aborts, or when the loop
   * is left early (`break`), which stops the watch on the nodes.
   */
  observe(options?: ObserveOptions): LeaderChanges
  /** `Election("name")`. */
  toString(): string
}

/**
 * The changes of leader of an election (`election.observe()`), for `for await`. Leaving the loop
 * (or `return()`) stops it; a stopped iterator keeps nothing running.
 */
export interface LeaderChanges extends AsyncIterableIterator<Leader | null> {
  /** The next leader (null: nobody leads); `done` once the manager is closed or it is stopped. */
  next(): Promise<IteratorResult<Leader | null, undefined>>
  /** Stops the iteration (what `break` calls); a pending `next()` then finishes too. */
  return(): Promise<IteratorReturnResult<undefined>>
  /** The iterator itself. */
  [Symbol.asyncIterator](): LeaderChanges
  /** `await using changes = election.observe()` stops it at the end of the block. */
  [Symbol.asyncDispose](): Promise<void>
}

/**
 * This candidate's leadership (`election.campaign`), extended in the background until resigned
 * or lost. Keep a reference while leading: a leadership that is garbage-collected stops being
 * extended, and the next candidate leads once it expires (at most a ttl later), as when a
 * leader's process dies.
 */
export declare class Leadership {
  /** Leaderships come only from `election.campaign`. */
  private constructor()
  /** The election this leadership is of. */
  readonly election: Election
  /**
   * The term: the fencing token of this leadership's grant, larger than every earlier leader's.
   * Pass it to whatever the leader writes to, so that a deposed leader's late writes (with a
   * smaller term) can be refused.
   */
  readonly term: bigint
  /** The value this leader advertises, as last proclaimed. */
  readonly value: string
  /** The leadership's token (`leader().token` while this candidate leads). */
  readonly token: string
  /**
   * Remaining validity in milliseconds (monotonic clock). It ends a tenth of the duration (at
   * most a second) before the nodes' keys expire, so that a leader hears of its loss before
   * another candidate can lead; 0 once lost or resigned.
   */
  readonly validityMs: number
  /** True while this candidate leads (not lost, resigned or run out). */
  isLeader(): boolean
  /** True once the leadership is known lost. */
  isLost(): boolean
  /**
   * Resolves with `true` when the leadership is lost: when its extensions stop reaching a
   * majority, it counts as lost a tenth of its duration (at most a second) before its validity
   * would end, so before another candidate can be granted the election. Resolves with `false`
   * once resigned. The same Promise on every read; pending, it keeps the process running.
   */
  readonly lost: Promise<boolean>
  /**
   * Advertises a new `value`, only while still leader: rejects with LockLostError when no longer
   * the leader, QuorumUnavailableError when fewer than a majority of nodes wrote it.
   */
  proclaim(value: string): Promise<void>
  /**
   * Steps down at once: stops the extensions and deletes the election's key where it still
   * holds this leadership, which wakes the next candidate in line. Never rejects for a lost
   * leadership (`held` says whether a majority still held it).
   */
  resign(): Promise<ReleaseResult>
  /** `await using me = await election.campaign(…)` resigns at the end of the block. */
  [Symbol.asyncDispose](): Promise<void>
  /** `Leadership("name", term 7)`. */
  toString(): string
  /** `JSON.stringify(leadership)`: its election, value, term (a decimal string), token, validity and loss. */
  toJSON(): LeadershipJSON
}

/** `JSON.stringify(leadership)`'s object. */
export interface LeadershipJSON {
  /** The election's name. */
  election: string
  /** The advertised value. */
  value: string
  /** The term as a decimal string (JSON has no bigint). */
  term: string
  /** The leadership's token. */
  token: string
  /** Remaining validity in milliseconds when serialized. */
  validityMs: number
  /** Known lost when serialized. */
  lost: boolean
}

/**
 * node-redlock 5's `Redlock` over ironlock's core: `new Redlock(clients, settings)` with ioredis /
 * node-redis clients, options objects or URLs; per-call settings; `on("error", …)` for every
 * node that did not vote for an operation.
 */
export declare class Redlock extends LockManager {
  /** node-redlock's constructor: clients, options objects or URLs, and its settings. */
  constructor(clients?: Nodes, settings?: Settings)
  /** node-redlock's acquire with per-call settings. */
  acquire(resources: string[], duration: number, settings?: RedlockAcquireSettings): Promise<Lock>
  /** One round; `settings` is accepted for node-redlock's signature. */
  release(lock: Lock, settings?: Partial<RedlockAcquireSettings>): Promise<ReleaseResult>
  /** Extends `lock` and resolves to it (one round; `settings` is accepted, not used). */
  extend(lock: Lock, duration: number, settings?: Partial<RedlockAcquireSettings>): Promise<Lock>
  /** node-redlock's `using`: auto-extension, then release with the loss rule. */
  using<T>(
    resources: string[],
    duration: number,
    settings: RedlockAcquireSettings | undefined,
    routine: Routine<T>,
  ): Promise<T>
  /** As above, with the manager's settings. */
  using<T>(resources: string[], duration: number, routine: Routine<T>): Promise<T>
  /** Closes ironlock's connections and quits the client instances it was given. */
  quit(): Promise<void>
  /** Emitted for every node that did not vote for an operation (node-redlock's events). */
  on(event: 'error', listener: (error: Error) => void): this
  /** EventEmitter's other events. */
  on(event: string | symbol, listener: (...args: any[]) => void): this
}

/** Base class of every ironlock error. */
export declare class IronlockError extends Error {
  /** The error kind, the same code in every language. */
  readonly code: ErrorCode
  /** Per-node report of the last round; empty when no node was asked. */
  readonly report: NodeReport[]
  /** Milliseconds the last round took (0 when no node was asked). */
  readonly elapsed: number
  /** Rounds run (0 when no node was asked). */
  readonly rounds: number
}
/**
 * A quorum operation failed (node-redlock's class): every failed acquisition (CONTENDED,
 * UNAVAILABLE), and LOST.
 */
export declare class ExecutionError extends IronlockError {
  /** node-redlock's constructor. */
  constructor(message: string, attempts: ReadonlyArray<Promise<ExecutionStats>>)
  /** One Promise of node-redlock's stats per round (the core reports the last round's votes). */
  readonly attempts: ReadonlyArray<Promise<ExecutionStats>>
  /** Why the operation failed. */
  readonly code: 'CONTENDED' | 'UNAVAILABLE' | 'LOST'
}
/** CONTENDED: the lock is held elsewhere. */
export declare class LockContendedError extends ExecutionError {
  /** Always `CONTENDED`. */
  readonly code: 'CONTENDED'
}
/** UNAVAILABLE: no quorum, nodes down, slow or quarantined. */
export declare class QuorumUnavailableError extends ExecutionError {
  /** Always `UNAVAILABLE`. */
  readonly code: 'UNAVAILABLE'
}
/** LOST: the lock expired or was taken over. */
export declare class LockLostError extends ExecutionError {
  /** Always `LOST`. */
  readonly code: 'LOST'
}
/** INVALID_ARGUMENT: bad input; the message names the argument. */
export declare class InvalidArgumentError extends IronlockError {
  /** Always `INVALID_ARGUMENT`. */
  readonly code: 'INVALID_ARGUMENT'
}
/** CONNECTION: the node list cannot be used at all. */
export declare class ConnectionError extends IronlockError {
  /** Always `CONNECTION`. */
  readonly code: 'CONNECTION'
}
/** INTERNAL: a bug in ironlock. */
export declare class InternalError extends IronlockError {
  /** Always `INTERNAL`. */
  readonly code: 'INTERNAL'
}
/** node-redlock's vote reason: another lock holds a resource. A value, never thrown. */
export declare class ResourceLockedError extends Error {
  /** node-redlock's constructor. */
  constructor(message: string)
}

/** The version of the Rust core inside the native module. */
export declare const coreVersion: string

/** One node's part in the last round (the loose shape of `NodeReport`). */
export interface NodeReportObject {
  /** Node URL with any password replaced by `***`. */
  url: string
  /** `for`, `against`, `error`, `timeout`, `not_eligible`, `pending` or (extend only) `reseated`. */
  vote: string
  /** The error text for `error` and `timeout` votes. */
  error?: string
}

/** node-redlock's CommonJS build: `require('ironlock').default` is `Redlock`. */
export { Redlock as default }
