// `tsc --noEmit` of a usage file against the package's types, then the same file compiled
// (TypeScript lowers `await using`) and run against three fresh nodes.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { rmSync } from 'node:fs'
import { promisify } from 'node:util'
import { fileURLToPath } from 'node:url'

import { startCluster } from './harness.mjs'

const run = promisify(execFile)
const root = fileURLToPath(new URL('..', import.meta.url))
const tsc = fileURLToPath(new URL('../node_modules/typescript/bin/tsc', import.meta.url))
const project = fileURLToPath(new URL('./ts', import.meta.url))

test('usage.mts type-checks against index.d.ts (tsc --noEmit)', { timeout: 120_000 }, async () => {
  const r = await run(process.execPath, [tsc, '--noEmit', '-p', project], { cwd: root })
  assert.equal(r.stdout.trim(), '')
})

test('the types check without @types/node: "types": [], lib ES2022 only (as TypeScript 7 defaults)', { timeout: 120_000 }, async () => {
  // ts-bare/usage.mts also narrows each error class's `code` to its literal and uses the
  // manager's nodes, quorum, closed, inspect, releaseToken and Lock#toJSON.
  const bare = fileURLToPath(new URL('./ts-bare', import.meta.url))
  const r = await run(process.execPath, [tsc, '--noEmit', '-p', bare], { cwd: root }).catch((e) => e)
  assert.equal(`${r.stdout}`.trim(), '')
})

test('await using releases the lock (compiled usage.mts)', { timeout: 120_000 }, async () => {
  await run(process.execPath, [tsc, '-p', project], { cwd: root })
  const cluster = await startCluster(3)
  try {
    const { stdout } = await run(process.execPath, [`${project}/build/usage.mjs`], {
      env: { ...process.env, IRONLOCK_NODES: cluster.urls.join(',') },
      timeout: 30_000,
    })
    assert.match(stdout, /await using released the lock/)
  } finally {
    await cluster.quit()
    // `node --test test/` would run a compiled file it finds there as a test of its own.
    rmSync(`${project}/build`, { recursive: true, force: true })
  }
})

test('every declaration and member of lib/index.d.ts carries a doc comment', async () => {
  const { createRequire } = await import('node:module')
  const ts = createRequire(import.meta.url)('typescript')
  const file = fileURLToPath(new URL('../lib/index.d.ts', import.meta.url))
  const text = (await import('node:fs')).readFileSync(file, 'utf8')
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true)
  const missing = []
  const documented = (node) => ts.getJSDocCommentsAndTags(node).length > 0
  const name = (node) => node.name?.getText(sf) ?? ts.SyntaxKind[node.kind]
  for (const decl of sf.statements) {
    if (ts.isImportDeclaration(decl) || ts.isExportDeclaration(decl)) continue
    if (!documented(decl)) missing.push(name(decl))
    for (const member of decl.members ?? []) {
      // Each overload too: a reader of the editor tooltip sees only the signature it picked.
      if (!documented(member)) missing.push(`${name(decl)}.${name(member)}`)
    }
  }
  assert.deepEqual(missing, [])
})

test("lib/index.d.ts declares every setting of the core's table in Settings", async () => {
  const { createRequire } = await import('node:module')
  const require = createRequire(import.meta.url)
  const ts = require('typescript')
  const file = fileURLToPath(new URL('../lib/index.d.ts', import.meta.url))
  const text = (await import('node:fs')).readFileSync(file, 'utf8')
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true)
  const settings = sf.statements.find((d) => ts.isInterfaceDeclaration(d) && d.name.text === 'Settings')
  assert.ok(settings, 'interface Settings')
  const declared = new Set(settings.members.map((m) => m.name.getText(sf)))
  const names = require('../index.js').settingKinds().map(([name]) => name)
  assert.ok(names.length >= 20, `${names.length} settings`)
  assert.deepEqual(names.filter((n) => !declared.has(n)), [])
})
