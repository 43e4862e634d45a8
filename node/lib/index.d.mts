// Types of the ES module entry (lib/index.mjs): the same as lib/index.d.ts, with `Redlock` as
// the default export, as node-redlock's (`import Redlock from 'redlock'`).
export * from './index.js'
export { Redlock as default } from './index.js'
