#!/usr/bin/env bash
# Node package tests: install the npm tools, build the addon with the napi CLI, check the
# committed generated loader and types for drift, then run every `node --test` suite (corpus,
# bad input, API, example, TypeScript, packed tarball) against real redis-server nodes.
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
profile=()
if [[ "${IRONLOCK_NODE_RELEASE:-0}" == "1" ]]; then profile=(--release); fi
npx napi build --platform --strip "${profile[@]}"

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
