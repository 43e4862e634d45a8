// Runs examples/basic.mjs (the guide's quick start, docs/src/start/node.md) against three fresh nodes.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import { promisify } from 'node:util'
import { fileURLToPath } from 'node:url'

import { startCluster } from './harness.mjs'

const example = fileURLToPath(new URL('../examples/basic.mjs', import.meta.url))

// The guide's pages show an example by including its file ({{#include}}), so they cannot drift.
const guide = (page) => fs.readFileSync(new URL(`../../docs/src/${page}`, import.meta.url), 'utf8')

test('the quick start is examples/basic.mjs verbatim', () => {
  const code = fs.readFileSync(example, 'utf8')
  assert.ok(guide('start/node.md').includes('{{#include ../../../node/examples/basic.mjs}}'), 'the guide does not show examples/basic.mjs')
  // The npm package's own README (its page on the registry) shows the same quick start.
  const pkg = fs.readFileSync(new URL('../README.md', import.meta.url), 'utf8')
  assert.ok(pkg.includes(code), 'node/README.md quick start differs from examples/basic.mjs')
})

test('examples/basic.mjs runs', { timeout: 60_000 }, async () => {
  const cluster = await startCluster(3)
  try {
    const { stdout } = await promisify(execFile)(process.execPath, [example], {
      env: { ...process.env, IRONLOCK_NODES: cluster.urls.join(',') },
      timeout: 30_000,
    })
    assert.match(stdout, /^locked invoice:42 for \d+ ms, fence \d+$/m)
    assert.match(stdout, /^second acquire: CONTENDED, votes /m)
    assert.match(stdout, /^using finished with 465$/m)
    for (let i = 0; i < 3; i++) assert.equal(await cluster.cmd(i, 'EXISTS', 'invoice:42'), 0)
  } finally {
    await cluster.quit()
  }
})

const metrics = fileURLToPath(new URL('../examples/metrics.mjs', import.meta.url))

test('examples/metrics.mjs (the prom-client collector the guide shows) runs', { timeout: 60_000 }, async () => {
  assert.ok(guide('guides/operations.md').includes('{{#include ../../../node/examples/metrics.mjs}}'), 'the guide does not show examples/metrics.mjs')
  const cluster = await startCluster(3)
  try {
    const { stdout } = await promisify(execFile)(process.execPath, [metrics], {
      env: { ...process.env, IRONLOCK_NODES: cluster.urls.join(','), IRONLOCK_QUARANTINE: 'off' },
      timeout: 30_000,
    })
    assert.match(stdout, /^ironlock_granted_total 1$/m)
    assert.match(stdout, /^ironlock_releases_total 1$/m)
    assert.match(stdout, /^ironlock_acquire_seconds_count 1$/m)
    assert.match(stdout, /^ironlock_acquire_seconds_sum 0\.\d+/m)
  } finally {
    await cluster.quit()
  }
})
