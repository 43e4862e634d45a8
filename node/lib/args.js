'use strict'
// Type checks for values coming from JavaScript. Ranges (NaN, negative, fractional, too large,
// empty, duplicate) are checked by the Rust core, which names the argument too. Messages quote
// what the caller passed cut to ~80 characters.

const { invalid, cut } = require('./errors.js')

function describe(v) {
  if (v === null) return 'null'
  if (Array.isArray(v)) return 'an array'
  return typeof v === 'object' ? 'an object' : typeof v
}

function stringArray(name, v) {
  if (!Array.isArray(v)) {
    throw invalid(`${name}: expected an array of strings, got ${describe(v)}`)
  }
  for (let i = 0; i < v.length; i++) {
    if (typeof v[i] !== 'string') throw invalid(`${name}[${i}]: expected a string, got ${describe(v[i])}`)
  }
  return v
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/

/** Whether `s` holds a lone surrogate (then it has no UTF-8 form). */
const illFormed =
  typeof String.prototype.isWellFormed === 'function'
    ? (s) => !s.isWellFormed()
    : (s) => LONE_SURROGATE.test(s)

/** Resource names: strings that are well-formed Unicode (they become UTF-8 Redis keys). */
function resources(name, v) {
  stringArray(name, v)
  for (let i = 0; i < v.length; i++) {
    if (illFormed(v[i])) {
      throw invalid(`${name}[${i}]: not valid Unicode (lone surrogate), cannot be UTF-8`)
    }
  }
  return v
}

/** One resource name (a semaphore's): a string of well-formed Unicode. */
function resource(name, v) {
  if (typeof v !== 'string') throw invalid(`${name}: expected a string, got ${describe(v)}`)
  if (illFormed(v)) throw invalid(`${name}: not valid Unicode (lone surrogate), cannot be UTF-8`)
  return v
}

function number(name, v) {
  if (typeof v !== 'number') {
    throw invalid(`${name}: expected a number of milliseconds, got ${describe(v)}`)
  }
  return v
}

/** Below this many milliseconds a lock duration is most likely seconds given by habit. */
const SHORT_TTL_MS = 100
let warnedShortTtl = false

/**
 * A lock duration in milliseconds. One below SHORT_TTL_MS is legal (the core refuses only a
 * duration that leaves no validity), but `acquire(['x'], 10)` is usually "10 seconds" written by
 * habit: the first such call of the process emits a warning (code IRONLOCK_SHORT_TTL).
 */
function ttl(name, v) {
  number(name, v)
  if (!warnedShortTtl && v > 0 && v < SHORT_TTL_MS) {
    warnedShortTtl = true
    process.emitWarning(
      `${name}: ${v} ms is a very short lock duration; durations are milliseconds in ironlock's Node API (${v} seconds is ${v * 1000})`,
      { code: 'IRONLOCK_SHORT_TTL' },
    )
  }
  return v
}

/** A count: a number, or -1 for "no limit" where the native layer accepts it. */
function count(name, v) {
  if (typeof v !== 'number') throw invalid(`${name}: expected a number, got ${describe(v)}`)
  return v
}

function boolean(name, v) {
  if (typeof v !== 'boolean') throw invalid(`${name}: expected a boolean, got ${describe(v)}`)
  return v
}

function string(name, v) {
  if (typeof v !== 'string') throw invalid(`${name}: expected a string, got ${describe(v)}`)
  return v
}

/** PEM text, as a string or a Buffer / Uint8Array. */
function pem(name, v) {
  if (typeof v === 'string') return v
  if (v instanceof Uint8Array) return Buffer.from(v).toString('utf8')
  throw invalid(`${name}: expected PEM text (a string or a Buffer), got ${describe(v)}`)
}

function plainObject(name, v) {
  if (v === undefined || v === null) return {}
  if (typeof v !== 'object' || Array.isArray(v)) {
    throw invalid(`${name}: expected an object, got ${describe(v)}`)
  }
  return v
}

// The type check of each manager setting, by the kind the core's settings table gives it.
const CHECK_BY_KIND = {
  count,
  optionalCount: count,
  duration: number,
  optionalDuration: number,
  fraction: count,
  flag: boolean,
  text: string,
  pem,
}
const SETTINGS = {}
const OPTIONAL = new Set()
for (const [name, kind] of require('../index.js').settingKinds()) {
  SETTINGS[name] = CHECK_BY_KIND[kind]
  if (kind.startsWith('optional')) OPTIONAL.add(name)
}

// node-redlock's names for the same settings.
const ALIASES = { automaticExtensionThreshold: 'extensionThreshold' }

/** " (did you mean …?)" for an unknown option `key` close to one of `known` (the core's guess). */
function hint(key, known) {
  const meant = typeof key === 'string' ? require('../index.js').suggestName(key, known) : null
  if (meant === 'nodes') return ' (the nodes are the first argument, not a setting)'
  return meant ? ` (did you mean ${meant}?)` : ''
}

/** Manager settings, type-checked, with unknown names rejected. */
function settings(v, name = 'settings') {
  const out = {}
  for (const [key, value] of Object.entries(plainObject(name, v))) {
    const setting = ALIASES[key] ?? key
    if (setting === 'tls') {
      // node:tls / ioredis names: { ca, cert, key } (PEM strings or Buffers), servername.
      const tls = plainObject(`${name}.tls`, value)
      for (const [k, target] of [['ca', 'tlsCaCert'], ['cert', 'tlsClientCert'], ['key', 'tlsClientKey']]) {
        if (tls[k] !== undefined) out[target] = pem(`${name}.tls.${k}`, tls[k])
      }
      if (tls.servername !== undefined) out.tlsServerName = string(`${name}.tls.servername`, tls.servername)
      if (tls.rejectUnauthorized === false) {
        throw invalid(`${name}.tls.rejectUnauthorized: ironlock never turns certificate verification off`)
      }
      continue
    }
    const check = SETTINGS[setting]
    if (!check) {
      const known = [...Object.keys(SETTINGS), ...Object.keys(ALIASES), 'tls', 'nodes']
      throw invalid(`${name}.${cut(key)}: unknown setting${hint(key, known)}`)
    }
    if (value === undefined) continue
    // An optional setting (maxExtensions, extensionThreshold): null means its default.
    if (OPTIONAL.has(setting) && value === null) continue
    out[setting] = check(`${name}.${key}`, value)
  }
  return out
}

const ACQUIRE = { wait: number, fencing: boolean, retryCount: count, fair: boolean, minHold: number }

/**
 * Options of one acquire, type-checked; `signal` is split off. `more` adds the names a caller
 * accepts beyond `wait`, `fencing`, `retryCount`, `fair`, `minHold` and `signal` (Redlock's per-call
 * settings).
 */
function acquireOptions(v, more = {}) {
  const out = {}
  let signal
  for (const [key, value] of Object.entries(plainObject('options', v))) {
    if (value === undefined) continue
    if (key === 'signal') {
      if (!(value instanceof AbortSignal)) {
        throw invalid(`options.signal: expected an AbortSignal, got ${describe(value)}`)
      }
      signal = value
      continue
    }
    const name = ALIASES[key] ?? key
    const check = ACQUIRE[key] ?? more[name]
    if (!check) {
      const names = ['wait', 'fencing', 'fair', 'minHold', 'signal', 'retryCount', ...Object.keys(more)]
      throw invalid(
        `options.${cut(key)}: unknown acquire option${hint(key, names)} (per-call options are ${names.join(', ')}; set others on the manager)`,
      )
    }
    out[name] = check(`options.${key}`, value)
  }
  return { options: out, signal }
}

/**
 * Options of an election call, type-checked: only `names` are accepted (`wait`: a number of
 * milliseconds, `signal`: an AbortSignal); `what` names the call in the message of an unknown one.
 */
function electionOptions(v, names, what) {
  const out = {}
  for (const [key, value] of Object.entries(plainObject('options', v))) {
    if (value === undefined) continue
    if (!names.includes(key)) {
      throw invalid(
        `options.${cut(key)}: unknown ${what} option${hint(key, names)} (${what} options are ${names.join(', ')})`,
      )
    }
    if (key === 'signal') {
      if (!(value instanceof AbortSignal)) {
        throw invalid(`options.signal: expected an AbortSignal, got ${describe(value)}`)
      }
      out.signal = value
    } else {
      out[key] = number(`options.${key}`, value)
    }
  }
  return out
}

function func(name, v) {
  if (typeof v !== 'function') throw invalid(`${name}: expected a function, got ${describe(v)}`)
  return v
}

module.exports = {
  SETTINGS,
  stringArray,
  resources,
  resource,
  number,
  ttl,
  count,
  settings,
  acquireOptions,
  electionOptions,
  string,
  func,
  describe,
  plainObject,
}
