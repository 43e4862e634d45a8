"""The package as users get it: stubs match the native module, the example runs, and the wheel
(and `pip install ./python`) installs into a fresh virtualenv and imports."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

import ironlock
from conftest import REPO, Cluster

PYTHON_DIR = REPO / "python"


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


def _fresh_venv(path: Path) -> Path:
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    return path / "bin" / "python"


def _imports(python: Path) -> str:
    probe = (
        "import ironlock, ironlock._native as n; "
        "print(ironlock.__version__, n.__file__.rsplit('/', 1)[-1], ironlock.LockManager.__mro__[1])"
    )
    out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=60,
                         cwd="/")
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.skipif(os.environ.get("IRONLOCK_SKIP_INSTALL") == "1", reason="IRONLOCK_SKIP_INSTALL=1")
def test_wheel_installs_into_fresh_venv(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "maturin", "build", "--out", str(wheels)],
        cwd=PYTHON_DIR, capture_output=True, text=True, timeout=600,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = wheels.glob("ironlock-*-cp39-abi3-*.whl")
    python = _fresh_venv(tmp_path / "venv")
    pip = subprocess.run([str(python), "-m", "pip", "install", "--no-index", str(wheel)],
                         capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stderr
    line = _imports(python)
    print(f"fresh venv: installed {wheel.name}; import says: {line}")
    assert line.startswith(ironlock.__version__ + " _native.abi3.so")


@pytest.mark.skipif(os.environ.get("IRONLOCK_SKIP_INSTALL") == "1", reason="IRONLOCK_SKIP_INSTALL=1")
def test_pip_install_from_source_folder(tmp_path: Path) -> None:
    python = _fresh_venv(tmp_path / "venv")
    # The PEP 517 build (maturin backend) of the source folder, as `pip install ./python` does;
    # the dev profile keeps it quick by reusing the workspace's compiled dependencies.
    env = dict(os.environ, MATURIN_PEP517_ARGS="--profile dev")
    env.pop("VIRTUAL_ENV", None)
    pip = subprocess.run([str(python), "-m", "pip", "install", str(PYTHON_DIR)],
                         capture_output=True, text=True, timeout=900, env=env, cwd=REPO)
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    assert _imports(python).startswith(ironlock.__version__)
