#!/usr/bin/env bash
# ironlock's benchmark: ironlock (Rust, C, Python sync/asyncio, Node) side by side with the peers
# (node-redlock, @sesamecare-oss/redlock, redis-semaphore, redlock-universal, pottery, aioredlock,
# redis-py's own single-node Lock,
# rslock) and a hand-written lower
# bound, all on the same local redis nodes in one run.
#
#   bench/run.sh            full run (about 45 minutes, 20 of them the held-lock scale, e3 and e5);
#                           writes bench/results/<stamp>.{md,jsonl} and copies the markdown to
#                           bench/RESULTS.md
#   bench/run.sh --smoke    one tiny run of each client and workload (exit non-zero on any failure);
#                           part of scripts/test, built in the dev profile to reuse the test builds
#   extra arguments go to bench/bench.py (--only CLIENTS, --workloads IDS, --reps N, --held-k KS,
#                           --held-s SECONDS)
#
# Sets up everything it needs, idempotently: peers into bench/.peers/ (ignored), ironlock's
# release artifacts (libironlock.so, the Python wheel, the Node addon), the Rust drivers
# (bench/rust, own workspace and target dir) and the C driver.
set -euo pipefail

BENCH="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(dirname "$BENCH")"
PEERS="$BENCH/.peers"
cd "$ROOT"
unset CARGO_TARGET_DIR
mkdir -p "$PEERS"
log() { printf 'bench: %s\n' "$*" >&2; }

# A smoke run (CI) builds ironlock's artifacts in the dev profile, into the workspace's own
# target dir, so that it reuses what the test suites compiled; a full run builds release.
SMOKE=0
for a in "$@"; do [ "$a" = "--smoke" ] && SMOKE=1; done
if [ "$SMOKE" = 1 ]; then
    PROFILE=debug; CARGO_PROFILE=(); MATURIN_PROFILE=(); NAPI_PROFILE=()
    RUST_TARGET="$ROOT/target"
else
    PROFILE=release; CARGO_PROFILE=(--release); MATURIN_PROFILE=(--release); NAPI_PROFILE=(--release)
    RUST_TARGET="$BENCH/rust/target"
fi
export IRONLOCK_BENCH_RUST="$RUST_TARGET/$PROFILE/ironlock-bench"

# --- redis nodes: the test harness, redis-server itself ---------------------------------------
command -v redis-server >/dev/null || { log "redis-server missing: run scripts/setup"; exit 1; }
if [ -z "${IRONLOCK_HARNESS:-}" ]; then
    [ -x target/debug/ironlock-harness ] || cargo build --quiet -p ironlock-harness
    export IRONLOCK_HARNESS="$ROOT/target/debug/ironlock-harness"
fi

# --- ironlock C: release libironlock.so and the C driver --------------------------------------
log "building libironlock.so ($PROFILE) and the C driver"
cargo build --quiet "${CARGO_PROFILE[@]}" -p ironlock-ffi
mkdir -p "$BENCH/c/build"
cc -O2 -std=c11 -Wall -Wextra -Werror -I include "$BENCH/c/driver.c" -o "$BENCH/c/build/driver" \
    -L "target/$PROFILE" -lironlock -Wl,-rpath,"$ROOT/target/$PROFILE" -lpthread

# --- Rust: lower bound, ironlock, rslock (bench/rust is its own workspace) --------------------
log "building the Rust drivers (bench/rust, $PROFILE)"
CARGO_TARGET_DIR="$RUST_TARGET" cargo build --quiet "${CARGO_PROFILE[@]}" --manifest-path "$BENCH/rust/Cargo.toml"

# --- Python: a separate venv with the peers and a release wheel of ironlock -------------------
VENV="$PEERS/venv"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
if ! "$VENV/bin/python" -c "import importlib.metadata as m; assert m.version('pottery') == '3.0.1' and m.version('aioredlock') == '0.7.3' and m.version('redis') == '8.1.0' and m.version('hiredis') == '3.5.0' and m.version('maturin').startswith('1.16.')" 2>/dev/null; then
    log "installing pottery, aioredlock, redis-py with hiredis and maturin into bench/.peers/venv"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "pottery==3.0.1" "aioredlock==0.7.3" "redis==8.1.0" "hiredis==3.5.0" "maturin==1.16.*"
fi
log "building the ironlock wheel ($PROFILE)"
rm -rf "$PEERS/wheels"
(cd python && "$VENV/bin/maturin" build --quiet "${MATURIN_PROFILE[@]}" -i "$VENV/bin/python" -o "$PEERS/wheels" >/dev/null)
"$VENV/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$PEERS"/wheels/ironlock-*.whl

# --- Node: peers and a release build of the ironlock addon ------------------------------------
NODEPEERS="$PEERS/node"
mkdir -p "$NODEPEERS"
NODE_PEER_PKGS=("redlock@5.0.0-beta.2" "@sesamecare-oss/redlock@1.4.0" "redis-semaphore@5.8.0" "redlock-universal@0.8.5" "ioredis@6.0.0" "ioredis5@npm:ioredis@5.9.3")
if ! [ -f "$NODEPEERS/.installed" ] || [ "$(cat "$NODEPEERS/.installed")" != "${NODE_PEER_PKGS[*]}" ]; then
    log "installing ${NODE_PEER_PKGS[*]} into bench/.peers/node"
    printf '{ "name": "ironlock-bench-peers", "private": true, "version": "0.0.0" }\n' > "$NODEPEERS/package.json"
    (cd "$NODEPEERS" && npm install --silent --no-audit --no-fund "${NODE_PEER_PKGS[@]}")
    echo "${NODE_PEER_PKGS[*]}" > "$NODEPEERS/.installed"
fi
[ -x node/node_modules/.bin/napi ] || (cd node && npm install --silent --no-audit --no-fund)
log "building the ironlock Node addon ($PROFILE)"
IRONNODE="$PEERS/ironlock-node"
rm -rf "$IRONNODE/build"
mkdir -p "$IRONNODE/build"
(cd node && node_modules/.bin/napi build --platform "${NAPI_PROFILE[@]}" --no-js --output-dir "$IRONNODE/build" >/dev/null)
rm -rf "$IRONNODE/lib"
cp -r node/lib node/index.js node/binding.js node/package.json "$IRONNODE/"
cp "$IRONNODE"/build/ironlock.*.node "$IRONNODE/"

exec "$VENV/bin/python" "$BENCH/bench.py" "$@"
