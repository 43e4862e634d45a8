"""Checks with `auditwheel show --json` that a wheel's platform tag is the one auditwheel finds.

    python3 tests/package/wheeltag.py AUDITWHEEL WHEEL      (exit 1 when it is not)

manylinux wheels: auditwheel's overall tag must be one of the tags in the file name
(manylinux_2_17_x86_64 for ...manylinux2014_x86_64.manylinux_2_17_x86_64.whl).

musllinux wheels: zig links a musl extension against `libc.so` (the name musl's loader answers
to itself), while Alpine's own compilers write `libc.musl-<arch>.so.1`. auditwheel on a glibc
machine only tells musl apart by the latter name, so it lists `libc.so` as an external library and
falls back to `linux_<arch>` overall. Here the check is the rest of its verdict: the symbol tag is
the file name's musllinux tag, and `libc.so` is the only library it needs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile


def verdict(auditwheel: str, wheel: str) -> tuple[bool, str]:
    tags = os.path.basename(wheel)[:-len(".whl")].rsplit("-", 1)[1].split(".")
    musl = any(t.startswith("musllinux") for t in tags)
    with tempfile.TemporaryDirectory() as empty:
        # For a musl wheel, search no directory of this (glibc) machine: its libc.so is a linker
        # script, which auditwheel would try to read as the musl library.
        ldpaths = ["--ldpaths", empty] if musl else []
        out = subprocess.run([auditwheel, "show", "--json", *ldpaths, wheel], capture_output=True,
                             text=True)
    if out.returncode != 0:
        return False, "auditwheel show failed: " + out.stderr[-1000:]
    info = json.loads(out.stdout)
    external = sorted(info.get("external_libs") or {})
    if musl:
        ok = info.get("sym_tag") in tags and external in ([], ["libc.so"])
        what = "symbol tag %s, external libraries %s" % (info.get("sym_tag"), external)
    else:
        ok = info.get("overall_tag") in tags and not external
        what = "platform tag %s, external libraries %s" % (info.get("overall_tag"), external)
    return ok, "%s: auditwheel finds %s" % (os.path.basename(wheel), what)


def main() -> int:
    ok, text = verdict(sys.argv[1], sys.argv[2])
    print(("PASS " if ok else "FAIL ") + text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
