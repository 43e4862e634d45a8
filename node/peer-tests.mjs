#!/usr/bin/env node
// node-redlock's own test suite (single.test.ts and multi.test.ts of node-redlock v5.0.0-beta.2,
// kept unchanged outside this repository in ../shared/peers/node-redlock/) run against ironlock's
// `Redlock`, with ava 4 in its default worker-thread mode and ioredis 5, on local redis-server
// nodes. Run by run-tests.sh; `node peer-tests.mjs [peer-dir]` runs it alone.
//
// The files are copied at run time into target/node-redlock-peer/ (never into the repository)
// and changed only by the substitutions below, each of which must match exactly as often as
// stated (so a different copy of the suite fails loudly instead of running half-changed):
// - the docker-compose host names become 127.0.0.1 and the ports of the nodes started here; the
//   unreachable node ("127.0.0.1" without a port, i.e. 6379) gets a port nobody listens on;
// - the Redis Cluster runs are dropped (Redlock needs independent masters);
// - two of the three assertions on node-redlock's exact sentences that may be relaxed are:
//   the non-integer duration error must match /integer/i, and an unreachable node's vote must
//   be an Error. (The third, a majority's vote against being a ResourceLockedError with
//   node-redlock's sentence, passes unchanged: ironlock's vote reason uses that sentence.)
// `./index.js`, which the suite imports, is ironlock's Redlock with `restartQuarantine: false`
// (the nodes are fresh) and a `maxTtl` of 2^53 - 1 ms (the suite locks for ~28 000 years).
// The suite is compiled with `tsc` (strict) against ironlock's type declarations, so a type
// error in index.d.ts for node-redlock code fails the run too.

import { execFile } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { promisify } from 'node:util'
import { fileURLToPath } from 'node:url'

import { startCluster } from './test/harness.mjs'

const run = promisify(execFile)
const here = path.dirname(fileURLToPath(import.meta.url))
const repo = path.resolve(here, '..')
const peers = path.resolve(process.argv[2] ?? path.join(repo, '../shared/peers/node-redlock'))
const EXPECTED = 12

/** `text` with `from` replaced by `to`, which must occur exactly `times` times. */
function replace(file, text, from, to, times = 1) {
  const parts = text.split(from)
  if (parts.length - 1 !== times) {
    throw new Error(`${file}: expected ${times} occurrence(s) of ${JSON.stringify(String(from))}, found ${parts.length - 1}`)
  }
  return parts.join(to)
}

/** A loopback port with nothing listening on it. */
async function closedPort() {
  const server = net.createServer()
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address()
  await new Promise((resolve) => server.close(resolve))
  return port
}

const CLUSTER_RUN = /^run\(\s*"cluster",[\s\S]*?\);$/m

function adapt(file, text, ports, closed) {
  let t = text
  const dropped = t.replace(CLUSTER_RUN, '')
  if (dropped === t || CLUSTER_RUN.test(dropped)) throw new Error(`${file}: expected one Redis Cluster run`)
  t = dropped
  if (file === 'single.test.ts') {
    t = replace(file, t, '{ host: "redis-single-instance" }', `{ host: "127.0.0.1", port: ${ports[0]} }`)
    t = replace(file, t, 'host: "127.0.0.1",\n        maxRetriesPerRequest', `host: "127.0.0.1",\n        port: ${closed},\n        maxRetriesPerRequest`)
    // Relaxed: the non-integer duration error must match /integer/i.
    t = replace(
      file,
      t,
      't.is(\n        (error as Error).message,\n        "Duration must be an integer value in milliseconds."\n      );',
      't.regex((error as Error).message, /integer/i);',
    )
    // Relaxed: an unreachable node's vote must be an Error.
    t = replace(file, t, 't.is(v.message, "Connection is closed.");', 't.true(v instanceof Error, "The vote must be an Error.");')
  } else {
    for (const [i, name] of ['a', 'b', 'c'].entries()) {
      t = replace(file, t, `{ host: "redis-multi-instance-${name}" }`, `{ host: "127.0.0.1", port: ${ports[1 + i]} }`)
    }
  }
  return t
}

const INDEX = `// What node-redlock's tests import as "./index.js": ironlock's Redlock, with the settings fresh
// test nodes and the suite's huge durations need, and ironlock's other exports.
import { Redlock } from "ironlock";
export * from "ironlock";
export default class TestRedlock extends Redlock {
  constructor(...[clients, settings]: ConstructorParameters<typeof Redlock>) {
    super(clients, { restartQuarantine: false, maxTtl: Number.MAX_SAFE_INTEGER, ...settings });
  }
}
`

const TSCONFIG = {
  compilerOptions: {
    target: 'ES2022',
    module: 'ES2022',
    moduleResolution: 'Bundler',
    lib: ['ES2022', 'DOM'],
    types: ['node'],
    strict: true,
    esModuleInterop: true,
    rootDir: 'src',
    outDir: 'build',
  },
  include: ['src/*.ts'],
}

