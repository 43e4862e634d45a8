#!/usr/bin/env bash
# The C tests of tests/c under AddressSanitizer + LeakSanitizer (issue 6, item 5).
# Run from anywhere; exits non-zero on any test failure or any sanitizer report.
#  1. installs clang and its sanitizer runtimes (Debian: clang, libclang-rt-14-dev) if missing
#  2. builds libironlock (.so + .a, WITHOUT sanitizer: ASan checks the C side and how it uses
#     the ABI) and the redis harness
#  3. compiles tests/c's sources with tests/c/Makefile, CC = clang -fsanitize=address, into
#     tests/sanitize/build (tests/c itself is not touched)
#  4. checks that a canary with a heap overflow, a use-after-free and a leak is reported
#  5. runs every program, linked against libironlock.so and against libironlock.a, against real
#     redis-server nodes started by the harness, with detect_leaks=1; any AddressSanitizer or
#     LeakSanitizer report fails the run (reports are collected with log_path, so a report from
#     any thread or process counts even if the program still exited 0)
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$REPO"
HERE="$REPO/tests/sanitize"
BUILD="$HERE/build"
export IRONLOCK_HARNESS="${IRONLOCK_HARNESS:-$REPO/target/debug/ironlock-harness}"
export RUST_BACKTRACE=0 # the panic-boundary test prints one panic message; keep it short
passed=0
failed=0
failures=()

step() { printf '\n== %s\n' "$*"; }
pass() { passed=$((passed + 1)); echo "PASS $1"; }
fail() { failed=$((failed + 1)); failures+=("$1"); echo "FAIL $1"; }

step "tools"
need=()
command -v clang >/dev/null || need+=(clang)
command -v redis-server >/dev/null || need+=(redis-server)
command -v make >/dev/null || need+=(make)
# The ASan runtime clang links (libclang_rt.asan-x86_64.a) comes from libclang-rt-NN-dev.
if command -v clang >/dev/null; then
  [ -f "$(clang -print-file-name=libclang_rt.asan-x86_64.a)" ] ||
    [ -f "$(clang --print-runtime-dir 2>/dev/null)/libclang_rt.asan-x86_64.a" ] ||
    need+=("libclang-rt-$(clang -dumpversion | cut -d. -f1)-dev")
else
  need+=(libclang-rt-14-dev)
fi
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi
  echo "installing ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
clang --version | head -1

step "build libironlock (no sanitizer) and the harness"
cargo build -q -p ironlock-ffi -p ironlock-harness

step "compile tests/c with clang -fsanitize=address"
SAN="-fsanitize=address -fno-omit-frame-pointer -fno-optimize-sibling-calls"
make -s -C tests/c -j2 BUILD="$BUILD" CC="clang $SAN" CXX="clang++ $SAN"

# Three nodes for the example program (the tests start their own): the harness keeps them
# while its stdin is open and kills them when this script exits.
coproc NODES { exec "$IRONLOCK_HARNESS" --nodes 3; }
read -r -u "${NODES[0]}" nodes_line
mapfile -t URLS < <(grep -o 'redis://127\.0\.0\.1:[0-9]*' <<<"$nodes_line")
echo "example nodes: ${URLS[*]}"

LOGS="$(mktemp -d)"
trap 'rm -rf "$LOGS"' EXIT
# detect_leaks=1: LeakSanitizer at exit. lsan.supp lists the only suppressed allocations (see
# there); print_suppressions=0 keeps the output to real reports.
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:log_path=$LOGS/asan"
export LSAN_OPTIONS="suppressions=$HERE/lsan.supp:print_suppressions=0"

asan() { # asan NAME PROGRAM ARGS...: passes when the program exits 0 and nothing was reported
  local name="$1" status=0 reports
  shift
  rm -f "$LOGS"/asan.*
  "$@" || status=$?
  reports="$(cat "$LOGS"/asan.* 2>/dev/null || true)"
  if [ "$status" -eq 0 ] && [ -z "$reports" ]; then
    pass "asan $name"
  else
    [ -n "$reports" ] && printf '%s\n' "$reports"
    fail "asan $name (exit $status)"
  fi
}

step "canary: the sanitizers catch a known bug in each class"
clang $SAN -g -O1 -std=c11 -Wall -Wextra -Werror "$HERE/canary.c" -o "$BUILD/canary"
canary() { # canary MODE EXPECTED: the canary must exit non-zero with a report naming EXPECTED
  local status=0
  rm -f "$LOGS"/asan.*
  "$BUILD/canary" "$1" || status=$?
  if [ "$status" -ne 0 ] && grep -q "$2" "$LOGS"/asan.* 2>/dev/null; then
    pass "canary $1 is reported ($2)"
  else
    fail "canary $1 is reported ($2) (exit $status)"
  fi
}
canary overflow "AddressSanitizer: heap-buffer-overflow"
canary use-after-free "AddressSanitizer: heap-use-after-free"
canary leak "LeakSanitizer: detected memory leaks"

for link in shared static; do
  step "run under ASan + LSan ($link)"
  asan "test_api ($link)" "$BUILD/test_api-$link"
  asan "leader elections ($link)" "$BUILD/test_election-$link"
  # Slow mode (as under valgrind): node_timeout 2 s and one retry of a failed scenario, so
  # a loaded machine does not turn a 50 ms node timeout into a failure; this run is about memory
  # errors, tests/c/run.sh checks the timing at full speed.
  IRONLOCK_CORPUS_SLOW=1 asan "corpus ($link)" "$BUILD/corpus-$link"
  asan "8 threads contending ($link)" "$BUILD/test_threads-$link" 10
  asan "C++17 ($link)" "$BUILD/test_cpp-$link"
  asan "C++17 RAII wrapper ironlock.hpp ($link)" "$BUILD/test_hpp-$link"
  asan "ffi/examples/basic.c ($link)" "$BUILD/basic-$link" "${URLS[@]}"
  # The C soak at reduced counts (its own 5 nodes): manager churn, lock cycles, a reconnect
  # storm; no RSS limit (ASan's quarantine holds freed memory), fds and threads still checked.
  asan "soak, lenient ($link)" python3 "$REPO/tests/soak/run.py" --short --lenient --only c \
    --c-worker "$BUILD/soak_worker-$link"
done

echo quit >&"${NODES[1]}"
wait "$NODES_PID" 2>/dev/null || true

echo
if [ "$failed" -gt 0 ]; then printf 'failed: %s\n' "${failures[@]}"; fi
echo "tests/sanitize: $passed passed, $failed failed (AddressSanitizer + LeakSanitizer)"
[ "$failed" -eq 0 ]
