# Sourced by tests/package/cross.sh and cross-smoke.sh: Debian's packages for running and building
# aarch64 and musl programs here, installed by name when missing (idempotent), and qemu-aarch64
# registered with binfmt_misc (flag F: the kernel keeps the interpreter open, so aarch64 programs
# also run inside a chroot that has no qemu of its own).
#   cross_debs PACKAGE...    apt-get install the packages that are not installed yet
#   register_qemu_aarch64    binfmt_misc mounted and qemu-aarch64 registered

cross_debs() {
  local need=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
  done
  if [ ${#need[@]} -gt 0 ]; then
    echo "cross: installing ${need[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
      --no-install-recommends "${need[@]}" >/dev/null
  fi
}

register_qemu_aarch64() {
  local misc=/proc/sys/fs/binfmt_misc
  [ -e "$misc/register" ] || mount -t binfmt_misc binfmt_misc "$misc"
  if [ ! -e "$misc/qemu-aarch64" ]; then
    # Debian's qemu-user-static ships the registration line (magic, mask, interpreter, flags).
    cat /usr/lib/binfmt.d/qemu-aarch64.conf > "$misc/register"
  fi
  grep -qx enabled "$misc/qemu-aarch64"
}
