"""The package as users get it: stubs match the native module, the example runs, the wheel
(and `pip install ./python`) installs into a fresh virtualenv and imports, the wheel and the sdist
carry both licences and the Python README, and no user-facing text cites the internal spec."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

import ironlock
from conftest import REPO, Cluster

PYTHON_DIR = REPO / "python"
PY39 = os.path.expanduser("~/.pyenv/versions/3.9*/bin/python3.9")


def test_stubs_match_native_module() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "ironlock._native"],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_package_type_checks() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", str(PYTHON_DIR / "python" / "ironlock"),
         str(PYTHON_DIR / "examples" / "basic.py")],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_ttl_and_wait_are_typed(tmp_path: Path) -> None:
    # `ttl` takes seconds (int or float) or a timedelta; mypy flags anything else.
    use = tmp_path / "use_ttl.py"
    use.write_text(
        "from datetime import timedelta\n"
        "import ironlock\n"
        "def f(m: ironlock.LockManager, a: ironlock.AsyncLockManager) -> None:\n"
        "    m.lock('r', 10)\n"
        "    m.lock('r', ttl=1.5, wait=timedelta(seconds=2))\n"
        "    m.using('r', timedelta(seconds=10))\n"
        "    a.lock('r', 10.0, wait=3)\n"
        "    m.lock('r', ttl='10')\n"
        "    a.using('r', ttl=None)\n"
        "    m.lock('r', 10, wait='5')\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(use)],
        capture_output=True, text=True, timeout=300,
    )
    errors = [line for line in out.stdout.splitlines() if ": error:" in line]
    assert [e.split(":")[1] for e in errors] == ["8", "9", "10"], out.stdout + out.stderr
    assert 'Argument "ttl" to "lock" of "LockManager" has incompatible type "str"' in out.stdout


def test_py_typed_and_version() -> None:
    pkg = Path(ironlock.__file__).parent
    assert (pkg / "py.typed").exists() and (pkg / "_native.pyi").exists()
    cargo = (REPO / "Cargo.toml").read_text()
    assert f'version = "{ironlock.__version__}"' in cargo


def test_example_runs(cluster3: Cluster) -> None:
    env = dict(os.environ, IRONLOCK_NODES=",".join(cluster3.urls), IRONLOCK_QUARANTINE="off")
    out = subprocess.run(
        [sys.executable, str(PYTHON_DIR / "examples" / "basic.py")],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "busy:" in out.stdout and "released while still held: True" in out.stdout


def test_metrics_example_runs_and_is_in_the_guide(cluster3: Cluster) -> None:
    example = PYTHON_DIR / "examples" / "metrics.py"
    # The guide shows the file itself ({{#include}}), so it cannot drift.
    page = (REPO / "docs" / "src" / "guides" / "operations.md").read_text()
    assert "{{#include ../../../python/examples/metrics.py}}" in page, "the guide does not show metrics.py"
    env = dict(os.environ, IRONLOCK_NODES=",".join(cluster3.urls), IRONLOCK_QUARANTINE="off")
    out = subprocess.run([sys.executable, str(example)], capture_output=True, text=True,
                         timeout=60, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    for line in ("ironlock_granted_total 1.0", "ironlock_releases_total 1.0",
                 'ironlock_acquire_seconds_bucket{le="+Inf"} 1.0', "ironlock_round_seconds_count 1.0"):
        assert line in out.stdout, out.stdout


def _venv(base: str, path: Path) -> Path:
    made = subprocess.run([base, "-m", "venv", str(path)], capture_output=True, text=True,
                          timeout=120)
    assert made.returncode == 0, made.stderr
    return path / "bin" / "python"


def _imports(python: Path) -> str:
    probe = (
        "import sys, ironlock, ironlock._native as n; "
        "print(ironlock.__version__, n.__file__.rsplit('/', 1)[-1], "
        "ironlock.LockManager.__mro__[1].__name__, 'python', sys.version.split()[0])"
    )
    out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=60,
                         cwd="/")
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _pip(python: Path, *args: str) -> None:
    # For builds from the source folder (the PEP 517 maturin backend, as `pip install ./python`
    # does), the dev profile keeps it quick by reusing the workspace's compiled dependencies.
    env = dict(os.environ, MATURIN_PEP517_ARGS="--profile dev")
    env.pop("VIRTUAL_ENV", None)
    out = subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", *args],
                         capture_output=True, text=True, timeout=900, env=env, cwd=REPO)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def _wheel(tmp_path: Path) -> Path:
    """The wheel under test: the one run-tests.sh built and installed (IRONLOCK_WHEEL), else a
    fresh `maturin build`."""
    given = os.environ.get("IRONLOCK_WHEEL")
    if given:
        return Path(given).resolve()
    out = subprocess.run(
        [sys.executable, "-m", "maturin", "build", "--out", str(tmp_path / "wheels")],
        cwd=PYTHON_DIR, capture_output=True, text=True, timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (wheel,) = (tmp_path / "wheels").glob("ironlock-*.whl")
    return wheel


def test_wheel_installs_into_fresh_venvs(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    assert "-cp39-abi3-" in wheel.name
    # This interpreter, and the oldest CPython the abi3 wheel claims (3.9) when one is around.
    bases = [sys.executable] + sorted(glob.glob(PY39))[:1]
    for i, base in enumerate(bases):
        python = _venv(base, tmp_path / f"venv{i}")
        _pip(python, "install", "--no-index", str(wheel))
        line = _imports(python)
        print(f"{wheel.name} into a fresh venv of {base}; import says: {line}")
        assert line.startswith(ironlock.__version__ + " _native.abi3.so")


@pytest.mark.skipif(
    os.environ.get("IRONLOCK_TEST_SOURCE_INSTALL") != "1",
    reason="compiles the package once more; set IRONLOCK_TEST_SOURCE_INSTALL=1",
)
def test_pip_install_from_source_folder(tmp_path: Path) -> None:
    # A PEP 517 build removes an extension `maturin develop` put into the source tree; keep it.
    in_tree = PYTHON_DIR / "python" / "ironlock" / "_native.abi3.so"
    saved = tmp_path / in_tree.name
    if in_tree.exists():
        shutil.copy2(in_tree, saved)
    try:
        python = _venv(sys.executable, tmp_path / "venv")
        _pip(python, "install", str(PYTHON_DIR))
        line = _imports(python)
        print(f"pip install ./python into a fresh venv; import says: {line}")
        assert line.startswith(ironlock.__version__ + " _native.abi3.so")
    finally:
        if saved.exists() and not in_tree.exists():
            shutil.copy2(saved, in_tree)


def test_every_public_name_and_method_has_a_docstring() -> None:
    import inspect

    missing = []
    for name in ironlock.__all__:
        obj = getattr(ironlock, name)
        if name.startswith("__"):
            continue
        if not (getattr(obj, "__doc__", None) or "").strip():
            missing.append(name)
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if attr.startswith("_"):  # private, and protocol methods the class documents
                    continue
                if callable(member) or isinstance(member, (property, staticmethod, classmethod)) \
                        or type(member).__name__ in ("getset_descriptor", "method_descriptor"):
                    doc = getattr(member, "__doc__", None) or ""
                    if not doc.strip():
                        missing.append(f"{name}.{attr}")
    assert not missing, "no docstring: " + ", ".join(missing)


def _papers() -> Any:
    """tests/package/papers.py, the check scripts/package runs on every artifact."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("papers", REPO / "tests" / "package" / "papers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_wheel_carries_licences_and_python_readme(tmp_path: Path) -> None:
    problems = _papers().check_wheel(str(_wheel(tmp_path)))
    assert not problems, problems


