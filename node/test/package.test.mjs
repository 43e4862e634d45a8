// `npm pack` yields a tarball that installs into a fresh directory (no download, the .node
// binary is inside) and works with require('ironlock'), import … from 'ironlock', and the example.

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
    const tgz = path.join(dir, info.filename)

    const app = path.join(dir, 'app')
    fs.mkdirSync(app)
    fs.writeFileSync(path.join(app, 'package.json'), '{"name":"app","private":true}\n')
    const installed = await run(npm, ['install', tgz, '--no-audit', '--no-fund', '--offline'], { cwd: app })
    console.log(`npm install ${info.filename}: ${installed.stdout.trim()}`)

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
