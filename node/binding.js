'use strict'
// Loads the native addon through the loader napi generates (index.js: `ironlock.<platform>.node`
// beside it, as a development build writes it, then the per-platform package
// `ironlock-<platform>`) and, when nothing fits this machine, replaces napi's generic "Cannot find
// native binding" with what a user can act on: which package it looked for, and what to do.

const PUBLISHED = ['linux-x64-gnu', 'linux-arm64-gnu', 'linux-x64-musl', 'linux-arm64-musl']

/** The platform key as napi names its packages and files (`linux-arm64-gnu`, `darwin-arm64`). */
function platformKey() {
  const { platform, arch } = process
  if (platform === 'linux') {
    return `linux-${arch}-${isMusl() ? 'musl' : 'gnu'}`
  }
  if (platform === 'win32') {
    return `win32-${arch}-msvc`
  }
  return `${platform}-${arch}`
}

function isMusl() {
  try {
    const report = process.report && process.report.getReport()
    if (report && report.header) {
      return !report.header.glibcVersionRuntime
    }
  } catch {
    // fall through to ldd
  }
  try {
    return require('fs').readFileSync('/usr/bin/ldd', 'utf8').includes('musl')
  } catch {
    return false
  }
}

/** The innermost messages of napi's load-error chain, one line each (at most five). */
function causes(err) {
  const out = []
  for (let e = err && err.cause; e && out.length < 5; e = e.cause) {
    const first = String(e.message || e).split('\n')[0]
    // napi's WASI fallback is not something ironlock ships: its misses are noise here.
    if (!out.includes(first) && !/wasi/i.test(first)) out.push(first)
  }
  return out
}

function explain(err) {
  const { version } = require('./package.json')
  const key = platformKey()
  const pkg = `ironlock-${key}`
  const file = `ironlock.${key}.node`
  let found = null
  try {
    found = require.resolve(`${pkg}/package.json`)
  } catch {
    // not installed
  }
  let text
  if (found) {
    text =
      `ironlock: the native addon for ${key} is installed (package ${pkg}, ${found}) but did ` +
      `not load. Reinstall it on this machine (npm install ${pkg}@${version}); if the system is ` +
      `older than glibc 2.17, ironlock's prebuilt addons do not fit it.`
  } else if (PUBLISHED.includes(key)) {
    text =
      `ironlock: no native addon for this platform (${key}): looked for the package ${pkg} and ` +
      `for ${file} beside ironlock's index.js. ${pkg} is an optional dependency of ironlock that ` +
      `npm installs only on the platform it fits: it is missing when npm ran with ` +
      `--omit=optional / --no-optional, or when node_modules or package-lock.json was made on ` +
      `another platform. To fix: npm install ${pkg}@${version} (or remove node_modules and ` +
      `package-lock.json and run npm install again on this machine).`
  } else {
    text =
      `ironlock: no prebuilt native addon for this platform (${key}): looked for the package ` +
      `${pkg}, which ironlock does not publish, and for ${file} beside ironlock's index.js. ` +
      `Prebuilt addons exist for ${PUBLISHED.join(', ')} (glibc 2.17 or later, or musl); ` +
      `macOS and Windows are not supported yet. To use ironlock here, build the addon from ` +
      `source with Rust 1.85 or later: in ironlock's repository run ` +
      `\`cd node && npm install && npx napi build --platform --release\`, which writes ${file} ` +
      `beside index.js, then install that folder (npm install /path/to/ironlock/node).`
  }
  const why = causes(err)
  if (why.length > 0) {
    text += `\nLoad errors:\n  ${why.join('\n  ')}`
  }
  const error = new Error(text)
  error.code = 'IRONLOCK_NO_NATIVE_ADDON'
  error.packageName = pkg
  error.platform = key
  error.cause = err
  return error
}

try {
  module.exports = require('./index.js')
} catch (err) {
  throw explain(err)
}
