"""Checks that every artifact carries its papers: both licences of "MIT OR Apache-2.0" (byte for
byte the repository's LICENSE-MIT and LICENSE-APACHE) and the README its ecosystem shows.

    python3 tests/package/papers.py [DIST]      (scripts/package runs it on every build)

- wheel: .dist-info/licenses/LICENSE-MIT and LICENSE-APACHE, METADATA with the licence
  expression, both License-File lines and python/README.md as the long description;
- sdist: LICENSE-MIT, LICENSE-APACHE and README.md (python/README.md) at its top, PKG-INFO as the
  wheel's METADATA;
- npm tarball: package/README.md (node/README.md), package/LICENSE-MIT, package/LICENSE-APACHE;
- npm per-platform packages: package/README.md (node/npm/KEY/README.md), both licences, an addon;
- C tarballs (one per target triple): README.md (ffi/README.md), LICENSE-MIT, LICENSE-APACHE and
  examples/basic.c, examples/basic.cpp at the top of the tree;
- CLI tarballs (one per architecture, static musl binary): ironlock, both licences, quickstart.sh.

The check functions return a list of problems (empty when all is there); python/tests uses them
on the wheel and sdist that its own run builds. Standard library only.
"""

from __future__ import annotations

import glob
import os
import sys
import tarfile
import zipfile
from email.parser import HeaderParser
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[2]
LICENCES = ("LICENSE-MIT", "LICENSE-APACHE")
EXPRESSION = "MIT OR Apache-2.0"


def _compare(found: Dict[str, Optional[bytes]], expected: Dict[str, Path]) -> List[str]:
    """Each expected member present and equal to its source file."""
    problems = []
    for name, source in expected.items():
        data = found.get(name)
        if data is None:
            problems.append("missing %s" % name)
        elif data != source.read_bytes():
            problems.append("%s differs from %s" % (name, source.relative_to(REPO)))
    return problems


def _metadata(text: str, what: str) -> List[str]:
    """Core metadata (a wheel's METADATA, an sdist's PKG-INFO): licence and long description."""
    meta = HeaderParser().parsestr(text)
    problems = []
    if meta.get("License-Expression") != EXPRESSION:
        problems.append("%s: License-Expression is %r, not %r"
                        % (what, meta.get("License-Expression"), EXPRESSION))
    files = meta.get_all("License-File") or []
    for name in LICENCES:
        if name not in files:
            problems.append("%s: no License-File: %s (has %s)" % (what, name, files))
    readme = (REPO / "python" / "README.md").read_text(encoding="utf-8")
    if meta.get_payload().strip() != readme.strip():
        problems.append("%s: the long description is not python/README.md" % what)
    return problems


def check_wheel(path: str) -> List[str]:
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        info = sorted({n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")})
        if len(info) != 1:
            return ["%s: %d .dist-info directories" % (path, len(info))]
        found = {n: z.read(n) for n in names if n.startswith(info[0] + "/")}
        problems = _compare(found, {"%s/licenses/%s" % (info[0], n): REPO / n for n in LICENCES})
        problems += _metadata(found[info[0] + "/METADATA"].decode("utf-8"), "wheel METADATA")
    return problems


def _tar_members(path: str, top: Optional[str] = None) -> Dict[str, Optional[bytes]]:
    """Regular files of a tarball by name (without its top directory when `top` is None: the one
    directory every member is under), read in full; other members map to None."""
    out: Dict[str, Optional[bytes]] = {}
    with tarfile.open(path) as t:
        members = t.getmembers()
        roots = {m.name.split("/", 1)[0] for m in members}
        strip = top if top is not None else (roots.pop() if len(roots) == 1 else "")
        for m in members:
            name = m.name[len(strip) + 1:] if strip and m.name.startswith(strip + "/") else m.name
            f = t.extractfile(m) if m.isfile() else None
            out[name] = f.read() if f is not None else None
    return out


def check_sdist(path: str) -> List[str]:
    found = _tar_members(path)
    problems = _compare(found, {n: REPO / n for n in LICENCES})
    problems += _compare(found, {"README.md": REPO / "python" / "README.md"})
    pkg_info = found.get("PKG-INFO")
    if pkg_info is None:
        return problems + ["missing PKG-INFO"]
    return problems + _metadata(pkg_info.decode("utf-8"), "sdist PKG-INFO")


def check_npm(path: str) -> List[str]:
    found = _tar_members(path, top="package")
    expected = {n: REPO / n for n in LICENCES}
    expected["README.md"] = REPO / "node" / "README.md"
    return _compare(found, expected)


def check_c(path: str) -> List[str]:
    found = _tar_members(path)
    expected = {n: REPO / n for n in LICENCES}
    expected["README.md"] = REPO / "ffi" / "README.md"
    for example in ("basic.c", "basic.cpp"):
        expected["examples/" + example] = REPO / "ffi" / "examples" / example
    return _compare(found, expected)


def check_npm_platform(path: str) -> List[str]:
    """A per-platform npm package (ironlock-linux-arm64-gnu-VERSION.tgz): its README from
    node/npm/KEY/ and both licences."""
    found = _tar_members(path, top="package")
    key = os.path.basename(path)[len("ironlock-"):].rsplit("-", 1)[0]
    expected = {n: REPO / n for n in LICENCES}
    expected["README.md"] = REPO / "node" / "npm" / key / "README.md"
    problems = _compare(found, expected)
    if not any(n.endswith(".node") for n in found):
        problems.append("no .node addon")
    return problems


def check_cli(path: str) -> List[str]:
    """A CLI tarball: the `ironlock` binary, both licences and the quick start script."""
    found = _tar_members(path)
    expected = {n: REPO / n for n in LICENCES}
    expected["quickstart.sh"] = REPO / "cli" / "examples" / "quickstart.sh"
    problems = _compare(found, expected)
    if not found.get("ironlock"):
        problems.append("no ironlock binary")
    return problems


TRIPLES = ("x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu",
           "x86_64-unknown-linux-musl", "aarch64-unknown-linux-musl")
NPM_KEYS = ("linux-x64-gnu", "linux-arm64-gnu", "linux-x64-musl", "linux-arm64-musl")

# Each pattern of dist/ with its check and how many files must match it.
CHECKS: List[Tuple[str, Callable[[str], List[str]], int]] = [
    ("ironlock-*-abi3-*.whl", check_wheel, 4),
    ("ironlock-[0-9]*.tar.gz", check_sdist, 1),
    ("ironlock-[0-9]*.tgz", check_npm, 1),
]
CHECKS += [("ironlock-%s-[0-9]*.tgz" % k, check_npm_platform, 1) for k in NPM_KEYS]
CHECKS += [("ironlock-c-*-%s.tar.gz" % t, check_c, 1) for t in TRIPLES]
CHECKS += [("ironlock-cli-*-%s.tar.gz" % t, check_cli, 1) for t in TRIPLES if t.endswith("musl")]


def main() -> int:
    dist = Path(sys.argv[1] if len(sys.argv) > 1 else REPO / "dist").resolve()
    failed = 0
    for pattern, check, count in CHECKS:
        found = sorted(glob.glob(str(dist / pattern)))
        if len(found) != count:
            print("FAIL %s: %d files match, expected %d: %s"
                  % (pattern, len(found), count, [os.path.basename(f) for f in found]))
            failed += 1
            continue
        for f in found:
            problems = check(f)
            print("%s %s: README and licences" % ("FAIL" if problems else "PASS", os.path.basename(f)))
            for p in problems:
                print("  " + p)
            failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
