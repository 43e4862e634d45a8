// Opens every page of the built user guide in headless Chromium (Debian's `chromium`), over the
// DevTools protocol, and fails on a page that does not load, a console error, an uncaught
// exception, a failed request, or a link to a page or anchor that does not exist.
//
//   node --experimental-websocket docs/tests/browser.mjs target/docs
//
// The site is served over HTTP on 127.0.0.1 (as a web server would serve it). Links to this
// repository on GitHub (.../blob/main/PATH) must name a file or folder that exists here; other
// external links are counted, not fetched (the check runs offline). A control site with one
// broken link, one missing anchor and one console error is checked first: the check must find
// exactly those three, or it could not find them on the real site either.

import { spawn } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const REPO_URL = 'https://github.com/ironlock/ironlock/'
// Pages load in well under a second; the bound is for a machine shared with other heavy jobs
// (print.html, every page in one, took over 20 s at a load average of 24 on 2 cores).
const PAGE_TIMEOUT_MS = 120_000
const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript',
  '.css': 'text/css',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.woff': 'font/woff',
  '.woff2': 'font/woff2',
  '.ttf': 'font/ttf',
  '.json': 'application/json',
  '.txt': 'text/plain',
}

function serve(root) {
  const server = http.createServer((req, res) => {
    let file = path.join(root, decodeURIComponent(new URL(req.url, 'http://x').pathname))
    if (!file.startsWith(root)) {
      res.writeHead(403).end()
      return
    }
    if (fs.existsSync(file) && fs.statSync(file).isDirectory()) file = path.join(file, 'index.html')
    fs.readFile(file, (err, data) => {
      if (err) {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found')
        return
      }
      res.writeHead(200, { 'content-type': TYPES[path.extname(file)] ?? 'application/octet-stream' })
      res.end(data)
    })
  })
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve({ server, base: `http://127.0.0.1:${server.address().port}/` })),
  )
}

function htmlFiles(root) {
  const out = []
  for (const entry of fs.readdirSync(root, { withFileTypes: true, recursive: true })) {
    if (entry.isFile() && entry.name.endsWith('.html')) {
      out.push(path.relative(root, path.join(entry.parentPath ?? entry.path, entry.name)))
    }
  }
  return out.sort()
}

async function launch() {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'ironlock-docs-chromium-'))
  const args = ['--headless=new', '--disable-gpu', '--no-first-run', '--no-default-browser-check',
    '--disable-extensions', '--disable-background-networking', '--remote-debugging-port=0',
    `--user-data-dir=${profile}`, 'about:blank']
  if (process.getuid?.() === 0) args.unshift('--no-sandbox') // Chromium refuses root otherwise
  // Its own process group: Chromium's helper processes (renderer, network service) outlive a
  // killed browser process for a moment and keep writing into the profile; closing kills them all.
  const child = spawn(process.env.CHROMIUM ?? 'chromium', args, {
    stdio: ['ignore', 'ignore', 'pipe'],
    detached: true
  })
  const ws = await new Promise((resolve, reject) => {
    let text = ''
    const timer = setTimeout(() => reject(new Error(`chromium did not start:\n${text}`)), 90_000)
    child.stderr.on('data', (d) => {
      text += d
      const m = text.match(/DevTools listening on (ws:\/\/\S+)/)
      if (m) {
        clearTimeout(timer)
        resolve(m[1])
      }
    })
    child.on('exit', (code) => reject(new Error(`chromium exited (${code}):\n${text}`)))
  })
  const close = async () => {
    const exited = new Promise((resolve) => child.once('exit', resolve))
    const group = () => {
      try {
        process.kill(-child.pid, 0)
        return true
      } catch {
        return false
      }
    }
    try {
      process.kill(-child.pid, 'SIGKILL')
    } catch {
      child.kill('SIGKILL')
    }
    await exited
    // Every process of the group gone (bounded: 5 s), then the profile.
    for (let i = 0; i < 100 && group(); i++) await new Promise((resolve) => setTimeout(resolve, 50))
    try {
      fs.rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 })
    } catch (e) {
      // A leftover temporary profile does not change what the check found.
      process.stderr.write(`browser check: could not remove ${profile}: ${e.message}\n`)
    }
  }
  return { ws, close }
}

