#!/usr/bin/env bash
# Coverage-guided fuzzing of ironlock's input validation (issue 6, item 2).
#
#   fuzz/run.sh [SECONDS] [TARGET...]      default: 30 s for each of config redact resources c_api
#   FUZZ_KEEP=1 fuzz/run.sh 600            also merges new coverage into fuzz/corpus/ (to commit)
#
# Builds the libFuzzer targets (cargo-fuzz on the stable toolchain with RUSTC_BOOTSTRAP=1, since
# cargo-fuzz passes -Z flags; AddressSanitizer on), then runs each target for SECONDS from the
# committed corpus (fuzz/corpus/<target>/, read-only) plus every input that ever failed
# (fuzz/regressions/<target>/); new inputs go to fuzz/target/corpus/<target>/ (not committed).
# Exits non-zero when a target crashes: a panic, a violated property or a sanitizer report.
# The input is saved in fuzz/artifacts/<target>/; replay it with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run <target> fuzz/artifacts/<target>/<file>
# and keep it as fuzz/regressions/<target>/<what-it-broke> once fixed.
# Then checks that every core bug still listed as open in src/known.rs still reproduces.
# No network traffic beyond 127.0.0.1 (see src/c_api.rs).
set -euo pipefail
FUZZ="$(cd "$(dirname "$0")" && pwd)"
cd "$FUZZ"
TIME="${1:-30}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(config redact resources c_api)
CARGO_FUZZ_VERSION=0.13.2
export RUSTC_BOOTSTRAP=1 # stable rustc accepts cargo-fuzz's -Z flags
export RUST_BACKTRACE=0
TRIPLE="$(rustc -vV | sed -n 's/^host: //p')"
BIN="$FUZZ/target/$TRIPLE/release"

step() { printf '\n== %s\n' "$*"; }

step "tools"
if ! command -v c++ >/dev/null; then # libfuzzer-sys compiles libFuzzer (C++)
  SUDO=""
  if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends g++ >/dev/null
fi
if [ "$(cargo fuzz --version 2>/dev/null || true)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
  echo "installing cargo-fuzz $CARGO_FUZZ_VERSION"
  cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION" --quiet
fi
cargo fuzz --version
rustc --version

step "unit tests of the properties (the secret finder, the leak check)"
(cd "$FUZZ" && cargo test -q --lib)

step "build (release + debug assertions, AddressSanitizer, libFuzzer coverage)"
mkdir -p "$FUZZ/target"
if ! cargo fuzz build -O >"$FUZZ/target/build.log" 2>&1; then
  cat "$FUZZ/target/build.log"
  echo "fuzz: build failed"
  exit 1
fi
tail -1 "$FUZZ/target/build.log"
for t in "${TARGETS[@]}"; do
  [ -x "$BIN/$t" ] || { echo "fuzz: no target named $t"; exit 1; }
done

crashed=()
summary=()
for t in "${TARGETS[@]}"; do
  step "fuzz $t for ${TIME}s"
  scratch="$FUZZ/target/corpus/$t"
  mkdir -p "$scratch" "$FUZZ/artifacts/$t"
  seeds=("$FUZZ/corpus/$t")
  [ -d "$FUZZ/regressions/$t" ] && seeds+=("$FUZZ/regressions/$t")
  log="$FUZZ/target/fuzz-$t.log"
  status=0
  # -max_len keeps inputs (and the corpus) small; -timeout flags a hang as a crash.
  "$BIN/$t" "$scratch" "${seeds[@]}" ${FUZZ_SEED:+-seed="$FUZZ_SEED"} -max_total_time="$TIME" -max_len=1024 -timeout=20 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$FUZZ/artifacts/$t/" \
    >"$log" 2>&1 || status=$?
  grep -E '^#[0-9]+ +(INITED|DONE)|^Done|stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$log" || true
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")"
  corpus="$(grep -oE 'corp: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+' || true)"
  cov="$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+' || true)"
  if [ "$status" -ne 0 ]; then
    grep -E -A30 'panicked at|ERROR: (AddressSanitizer|libFuzzer|LeakSanitizer)|SUMMARY' "$log" | head -60 || tail -40 "$log"
    grep -E 'Test unit written to' "$log" || true
    crashed+=("$t")
    summary+=("$t: CRASH after ${runs:-?} runs (exit $status; log $log)")
  else
    summary+=("$t: ${runs:-?} runs in ${TIME}s (${rate:-?} exec/s), cov ${cov:-?}, corpus ${corpus:-?} inputs, no crash")
  fi
  if [ "${FUZZ_KEEP:-0}" = 1 ] && [ "$status" -eq 0 ]; then
    # Add to the committed corpus a small set of new inputs that reach new edges (edge
    # coverage only, no hit counters or comparisons: a few hundred files per target).
    "$BIN/$t" -set_cover_merge=1 -use_counters=0 -use_cmp=0 -max_len=1024 \
      "$FUZZ/corpus/$t" "$scratch" >>"$log" 2>&1
    n="$(find "$FUZZ/corpus/$t" -type f | wc -l)"
    echo "corpus/$t: $n inputs"
    [ "$n" -le 400 ] || echo "corpus/$t: more than 400 inputs; prune before committing"
  fi
done

step "core bugs listed as open in src/known.rs still reproduce"
# A flag `pub const NAME: bool = true;` covers regressions/*/core-bug-<name in kebab case>*.
known_failed=0
while read -r flag; do
  kebab="$(tr 'A-Z_' 'a-z-' <<<"$flag")"
  for input in "$FUZZ"/regressions/*/core-bug-"$kebab"*; do
    [ -f "$input" ] || continue
    t="$(basename "$(dirname "$input")")"
    [ -x "$BIN/$t" ] || continue
    if IRONLOCK_FUZZ_STRICT=1 "$BIN/$t" "$input" >/dev/null 2>&1; then
      echo "FIXED  regressions/$t/$(basename "$input") passes the full property: set known::$flag to false"
      known_failed=1
    else
      echo "open   regressions/$t/$(basename "$input") (known::$flag)"
    fi
  done
done < <(sed -n 's/^pub const \([A-Z_]*\): bool = true;$/\1/p' "$FUZZ/src/known.rs")

echo
printf '%s\n' "${summary[@]}"
if [ ${#crashed[@]} -gt 0 ]; then
  echo "fuzz: ${#TARGETS[@]} targets, ${#crashed[@]} crashed (${crashed[*]}): inputs in fuzz/artifacts/"
  exit 1
fi
[ "$known_failed" -eq 0 ] || { echo "fuzz: a known core bug no longer reproduces (see above)"; exit 1; }
echo "fuzz: ${#TARGETS[@]} targets, ${TIME}s each, 0 crashes"
