'use strict'
// The node list in the forms Node users have at hand: URL strings, one comma-separated
// string, nothing (IRONLOCK_NODES, then REDIS_URL), option objects (ioredis's `{host, port,
// username, password, db, tls, path}` or node-redis's `{url}` / `{socket: {host, port, tls},
// username, password, database}`; a Sentinel-managed master as ioredis's Sentinel options
// `{sentinels, name, …}`; a Redis Cluster as `{cluster: [{host, port}, …], …}`) and ioredis or
// node-redis client instances (an ioredis `Cluster` and Sentinel-configured ioredis clients too),
// whose options are read. ironlock keeps its own connections: a client only says where its node is. The URL rules
// (splitting, the environment, percent-encoding credentials) are the core's.

const native = require('../index.js')
const { invalid, fromNative, cut } = require('./errors.js')
const { describe } = require('./args.js')

function call(f) {
  try {
    return f()
  } catch (e) {
    throw fromNative(e)
  }
}

/** True for an ioredis or node-redis client instance (its settings are in `client.options`). */
function isClient(v) {
  return (
    typeof v.options === 'object' &&
    v.options !== null &&
    (typeof v.sendCommand === 'function' || typeof v.connect === 'function')
  )
}

/** TLS options ironlock can honour: on, with the system's roots or one CA for every node. */
function tlsOf(what, tls) {
  if (tls === undefined || tls === null || tls === false) return { on: false }
  if (tls === true) return { on: true }
  if (typeof tls !== 'object') throw invalid(`${what}: expected an object or a boolean, got ${describe(tls)}`)
  if (tls.rejectUnauthorized === false) {
    throw invalid(`${what}.rejectUnauthorized: ironlock never turns certificate verification off`)
  }
  for (const key of ['pfx', 'passphrase']) {
    if (tls[key] !== undefined) {
      throw invalid(`${what}.${key}: give the client certificate and key as PEM (cert, key)`)
    }
  }
  const text = (v) =>
    v === undefined
      ? undefined
      : (Array.isArray(v) ? v : [v]).map((c) => (typeof c === 'string' ? c : Buffer.from(c).toString('utf8'))).join('\n')
  if ((tls.cert === undefined) !== (tls.key === undefined)) {
    throw invalid(`${what}: a client certificate (cert) needs its key (key), and the key its certificate`)
  }
  if (tls.servername !== undefined && typeof tls.servername !== 'string') {
    throw invalid(`${what}.servername: expected a string, got ${describe(tls.servername)}`)
  }
  return { on: true, ca: text(tls.ca), cert: text(tls.cert), key: text(tls.key), servername: tls.servername }
}

/**
 * `[{host, port}]` for the native layer from ioredis's address forms: `{host, port}` objects,
 * `"host:port"` strings (or `redis://host:port` URLs) and port numbers.
 */
function addresses(what, list) {
  if (!Array.isArray(list)) {
    throw invalid(`${what}: expected an array of {host, port} objects, got ${describe(list)}`)
  }
  if (list.length === 0) throw invalid(`${what}: empty array`)
  const num = (p) => (p === undefined || p === null ? undefined : Number(p))
  return list.map((a, k) => {
    const w = `${what}[${k}]`
    if (typeof a === 'number') return { host: '127.0.0.1', port: a }
    if (typeof a === 'string') {
      if (!a.includes('://')) return { host: a }
      let u
      try {
        u = new URL(a)
      } catch {
        throw invalid(`${w}: not a host:port or a URL: ${cut(a)}`)
      }
      return { host: u.hostname, port: num(u.port === '' ? undefined : u.port) }
    }
    if (typeof a === 'object' && a !== null && !Array.isArray(a)) {
      const host = a.host ?? '127.0.0.1'
      if (typeof host !== 'string') throw invalid(`${w}.host: expected a string, got ${describe(host)}`)
      return { host, port: num(a.port) }
    }
    throw invalid(`${w}: expected {host, port}, "host:port" or a port number, got ${describe(a)}`)
  })
}

/** A string option of `what`, or undefined (null and undefined: not given). */
function optText(what, v) {
  if (v === undefined || v === null) return undefined
  if (typeof v !== 'string') throw invalid(`${what}: expected a string, got ${describe(v)}`)
  return v
}

/**
 * A Sentinel-managed master (ioredis's Sentinel options `{sentinels, name, username, password,
 * db, sentinelUsername, sentinelPassword, tls}`, of an options object or of an ioredis client)
 * or a Redis Cluster (`{cluster: [{host, port}], username, password, tls}`, or an ioredis
 * `Cluster`: its `startupNodes` and `options.redisOptions`): its URL, TLS, key prefix and the
 * sentinels' login.
 */
