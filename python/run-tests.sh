#!/usr/bin/env bash
# The Python package's test suite: builds the abi3 wheel, installs it into the repo's .venv and
# runs pytest against real redis-server nodes (tests/harness). Called from the repo root;
# idempotent. Extra arguments go to pytest.
# IRONLOCK_TEST_PYTHON=/path/to/python3.X runs the same suite on another CPython, in a venv of its
# own (target/venv-3.X); scripts/test does so with the newest CPython at hand.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

BASE="${IRONLOCK_TEST_PYTHON:-python3}"
if [ -n "${IRONLOCK_TEST_PYTHON:-}" ]; then
    VENV="$ROOT/target/venv-$("$BASE" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
else
    VENV="$ROOT/.venv"
fi
if [ ! -x "$VENV/bin/python" ]; then
    "$BASE" -m venv "$VENV"
fi
PY="$VENV/bin/python"
have() { "$PY" -c "import importlib.metadata as m, sys; sys.exit(0 if m.version('$1').startswith('$2') else 1)" 2>/dev/null; }
# redis (redis-py): its clients are one of the node forms the package accepts.
# prometheus_client: the README's metrics collector (examples/metrics.py) runs in the tests.
if ! have maturin 1.16. || ! have pytest 9.2. || ! have mypy "" || ! have redis "" || ! have prometheus_client 0.; then
    "$PY" -m pip install --quiet --disable-pip-version-check "maturin==1.16.*" "pytest==9.2.*" mypy redis "prometheus_client==0.*"
fi

# The harness binary the tests drive (tests find it via IRONLOCK_HARNESS).
if [ -z "${IRONLOCK_HARNESS:-}" ]; then
    cargo build --quiet -p ironlock-harness
    export IRONLOCK_HARNESS="$ROOT/target/debug/ironlock-harness"
fi

# Build the wheel once; the suite runs against it installed in .venv, and installs the same
# file into fresh virtualenvs.
WHEELS="$ROOT/target/python-wheels"
rm -rf "$WHEELS"
(cd "$ROOT/python" && "$PY" -m maturin build --quiet --out "$WHEELS")
WHEEL="$(ls "$WHEELS"/ironlock-*.whl)"
"$PY" -m pip install --quiet --disable-pip-version-check --no-index --force-reinstall --no-deps "$WHEEL"
export IRONLOCK_WHEEL="$WHEEL"

cd "$ROOT/python"
exec "$PY" -m pytest tests -ra "$@"
