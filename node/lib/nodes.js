'use strict'
// The node list in the forms Node users have at hand: URL strings, one comma-separated
// string, nothing (IRONLOCK_NODES, then REDIS_URL), option objects (ioredis's `{host, port,
// username, password, db, tls, path}` or node-redis's `{url}` / `{socket: {host, port, tls},
// username, password, database}`) and ioredis or node-redis client instances, whose options are
// read. ironlock keeps its own connections: a client only says where its node is. The URL rules
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

/** A node given as an object: its URL, and the settings it implies (CA, key prefix). */
function objectNode(what, o) {
  const client = isClient(o)
  const opts = client ? o.options : o
  if (o.isCluster === true || Array.isArray(opts.startupNodes) || Array.isArray(opts.rootNodes)) {
    throw invalid(
      `${what}: a Redis Cluster client; Redlock needs independent masters: give one client or URL per master`,
    )
  }
  if (Array.isArray(opts.sentinels)) {
    throw invalid(`${what}: a Sentinel client; give the masters' URLs (or clients) instead`)
  }
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
    prefixes.add(node.keyPrefix)
  })
  if (prefixes.size > 1) {
    throw invalid(
      `nodes: the clients use different key prefixes (${cut([...prefixes].map(String).join(', '))}); set settings.keyPrefix instead`,
    )
  }
  return { urls, nodes, nodeTls, keyPrefix: [...prefixes][0] }
}

module.exports = { resolveNodes }
