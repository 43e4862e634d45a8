// `npm pack` yields a tarball that installs into a fresh directory (no download, the .node
// binary is inside) and works with require('ironlock'), import … from 'ironlock', and the example;
// its prepack script builds the release profile, so the tarball never holds a debug binary, and
// copies the licences in: the tarball carries README.md, LICENSE-MIT and LICENSE-APACHE.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { fileURLToPath } from 'node:url'

import { startCluster } from './harness.mjs'

const run = promisify(execFile)

/** The section names of an ELF64 little-endian file (a Linux .node is a shared object). */
function elfSections(file) {
  const b = fs.readFileSync(file)
  assert.equal(b.toString('latin1', 1, 4), 'ELF', `${file} is not an ELF file`)
  assert.equal(b[4], 2, 'ELF64')
  const shoff = Number(b.readBigUInt64LE(0x28))
  const shentsize = b.readUInt16LE(0x3a)
  const shnum = b.readUInt16LE(0x3c)
  const shstrndx = b.readUInt16LE(0x3e)
  const header = (i) => shoff + i * shentsize
  const strtab = Number(b.readBigUInt64LE(header(shstrndx) + 0x18))
  const names = []
  for (let i = 0; i < shnum; i++) {
    const name = strtab + b.readUInt32LE(header(i))
    names.push(b.toString('latin1', name, b.indexOf(0, name)))
  }
  return names
}

/**
 * Why a .node file looks like a debug build, or null. Cargo's dev profile (`npm run
 * build:debug`) keeps DWARF (`.debug_info`) and compiles overflow checks, whose panic message
 * stays in the binary even when it is stripped; the release profile has neither (Rust drops debug
 * info from release builds by default, and overflow checks are off there).
 */
function debugBuild(file) {
  if (elfSections(file).includes('.debug_info')) return 'it has a .debug_info section'
  if (fs.readFileSync(file).includes('attempt to add with overflow')) {
    return 'it has overflow checks (the dev profile)'
  }
  return null
}

test('the debug-build check recognises a debug build (negative control)', () => {
  // The test harness binary is always a dev-profile build (run-tests.sh builds it).
  const debug = process.env.IRONLOCK_HARNESS ?? path.join(root, '../target/debug/ironlock-harness')
  assert.match(String(debugBuild(debug)), /debug_info/)
  // A stripped debug build of the addon, when one was built (IRONLOCK_NODE_RELEASE=0).
  const addon = path.join(root, '../target/x86_64-unknown-linux-gnu/debug/libironlock_node.so')
  if (fs.existsSync(addon)) assert.notEqual(debugBuild(addon), null)
})
const root = fileURLToPath(new URL('..', import.meta.url))
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm'

test('the packed tarball installs and runs in a fresh directory', { timeout: 180_000 }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ironlock-pack-'))
  const cluster = await startCluster(3)
  try {
    const packed = await run(npm, ['pack', '--json', '--pack-destination', dir], {
      cwd: root,
      maxBuffer: 16 << 20,
    })
    const [info] = JSON.parse(packed.stdout)
    const files = info.files.map((f) => f.path).sort()
    for (const f of ['index.js', 'index.d.ts', 'lib/index.js', 'lib/index.mjs', 'lib/index.d.ts', 'package.json']) {
      assert.ok(files.includes(f), `${f} in ${files}`)
    }
    assert.ok(files.some((f) => /^ironlock\.linux-x64-gnu\.node$/.test(f)), `binary in ${files}`)
    assert.ok(!files.some((f) => f.startsWith('src/') || f.startsWith('test/')), `${files}`)
    // Its papers: the Node README (the registry's page) and both licences of "MIT OR Apache-2.0",
    // copied from the repository root by prepack.
    for (const f of ['README.md', 'LICENSE-MIT', 'LICENSE-APACHE']) {
      assert.ok(files.includes(f), `${f} in ${files}`)
    }
    const tgz = path.join(dir, info.filename)

    const app = path.join(dir, 'app')
    fs.mkdirSync(app)
    fs.writeFileSync(path.join(app, 'package.json'), '{"name":"app","private":true}\n')
    const installed = await run(npm, ['install', tgz, '--no-audit', '--no-fund', '--offline'], { cwd: app })
    console.log(`npm install ${info.filename}: ${installed.stdout.trim()}`)
    const installedDir = path.join(app, 'node_modules/ironlock')
    for (const f of ['LICENSE-MIT', 'LICENSE-APACHE']) {
      assert.deepEqual(fs.readFileSync(path.join(installedDir, f)), fs.readFileSync(path.join(root, '..', f)), f)
    }
    assert.match(fs.readFileSync(path.join(installedDir, 'README.md'), 'utf8'), /^# ironlock \(Node\.js\)$/m)
    const binary = path.join(installedDir, 'ironlock.linux-x64-gnu.node')
    assert.equal(debugBuild(binary), null, `the packed ${path.basename(binary)} is a debug build`)

    const env = { ...process.env, IRONLOCK_NODES: cluster.urls.join(',') }
    const cjs = await run(
      process.execPath,
      ['-e', "const { LockManager, Redlock } = require('ironlock'); console.log(typeof LockManager, typeof Redlock, require.resolve('ironlock'))"],
      { cwd: app },
    )
    assert.match(cjs.stdout, /^function function .*node_modules\/ironlock\/lib\/index\.js$/m)
    fs.copyFileSync(path.join(root, 'examples/basic.mjs'), path.join(app, 'basic.mjs'))
    const esm = await run(process.execPath, ['basic.mjs'], { cwd: app, env, timeout: 30_000 })
    console.log(esm.stdout.trim())
    assert.match(esm.stdout, /^using finished with 465$/m)
  } finally {
    await cluster.quit()
    fs.rmSync(dir, { recursive: true, force: true })
  }
})