class Cdp {
  #socket
  #id = 0
  #pending = new Map()
  listeners = []

  static async connect(url) {
    const cdp = new Cdp()
    cdp.#socket = new WebSocket(url)
    await new Promise((resolve, reject) => {
      cdp.#socket.onopen = resolve
      cdp.#socket.onerror = () => reject(new Error(`cannot connect to ${url}`))
    })
    cdp.#socket.onmessage = (e) => {
      const msg = JSON.parse(e.data)
      if (msg.id !== undefined) {
        const p = cdp.#pending.get(msg.id)
        cdp.#pending.delete(msg.id)
        if (msg.error) p?.reject(new Error(`${p.method}: ${msg.error.message}`))
        else p?.resolve(msg.result)
      } else {
        for (const l of cdp.listeners) l(msg)
      }
    }
    return cdp
  }

  send(method, params = {}, sessionId = undefined) {
    const id = ++this.#id
    this.#socket.send(JSON.stringify({ id, method, params, sessionId }))
    return new Promise((resolve, reject) => this.#pending.set(id, { resolve, reject, method }))
  }

  close() {
    this.#socket.close()
  }
}

/** A request the browser makes by itself, not the page: /favicon.ico for a page without an icon. */
const browserOwn = (url) => url !== undefined && new URL(url).pathname === '/favicon.ico'

