#!/usr/bin/env bash
# CI's short cross test (a few minutes): cross-compiles the `ironlock` CLI for
# aarch64-unknown-linux-musl with cargo zigbuild (the toolchain scripts/package uses; a dev build
# to keep it short), checks that it is a static AArch64 executable, and runs its `run` under
# qemu-user against three redis-server nodes on 127.0.0.1. The full cross test of every artifact
# is `scripts/package --test` (tests/package/cross.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
start=$SECONDS
# shellcheck source=tests/package/qemu-prereqs.sh
. tests/package/qemu-prereqs.sh
# shellcheck source=scripts/package-tools
. scripts/package-tools
T=aarch64-unknown-linux-musl
cross_debs qemu-user-static binutils
register_qemu_aarch64
package_tools "$T"
echo "cross-smoke: cargo zigbuild -p ironlock-cli --target $T (at $((SECONDS - start))s)"
nice cargo zigbuild --quiet -p ironlock-cli --target "$T"
exe="$CARGO_TARGET_DIR/$T/debug/ironlock"
[ -x target/debug/ironlock-harness ] || CARGO_TARGET_DIR="$PWD/target" cargo build --quiet -p ironlock-harness
echo "cross-smoke: built (at $((SECONDS - start))s); running it under qemu"
python3 - "$exe" <<'PY'
import json, os, re, subprocess, sys
exe = sys.argv[1]
failed = 0
def check(name, ok, detail=""):
    global failed
    print("%s %s" % ("PASS" if ok else "FAIL", name), flush=True)
    if not ok:
        failed += 1
        print("  " + detail.strip().replace("\n", "\n  ")[-2000:])
head = subprocess.run(["readelf", "-h", "-l", "-d", exe], capture_output=True, text=True).stdout
check("the CLI is an AArch64 executable", re.search(r"Machine:\s+AArch64", head) is not None, head)
check("the CLI is static (no interpreter, no shared library)",
      "INTERP" not in head and "(NEEDED)" not in head, head)
harness = subprocess.Popen([os.environ.get("IRONLOCK_HARNESS", "target/debug/ironlock-harness"),
                            "--nodes", "3"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
try:
    urls = json.loads(harness.stdout.readline())["urls"]
    env = dict(os.environ, IRONLOCK_NODES=",".join(urls))
    res = "ironlock-cross-smoke-%d" % os.getpid()
    # Run through binfmt_misc: the kernel hands the aarch64 executable to qemu-aarch64.
    out = subprocess.run([exe, "run", "--no-restart-quarantine", "--fencing", "--wait", "20", res,
                          "-c", 'echo "fence=$IRONLOCK_FENCE"'],
                         env=env, capture_output=True, text=True, timeout=300)
    print("  | " + out.stdout.strip())
    check("`ironlock run` (aarch64, under qemu) takes the lock and runs the command with its fence",
          out.returncode == 0 and re.search(r"^fence=\d+$", out.stdout, re.M) is not None,
          out.stdout + out.stderr)
    out = subprocess.run([exe, "status", "--no-restart-quarantine", res], env=env,
                         capture_output=True, text=True, timeout=120)
    check("`ironlock status` (aarch64, under qemu) answers after the release",
          out.returncode == 0, out.stdout + out.stderr)
finally:
    harness.stdin.write("quit\n")
    harness.stdin.close()
    harness.wait(timeout=30)
print("cross-smoke: %d passed, %d failed" % (4 - failed, failed))
sys.exit(1 if failed else 0)
PY
echo "cross-smoke: done in $((SECONDS - start))s"