/**
 * ioredis 5's types spell the CLUSTER subcommand in capitals (`cluster("INFO")`); node-redlock's
 * suite was written against ioredis 4's. That diagnostic, in the Redis Cluster helper that the
 * dropped cluster runs used, is not about ironlock and is the only one tolerated.
 */
const TOLERATED = (d) => d.startsWith('error TS2769') && d.includes(`Argument of type '"info"'`)

/** tsc (strict) over the suite: emits build/, fails on any diagnostic but the tolerated one. */
async function compile(work, tsc) {
  const out = await run(process.execPath, [tsc, '-p', work], { cwd: work }).then(
    (r) => r.stdout,
    (e) => `${e.stdout}${e.stderr}`,
  )
  // One diagnostic per unindented line, with its indented continuation lines.
  const diagnostics = out.split(/\n(?=\S)/).filter((d) => d.trim() !== '')
  const errors = diagnostics.filter((d) => !TOLERATED(d.replace(/^\S+\(\d+,\d+\): /, '')))
  if (errors.length > 0) {
    throw new Error(`tsc (node-redlock's tests against ironlock's types) failed:\n${errors.join('\n')}`)
  }
  for (const f of ['index.js', 'single.test.js', 'multi.test.js']) {
    if (!fs.existsSync(path.join(work, 'build', f))) throw new Error(`tsc did not emit build/${f}`)
  }
  console.log(`tsc: node-redlock's tests type-check against ironlock's declarations (${diagnostics.length} tolerated ioredis diagnostic(s))`)
}

async function main() {
  if (!fs.existsSync(path.join(peers, 'single.test.ts'))) {
    console.log(`skip: node-redlock's test suite not found at ${peers} (the peer suite is not run)`)
    return
  }
  const work = path.join(repo, 'target', 'node-redlock-peer')
  fs.rmSync(work, { recursive: true, force: true })
  fs.mkdirSync(path.join(work, 'src'), { recursive: true })
  fs.mkdirSync(path.join(work, 'node_modules'))
  // The package's own dev dependencies (ava, ioredis, typescript) and the package itself.
  const deps = path.join(here, 'node_modules')
  for (const name of fs.readdirSync(deps)) {
    if (name.startsWith('.')) continue
    fs.symlinkSync(path.join(deps, name), path.join(work, 'node_modules', name))
  }
  fs.symlinkSync(here, path.join(work, 'node_modules', 'ironlock'))
  fs.writeFileSync(
    path.join(work, 'package.json'),
    `${JSON.stringify({ name: 'node-redlock-peer-tests', private: true, type: 'module', ava: { files: ['build/*.test.js'], timeout: '2m' } }, null, 2)}\n`,
  )
  fs.writeFileSync(path.join(work, 'tsconfig.json'), `${JSON.stringify(TSCONFIG, null, 2)}\n`)
  fs.writeFileSync(path.join(work, 'src', 'index.ts'), INDEX)
  fs.copyFileSync(path.join(peers, 'LICENSE'), path.join(work, 'LICENSE'))

  const cluster = await startCluster(4)
  try {
    const closed = await closedPort()
    for (const file of ['single.test.ts', 'multi.test.ts']) {
      const text = fs.readFileSync(path.join(peers, file), 'utf8')
      fs.writeFileSync(path.join(work, 'src', file), adapt(file, text, cluster.ports, closed))
    }
    console.log(`node-redlock suite from ${peers}: nodes ${cluster.ports.join(', ')}, unreachable ${closed}`)
    await compile(work, path.join(deps, 'typescript/bin/tsc'))
    const ava = path.join(deps, 'ava/entrypoints/cli.mjs')
    const result = await run(process.execPath, [ava, '--tap'], {
      cwd: work,
      env: { ...process.env, FORCE_COLOR: '0' },
      maxBuffer: 16 << 20,
      timeout: 300_000,
    }).catch((e) => e)
    const tap = `${result.stdout ?? ''}`
    process.stdout.write(tap)
    if (result.stderr) process.stderr.write(result.stderr)
    const passed = (tap.match(/^ok \d+/gm) ?? []).length
    const failed = (tap.match(/^not ok \d+/gm) ?? []).length
    const notes = (tap.match(/# (SKIP|TODO)/g) ?? []).length
    console.log(`node-redlock suite: ${passed} of ${EXPECTED} passed, ${failed} failed`)
    if (result.code || passed !== EXPECTED || failed !== 0 || notes !== 0) {
      throw new Error(`node-redlock's suite: ${passed} passed, ${failed} failed, ${notes} skipped or todo (exit ${result.code ?? 0}); expected ${EXPECTED} passed`)
    }
  } finally {
    await cluster.quit()
  }
  fs.rmSync(work, { recursive: true, force: true })
}

main().catch((e) => {
  console.error(e.message ?? e)
  process.exitCode = 1
})
