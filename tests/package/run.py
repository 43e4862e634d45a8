"""Installs the x86_64 glibc artifacts of dist/ into a clean place and runs that language's quick
start against three local redis-server nodes (started by the project's harness); the aarch64 and
musl ones are tests/package/cross.py's.

    python3 tests/package/run.py [DIST]      (scripts/package --test builds dist/ and runs this)

- the x86_64 manylinux abi3 wheel into fresh virtualenvs of the oldest and the newest CPython found here
  (~/.pyenv/versions, then python3.X on PATH), outside the repository;
- the sdist into a fresh virtualenv of the newest CPython (pip builds it with Rust);
- the npm main package with its linux-x64-gnu package into a fresh npm project; the main package
  alone, and under a pretended riscv64, fails with a message naming the package it looked for;
- the x86_64 glibc C tarball unpacked into a fresh prefix, the C quick start built against it with
  pkg-config and with CMake (shared and static), and run.

Standard library only. Prints one line per check and exits non-zero on any failure.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
HARNESS = os.environ.get("IRONLOCK_HARNESS", str(REPO / "target" / "debug" / "ironlock-harness"))
failures: List[str] = []


def check(name: str, ok: bool, detail: str = "") -> None:
    print("%s %s" % ("PASS" if ok else "FAIL", name))
    if not ok:
        failures.append(name)
        if detail:
            print("  " + detail.strip().replace("\n", "\n  ")[-3000:])


def run(cmd: Sequence[str], cwd: Optional[Path] = None, env: Optional[Dict[str, str]] = None,
        timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def pythons() -> List[str]:
    """The oldest and the newest CPython >= 3.9 available here."""
    found: Dict[tuple, str] = {}
    candidates = glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3"))
    candidates += [p for p in (shutil.which("python3.%d" % m) for m in range(9, 20)) if p]
    for exe in candidates:
        out = run([exe, "-c", "import sys; print(sys.version_info[0], sys.version_info[1])"])
        if out.returncode != 0:
            continue
        ver = tuple(int(x) for x in out.stdout.split())
        if ver >= (3, 9) and ver not in found:
            found[ver] = exe
    if not found:
        return []
    order = sorted(found)
    return [found[order[0]]] if len(order) == 1 else [found[order[0]], found[order[-1]]]


def venv(base: str, where: Path) -> Path:
    made = run([base, "-m", "venv", str(where)], timeout=300)
    if made.returncode != 0:
        raise RuntimeError(made.stderr)
    return where / "bin" / "python"


def main() -> int:
    dist = Path(sys.argv[1] if len(sys.argv) > 1 else REPO / "dist").resolve()
    wheel = glob.glob(str(dist / "ironlock-*-abi3-*manylinux*x86_64*.whl"))
    sdist = glob.glob(str(dist / "ironlock-[0-9]*.tar.gz"))
    npm = glob.glob(str(dist / "ironlock-[0-9]*.tgz"))
    addon_pkg = glob.glob(str(dist / "ironlock-linux-x64-gnu-[0-9]*.tgz"))
    ctar = glob.glob(str(dist / "ironlock-c-*-x86_64-unknown-linux-gnu.tar.gz"))
    for what, got in (("x86_64 glibc wheel", wheel), ("sdist", sdist), ("npm main package", npm),
                      ("npm linux-x64-gnu package", addon_pkg), ("x86_64 glibc C tarball", ctar)):
        check("dist/ has one %s" % what, len(got) == 1, "found %s in %s" % (got, dist))
    if failures:
        return 1

    harness = subprocess.Popen([HARNESS, "--nodes", "3"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    assert harness.stdout is not None and harness.stdin is not None
    urls: List[str] = json.loads(harness.stdout.readline())["urls"]
    env = dict(os.environ, IRONLOCK_NODES=",".join(urls), IRONLOCK_QUARANTINE="off")
    # Nothing from the checkout may leak into the clean installs.
    for k in ("PYTHONPATH", "NODE_PATH", "LD_LIBRARY_PATH", "PKG_CONFIG_PATH", "VIRTUAL_ENV"):
        env.pop(k, None)
    work = Path(tempfile.mkdtemp(prefix="ironlock-package-"))
    try:
        py_quick = work / "basic.py"
        shutil.copy(REPO / "python" / "examples" / "basic.py", py_quick)
        for base in pythons():
            py = venv(base, work / ("venv-" + Path(base).parent.parent.name))
            out = run([str(py), "-m", "pip", "install", "--quiet", "--no-index", wheel[0]])
            check("wheel installs into a fresh venv of %s" % base, out.returncode == 0, out.stderr)
            out = run([str(py), str(py_quick)], cwd=work, env=env, timeout=120)
            check("Python quick start runs from the wheel on %s" % base,
                  out.returncode == 0 and "released while still held: True" in out.stdout,
                  out.stdout + out.stderr)
        newest = pythons()[-1]  # [oldest, newest]
        py = venv(newest, work / "venv-sdist")
        out = run([str(py), "-m", "pip", "install", "--quiet", sdist[0]], timeout=1800)
        check("sdist builds and installs with pip (%s)" % newest, out.returncode == 0, out.stderr)
        out = run([str(py), str(py_quick)], cwd=work, env=env, timeout=120)
        check("Python quick start runs from the sdist build",
              out.returncode == 0 and "released while still held: True" in out.stdout,
              out.stdout + out.stderr)

        proj = work / "npm-project"
        proj.mkdir()
        (proj / "package.json").write_text('{"name": "consumer", "private": true, "type": "module"}\n')
        # The per-platform packages are not on the registry yet: the main package's optional
        # dependencies are left out and the one for this machine is installed from dist/.
        bare = work / "npm-bare"
        bare.mkdir()
        (bare / "package.json").write_text('{"name": "bare", "private": true}\n')
        out = run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--omit=optional", npm[0]],
                  cwd=bare)
        check("npm main package installs alone (no addon)", out.returncode == 0, out.stderr)
        out = run(["node", "-e", "require('ironlock')"], cwd=bare, env=env, timeout=60)
        check("without its platform package, ironlock names the package it looked for and the fix",
              out.returncode != 0 and "looked for the package ironlock-linux-x64-gnu" in out.stderr
              and "npm install ironlock-linux-x64-gnu@" in out.stderr, out.stdout + out.stderr)
        riscv = work / "riscv.cjs"
        riscv.write_text("Object.defineProperty(process, 'arch', { value: 'riscv64' })\n")
        out = run(["node", "-r", str(riscv), "-e", "require('ironlock')"], cwd=bare, env=env, timeout=60)
        check("on a platform with no package, ironlock says which package and how to build one",
              out.returncode != 0 and "looked for the package ironlock-linux-riscv64-gnu" in out.stderr
              and "which ironlock does not publish" in out.stderr and "napi build" in out.stderr,
              out.stdout + out.stderr)
        out = run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--omit=optional",
                   npm[0], addon_pkg[0]], cwd=proj)
        check("npm main and linux-x64-gnu packages install into a fresh project", out.returncode == 0,
              out.stderr)
        addon = glob.glob(str(proj / "node_modules" / "ironlock-linux-x64-gnu" / "ironlock.*.node"))
        addon += glob.glob(str(proj / "node_modules" / "ironlock" / "ironlock.*.node"))
        size = os.path.getsize(addon[0]) if addon else 0
        check("one stripped release addon (< 20 MB), in ironlock-linux-x64-gnu",
              len(addon) == 1 and "ironlock-linux-x64-gnu" in addon[0] and 0 < size < 20 * 1024 * 1024,
              "%s: %d bytes" % (addon, size))
        shutil.copy(REPO / "node" / "examples" / "basic.mjs", proj / "basic.mjs")
        out = run(["node", "basic.mjs"], cwd=proj, env=env, timeout=120)
        check("Node quick start runs from the npm tarball",
              out.returncode == 0 and re.search(r"^using finished with 465$", out.stdout, re.M) is not None,
              out.stdout + out.stderr)

        prefix = work / "c-prefix"
        with tarfile.open(ctar[0]) as t:
            t.extractall(prefix)
        (root,) = list(prefix.iterdir())
        have = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink())
        check("C tarball holds lib/, include/, pkg-config and CMake files",
              all(x in have for x in ("include/ironlock.h", "include/ironlock.hpp",
                                      "lib/libironlock.a", "lib/libironlock.so",
                                      "lib/libironlock.so.0", "lib/pkgconfig/ironlock.pc",
                                      "lib/cmake/ironlock/ironlockConfig.cmake")), "\n".join(have))
        cenv = dict(env, PKG_CONFIG_PATH=str(root / "lib" / "pkgconfig"))
        flags = run(["pkg-config", "--cflags", "--libs", "ironlock"], env=cenv)
        include = flags.stdout.split()[0][2:] if flags.stdout.startswith("-I") else ""
        check("pkg-config finds the unpacked tree (paths relative to the .pc file)",
              flags.returncode == 0 and os.path.realpath(include) == os.path.realpath(root / "include"),
              flags.stdout + flags.stderr)
        exe = work / "basic-c"
        out = run(["cc", str(REPO / "ffi" / "examples" / "basic.c"), *flags.stdout.split(),
                   "-o", str(exe)], env=cenv)
        check("C quick start compiles with pkg-config", out.returncode == 0, out.stderr)
        out = run([str(exe), *urls], env=dict(env, LD_LIBRARY_PATH=str(root / "lib")), timeout=60)
        check("C quick start runs against the unpacked library",
              out.returncode == 0 and "released (still held until release: yes)" in out.stdout,
              out.stdout + out.stderr)
        build = work / "cmake-build"
        out = run(["cmake", "-S", str(REPO / "tests" / "c" / "cmake-consumer"), "-B", str(build),
                   "-DCMAKE_PREFIX_PATH=%s" % root, "-DEXAMPLE=%s" % (REPO / "ffi" / "examples" / "basic.c"),
                   "-DEXAMPLE_CPP=%s" % (REPO / "ffi" / "examples" / "basic.cpp")], env=env)
        if out.returncode == 0:
            out = run(["cmake", "--build", str(build), "-j2"], env=env)
        check("CMake finds the unpacked package and builds C and C++ consumers", out.returncode == 0,
              out.stdout + out.stderr)
        for name in ("basic_cmake_shared", "basic_cmake_static", "basic_cmake_cpp"):
            out = run([str(build / name), *urls], env=env, timeout=60)
            check("%s runs" % name, out.returncode == 0, out.stdout + out.stderr)
    finally:
        harness.stdin.write("quit\n")
        harness.stdin.close()
        harness.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    print("package: %d failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