function multiNode(what, o, kind) {
  const client = isClient(o)
  let opts
  let seeds
  let keyPrefix
  if (kind === 'cluster' && o.isCluster === true) {
    opts = typeof o.options?.redisOptions === 'object' && o.options.redisOptions !== null ? o.options.redisOptions : {}
    seeds = addresses(`${what}.startupNodes`, o.startupNodes)
    keyPrefix = o.options?.keyPrefix ?? opts.keyPrefix
  } else {
    opts = client ? o.options : o
    if (kind === 'cluster') {
      const key = opts.cluster !== undefined ? 'cluster' : 'startupNodes'
      seeds = addresses(`${what}.${key}`, opts[key])
    } else {
      seeds = addresses(`${what}.sentinels`, opts.sentinels)
    }
    keyPrefix = opts.keyPrefix
  }
  const parts = {
    username: optText(`${what}.username`, opts.username),
    password: optText(`${what}.password`, opts.password),
    db: opts.db === undefined || opts.db === null ? undefined : Number(opts.db),
  }
  let tls
  let login
  if (kind === 'sentinel') {
    if (opts.role === 'slave') {
      throw invalid(`${what}.role: a lock needs the master; leave role unset (or 'master')`)
    }
    // ironlock speaks TLS to the sentinels and the data nodes alike (rediss-sentinel://).
    if (opts.sentinelTLS !== undefined && opts.tls !== undefined && Boolean(opts.sentinelTLS) !== Boolean(opts.tls)) {
      throw invalid(`${what}.sentinelTLS: ironlock uses TLS with both the sentinels and the master, or with neither`)
    }
    tls = tlsOf(`${what}.tls`, opts.tls ?? opts.sentinelTLS)
    parts.sentinels = seeds
    parts.name = optText(`${what}.name`, opts.name)
    login = {
      what,
      username: optText(`${what}.sentinelUsername`, opts.sentinelUsername),
      password: optText(`${what}.sentinelPassword`, opts.sentinelPassword),
    }
    if (!client) {
      // An options object names no host of its own (an ioredis client always has defaults).
      for (const key of ['host', 'port', 'path']) {
        if (opts[key] !== undefined) throw invalid(`${what}.${key}: the addresses of this voter are in sentinels`)
      }
    }
  } else {
    tls = tlsOf(`${what}.tls`, opts.tls)
    parts.cluster = seeds
    if (!client) {
      for (const key of ['host', 'port', 'path', 'sentinels', 'name']) {
        if (opts[key] !== undefined) throw invalid(`${what}.${key}: the addresses of this voter are in cluster`)
      }
    }
  }
  parts.tls = tls.on
  const url = call(() => native.nodeUrl(what, parts))
  const own = ['ca', 'cert', 'key', 'servername'].some((k) => tls[k] !== undefined)
  const nodeTls = own ? { ca: tls.ca, cert: tls.cert, key: tls.key, servername: tls.servername } : undefined
  keyPrefix = typeof keyPrefix === 'string' && keyPrefix !== '' ? keyPrefix : undefined
  return { url, nodeTls, keyPrefix, login }
}

/** A node given as an object: its URL, and the settings it implies (CA, key prefix). */
function objectNode(what, o) {
  const client = isClient(o)
  const opts = client ? o.options : o
  if (Array.isArray(opts.rootNodes)) {
    throw invalid(
      `${what}: a node-redis cluster client; give {cluster: [{host, port}, …]}, an ioredis Cluster or a redis-cluster:// URL`,
    )
  }
  if (o.isCluster === true || (!client && (opts.cluster !== undefined || opts.startupNodes !== undefined))) {
    return multiNode(what, o, 'cluster')
  }
  if (opts.sentinels !== undefined && opts.sentinels !== null) return multiNode(what, o, 'sentinel')
  const socket = typeof opts.socket === 'object' && opts.socket !== null ? opts.socket : {}
  const host = opts.host ?? socket.host
  const port = opts.port ?? socket.port
  const path = opts.path ?? socket.path
  if (typeof opts.url === 'string' && host === undefined && port === undefined && path === undefined) {
    return { url: opts.url }
  }
  // node-redis: `socket.tls: true` with the TLS options (ca, …) beside it in `socket`.
  const tls = tlsOf(`${what}.tls`, opts.tls ?? (socket.tls === true ? socket : socket.tls))
  const parts = {
    host: host === undefined || host === null ? undefined : String(host),
    port: port === undefined || port === null ? undefined : Number(port),
    path: path === undefined || path === null ? undefined : String(path),
    username: opts.username ?? undefined,
    password: opts.password ?? undefined,
    db: opts.db ?? opts.database ?? undefined,
    tls: tls.on,
  }
  for (const key of ['username', 'password']) {
    if (parts[key] !== undefined && typeof parts[key] !== 'string') {
      throw invalid(`${what}.${key}: expected a string, got ${describe(parts[key])}`)
    }
  }
  if (parts.db !== undefined) parts.db = Number(parts.db)
  const url = call(() => native.nodeUrl(what, parts))
  const keyPrefix = typeof opts.keyPrefix === 'string' && opts.keyPrefix !== '' ? opts.keyPrefix : undefined
  const own = ['ca', 'cert', 'key', 'servername'].some((k) => tls[k] !== undefined)
  const nodeTls = own ? { ca: tls.ca, cert: tls.cert, key: tls.key, servername: tls.servername } : undefined
  return { url, nodeTls, keyPrefix }
}