def test_sdist_carries_licences_and_python_readme(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "maturin", "sdist", "--out", str(tmp_path)],
        cwd=PYTHON_DIR, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (sdist,) = tmp_path.glob("ironlock-*.tar.gz")
    papers = _papers()
    problems = papers.check_sdist(str(sdist))
    assert not problems, problems
    # Negative control: the same sdist without LICENSE-MIT fails the check.
    stripped = tmp_path / "stripped.tar.gz"
    with tarfile.open(sdist) as src, tarfile.open(stripped, "w:gz") as dst:
        for m in src.getmembers():
            if not m.name.endswith("/LICENSE-MIT") or m.name.count("/") != 1:
                dst.addfile(m, src.extractfile(m) if m.isfile() else None)
    assert "missing LICENSE-MIT" in papers.check_sdist(str(stripped))


def test_readmes_show_the_quick_start_verbatim() -> None:
    code = (PYTHON_DIR / "examples" / "basic.py").read_text()
    body = code[code.index("import os"):]
    readme = PYTHON_DIR / "README.md"
    assert body in readme.read_text(), f"{readme} quick start differs from examples/basic.py"
    # The guide shows the file itself ({{#include}}), so it cannot drift.
    page = (REPO / "docs" / "src" / "start" / "python.md").read_text()
    assert "{{#include ../../../python/examples/basic.py}}" in page, "the guide does not show basic.py"


# What users read: the READMEs, the Python package and its native module's docstrings, the npm
# package's JavaScript and types, the C and C++ headers, CLI help and error messages. None may
# cite the internal specification ("SPEC §4"): users do not have it; say the rule instead.
USER_DOCS = [
    "README.md", "python/README.md", "node/README.md", "ffi/README.md", "docs/src/**/*.md",
    "python/python/ironlock/*.py", "python/python/ironlock/*.pyi",
    "node/lib/*", "node/index.d.ts", "include/ironlock.h", "include/ironlock.hpp",
]
# Rust sources whose `///` lines are CLI help (clap) and whose string literals are messages.
RUST_SOURCES = ["cli/src/*.rs", "core/src/*.rs", "ffi/src/*.rs", "python/src/*.rs", "node/src/*.rs"]
STRING_WITH_SPEC = re.compile(r'"(?:[^"\\\n]|\\.)*\bSPEC\b(?:[^"\\\n]|\\.)*"')


def test_user_facing_docs_cite_no_spec() -> None:
    found = []
    for pattern in USER_DOCS:
        paths = sorted(REPO.glob(pattern))
        assert paths, pattern
        for path in paths:
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if re.search(r"\bSPEC\b", line):
                    found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    for pattern in RUST_SOURCES:
        for path in sorted(REPO.glob(pattern)):
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                text = line.strip()
                help_text = path.parts[-3] == "cli" and text.startswith("///")
                message = not text.startswith(("//", "*", "/*")) and STRING_WITH_SPEC.search(text)
                if (help_text and "SPEC" in text) or message:
                    found.append(f"{path.relative_to(REPO)}:{n}: {text}")
    native = ironlock._native
    for name in dir(native):
        obj = getattr(native, name)
        docs = [getattr(obj, "__doc__", None)]
        if isinstance(obj, type):
            docs += [getattr(m, "__doc__", None) for m in vars(obj).values()]
        found += [f"ironlock._native.{name}: {d}" for d in docs if isinstance(d, str) and "SPEC" in d]
    assert not found, "user-facing text cites SPEC:\n" + "\n".join(found)
