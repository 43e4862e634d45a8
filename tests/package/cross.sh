#!/usr/bin/env bash
# Tests the aarch64 and musl artifacts of dist/ (tests/package/cross.py), after installing what it
# needs from Debian's packages and registering qemu-aarch64 with binfmt_misc. Run as root (apt,
# binfmt_misc, debootstrap and chroot). scripts/package --test runs it after building dist/.
#   bash tests/package/cross.sh [DIST]
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tests/package/qemu-prereqs.sh
. tests/package/qemu-prereqs.sh
cross_debs qemu-user-static debootstrap gcc-aarch64-linux-gnu libc6-dev-arm64-cross musl-tools \
  binutils pkg-config
register_qemu_aarch64
[ -x target/debug/ironlock-harness ] || CARGO_TARGET_DIR="$PWD/target" cargo build --quiet -p ironlock-harness
python3 tests/package/cross.py "${1:-dist}"
