#!/usr/bin/env bash
# Chaos suite entry point (called from the repo root by the top-level test command, after the
# Python, C and Node suites). Builds what it needs, runs every scenario, exits non-zero on any
# failed pass criterion. Extra arguments go to run.py (e.g. --only control --seconds 5).
set -euo pipefail
cd "$(dirname "$0")/../.."

# iptables isolates a node's loopback port; without it run.py falls back to SIGSTOP (and says so).
if ! command -v iptables >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get install -y -qq iptables >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq iptables >/dev/null 2>&1; } \
    || echo "chaos: could not install iptables; isolations will be SIGSTOPs" >&2
fi

[ -x target/debug/ironlock-harness ] || cargo build -q -p ironlock-harness
[ -f target/debug/libironlock.so ] || cargo build -q -p ironlock-ffi
PY=.venv/bin/python
[ -x "$PY" ] || { echo "chaos: $PY missing (run python/run-tests.sh first)" >&2; exit 2; }
if ! "$PY" -c 'import ironlock' 2>/dev/null; then
  if [ -x python/run-tests.sh ]; then bash python/run-tests.sh >/dev/null; else "$PY" -m pip install -q ./python; fi
fi
if ! node -e "require('./node')" 2>/dev/null; then
  (cd node && npm install --no-audit --no-fund >/dev/null && npm run build >/dev/null)
fi

exec "$PY" tests/chaos/run.py "$@"