/** Visits every page under `base`; returns {pages, links, external, problems}. */
async function checkSite(cdp, root, base) {
  const { targetId } = await cdp.send('Target.createTarget', { url: 'about:blank' })
  const { sessionId } = await cdp.send('Target.attachToTarget', { targetId, flatten: true })
  const on = (method, params) => cdp.send(method, params, sessionId)
  let events = []
  let loaded = null
  cdp.listeners = [(msg) => {
    if (msg.sessionId !== sessionId) return
    if (msg.method === 'Page.loadEventFired') loaded?.()
    else events.push(msg)
  }]
  await on('Page.enable')
  await on('Runtime.enable')
  await on('Log.enable')
  await on('Network.enable')

  const pages = htmlFiles(root)
  const anchors = new Map() // page path -> Set of ids
  const links = [] // {from, href}
  const problems = []
  for (const page of pages) {
    events = []
    const url = new URL(page, base).href
    let timer
    const done = new Promise((resolve, reject) => {
      loaded = resolve
      timer = setTimeout(() => reject(new Error(`${page}: no load event within ${PAGE_TIMEOUT_MS} ms`)), PAGE_TIMEOUT_MS)
    })
    await on('Page.navigate', { url })
    try {
      await done
    } catch (e) {
      problems.push(e.message)
      continue
    } finally {
      clearTimeout(timer)
    }
    await new Promise((r) => setTimeout(r, 100)) // errors from scripts run at load
    const { result } = await on('Runtime.evaluate', {
      returnByValue: true,
      expression: `JSON.stringify({
        ids: [...document.querySelectorAll('[id], a[name]')].map((e) => e.id || e.name),
        links: [...document.querySelectorAll('a[href]')].map((a) => a.href),
        main: document.querySelector('main')?.innerText.trim().length ?? 0,
      })`,
    })
    const info = JSON.parse(result.value)
    anchors.set(page, new Set(info.ids))
    if (info.main === 0 && page !== 'toc.html') problems.push(`${page}: the page has no content`)
    for (const href of info.links) links.push({ from: page, href })
    for (const { method, params } of events) {
      if (method === 'Runtime.consoleAPICalled' && ['error', 'assert'].includes(params.type)) {
        problems.push(`${page}: console.${params.type}: ${params.args.map((a) => a.value ?? a.description).join(' ')}`)
      } else if (method === 'Runtime.exceptionThrown') {
        const d = params.exceptionDetails
        problems.push(`${page}: uncaught ${d.exception?.description ?? d.text}`)
      } else if (method === 'Log.entryAdded' && params.entry.level === 'error' && !browserOwn(params.entry.url)) {
        problems.push(`${page}: console: ${params.entry.text} ${params.entry.url ?? ''}`.trim())
      } else if (method === 'Network.responseReceived' && params.response.status >= 400 && !browserOwn(params.response.url)) {
        problems.push(`${page}: ${params.response.status} for ${params.response.url}`)
      } else if (method === 'Network.loadingFailed' && !params.canceled) {
        problems.push(`${page}: request failed: ${params.errorText}`)
      }
    }
  }
  await cdp.send('Target.closeTarget', { targetId })

  let internal = 0
  let external = 0
  let repository = 0
  const seen = new Set()
  for (const { from, href } of links) {
    const key = `${from} ${href}`
    if (seen.has(key)) continue
    seen.add(key)
    const u = new URL(href)
    if (href.startsWith(base)) {
      internal += 1
      let target = decodeURIComponent(u.pathname.slice(new URL(base).pathname.length))
      if (target === '' || target.endsWith('/')) target += 'index.html'
      if (!fs.existsSync(path.join(root, target))) {
        problems.push(`${from}: link to a missing page ${target}`)
        continue
      }
      const frag = decodeURIComponent(u.hash.slice(1))
      if (frag && target.endsWith('.html') && !anchors.get(target)?.has(frag)) {
        problems.push(`${from}: link to a missing anchor ${target}#${frag}`)
      }
    } else if (href.startsWith(REPO_URL)) {
      repository += 1
      const m = href.slice(REPO_URL.length).match(/^(?:blob|tree|edit)\/main\/([^#?]*)/)
      if (m && !fs.existsSync(path.join(REPO, decodeURIComponent(m[1])))) {
        problems.push(`${from}: link to ${m[1]}, which is not in the repository`)
      }
    } else if (/^https?:/.test(href)) {
      external += 1
    }
  }
  return { pages: pages.length, internal, repository, external, problems }
}

function controlSite() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ironlock-docs-control-'))
  fs.writeFileSync(path.join(dir, 'index.html'), `<!doctype html><title>a</title><main>
    <h1 id="top">control</h1><a href="#top">ok</a><a href="b.html#there">ok</a>
    <a href="b.html#nowhere">missing anchor</a><a href="gone.html">missing page</a>
    <script>console.error('control error')</script></main>`)
  fs.writeFileSync(path.join(dir, 'b.html'), `<!doctype html><title>b</title><main><p id="there">b</p></main>`)
  return dir
}

const site = path.resolve(process.argv[2] ?? path.join(REPO, 'target/docs'))
if (!fs.existsSync(path.join(site, 'index.html'))) {
  console.error(`browser check: no site at ${site} (run scripts/docs first)`)
  process.exit(2)
}
const started = Date.now()
const chromium = await launch()
const cdp = await Cdp.connect(chromium.ws)
let failed = false
try {
  const control = controlSite()
  const c = await serve(control)
  const ctl = await checkSite(cdp, control, c.base)
  c.server.close()
  fs.rmSync(control, { recursive: true, force: true })
  const expected = ['index.html: console.error: control error', 'index.html: link to a missing anchor b.html#nowhere',
    'index.html: link to a missing page gone.html']
  if (JSON.stringify([...ctl.problems].sort()) !== JSON.stringify(expected)) {
    console.error(`browser check: the control site should show exactly ${JSON.stringify(expected)}, got ${JSON.stringify(ctl.problems)}`)
    failed = true
  } else {
    console.log('browser check: control site: its broken link, missing anchor and console error were found')
  }

  const s = await serve(site)
  const r = await checkSite(cdp, site, s.base)
  s.server.close()
  for (const p of r.problems) console.error(`browser check: ${p}`)
  if (r.pages < 2 || r.internal < r.pages) {
    console.error(`browser check: only ${r.pages} pages and ${r.internal} internal links: is this the site?`)
    failed = true
  }
  failed ||= r.problems.length > 0
  console.log(`browser check: ${r.pages} pages loaded in Chromium; ${r.internal} internal links and anchors, ` +
    `${r.repository} links into the repository checked, ${r.external} other external links not fetched; ` +
    `${r.problems.length} problems (${((Date.now() - started) / 1000).toFixed(1)} s)`)
} finally {
  cdp.close()
  await chromium.close()
}
process.exit(failed ? 1 : 0)