/**
 * `{urls, nodes, nodeTls, keyPrefix}` for the core: the URLs, the caller's node objects by index
 * (clients only, null for URL strings and options objects; node-redlock keys its votes by client), each node's own TLS options
 * (`{index, ca, cert, key, servername}`, for the nodes whose object gives any) and the key
 * prefix the client objects agree on (undefined when none gives one).
 */
function resolveNodes(given) {
  if (given === undefined || given === null) {
    const env = call(() => native.nodesFromEnv())
    if (env === null) {
      throw invalid('nodes: none given, and neither IRONLOCK_NODES nor REDIS_URL is set')
    }
    return { urls: env, nodes: env.map(() => null) }
  }
  if (typeof given === 'string') {
    const urls = call(() => native.splitNodeList('nodes', given))
    return { urls, nodes: urls.map(() => null) }
  }
  if (typeof given !== 'object' || typeof given[Symbol.iterator] !== 'function') {
    throw invalid(`nodes: expected an array of URLs, clients or options objects, got ${describe(given)}`)
  }
  const list = Array.from(given)
  const urls = []
  const nodes = []
  const nodeTls = []
  const logins = []
  const prefixes = new Set()
  list.forEach((v, i) => {
    const what = `nodes[${i}]`
    if (typeof v === 'string') {
      urls.push(v)
      nodes.push(null)
      prefixes.add(undefined)
      return
    }
    if (typeof v !== 'object' || v === null || Array.isArray(v)) {
      throw invalid(
        `${what}: expected a URL string, an options object or an ioredis / node-redis client, got ${describe(v)}`,
      )
    }
    const node = objectNode(what, v)
    urls.push(node.url)
    // Clients key node-redlock's `attempts` votes (its API); an options object would carry its
    // password into them, so its votes are keyed by the report's password-free URL instead.
    nodes.push(isClient(v) ? v : null)
    if (node.nodeTls) nodeTls.push({ index: i, ...node.nodeTls })
    if (node.login) logins.push(node.login)
    prefixes.add(node.keyPrefix)
  })
  if (prefixes.size > 1) {
    throw invalid(
      `nodes: the clients use different key prefixes (${cut([...prefixes].map(String).join(', '))}); set settings.keyPrefix instead`,
    )
  }
  return { urls, nodes, nodeTls, keyPrefix: [...prefixes][0], logins }
}

/**
 * The sentinels' login the nodes carry → settings `s` (changed in place): a manager logs in to
 * every sentinel with one `sentinelUsername` / `sentinelPassword`, so a node's must equal the
 * setting (or another node's) or it is refused, named; the values are never shown.
 */
function applyLogins(s, logins) {
  for (const [key, slot] of [
    ['sentinelUsername', 'username'],
    ['sentinelPassword', 'password'],
  ]) {
    // A setting of the wrong type is named by the constructor's own check.
    const setting = typeof s[key] === 'string' ? s[key] : null
    const given = (logins ?? [])
      .filter((l) => typeof l[slot] === 'string')
      .map((l) => [`${l.what}.${key}`, l[slot]])
    if (setting === null && given.length === 0) continue
    const chosen = call(() => native.agreeSentinelLogin(key, `settings.${key}`, setting, given))
    if (chosen !== null && chosen !== undefined) s[key] = chosen
  }
}

module.exports = { resolveNodes, applyLogins }
