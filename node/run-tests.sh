#!/usr/bin/env bash
# Node package tests: install the npm tools, build the addon with the napi CLI (release, as
# shipped; IRONLOCK_NODE_RELEASE=0 for a faster debug build while developing), check the
# committed generated loader and types for drift, run every `node --test` suite (corpus, bad
# input, API, example, TypeScript, workers, packed tarball) against real redis-server nodes, then
# node-redlock's own test suite against ironlock's Redlock (peer-tests.mjs).
# Run from anywhere; exits non-zero on any failure.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
cd "$here"

echo "== npm install"
npm install --no-audit --no-fund --loglevel=error

harness="${IRONLOCK_HARNESS:-$repo/target/debug/ironlock-harness}"
if [[ ! -x "$harness" ]]; then
  echo "== cargo build -p ironlock-harness"
  cargo build -p ironlock-harness --manifest-path "$repo/Cargo.toml"
fi
export IRONLOCK_HARNESS="$harness"

echo "== napi build"
saved="$(mktemp -d)"
trap 'rm -rf "$saved"' EXIT
cp index.js index.d.ts "$saved/"
# Tests run what ships: the release build (as `npm run build` and `npm pack`'s prepack).
if [[ "${IRONLOCK_NODE_RELEASE:-1}" == "1" ]]; then
  npm run --silent build
else
  npm run --silent build:debug
fi

echo "== drift check of the generated index.js and index.d.ts"
drift=0
for f in index.js index.d.ts; do
  if ! diff -u "$saved/$f" "$f"; then
    echo "error: node/$f differs from what napi generates; commit the regenerated file" >&2
    drift=1
  fi
done
[[ $drift == 0 ]]

echo "== node --test"
node --test --test-reporter=spec test/*.test.mjs

echo "== node-redlock's own test suite (ava 4, worker threads, ioredis 5) against Redlock"
node peer-tests.mjs
