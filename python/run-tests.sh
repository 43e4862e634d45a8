#!/usr/bin/env bash
# The Python package's test suite: builds the extension into the repo's .venv and runs pytest
# against real redis-server nodes (tests/harness). Called from the repo root; idempotent.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

VENV="$ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
need() { "$PY" -c "import importlib.metadata as m, sys; v = m.version('$1'); sys.exit(0 if v.startswith('$2') else 1)" 2>/dev/null; }
if ! need maturin 1.16. || ! need pytest 9.2. || ! need mypy ""; then
    "$PY" -m pip install --quiet --disable-pip-version-check "maturin==1.16.*" "pytest==9.2.*" mypy
fi

# The harness binary the tests drive (tests find it via IRONLOCK_HARNESS).
if [ -z "${IRONLOCK_HARNESS:-}" ]; then
    cargo build --quiet -p ironlock-harness
    export IRONLOCK_HARNESS="$ROOT/target/debug/ironlock-harness"
fi

# Build the extension in place (editable install into .venv).
(cd "$ROOT/python" && VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH" "$PY" -m maturin develop --quiet)

cd "$ROOT/python"
exec "$PY" -m pytest tests -ra "$@"
