#!/usr/bin/env python3
"""Runs every example of the user guide (docs/src) against three fresh redis-server nodes, then
opens every page of the built site in headless Chromium (docs/tests/browser.mjs).

Called by `scripts/docs --check` after the site is built into target/docs. Each fenced block of
a page (with its `{{#include}}`s expanded, as mdBook shows it) is one of:

  rust                      a doctest of docs/tests/rust (cargo test --doc), run
  python                    run by pytest (one test per block), in the repository's .venv
  js / ts                   run by node (ts compiled by the package's tsc first)
  c / cpp                   compiled with -Wall -Wextra -Werror against include/, run
  sh,cli                    run by sh with target/debug/ironlock on PATH
  sh,norun                  a command shown, not run: installs, builds, hour-long runs
  console                   `$ command` lines run as sh,cli; JSON output lines must match the
                            real output's events and fields (values differ from run to run)
  redis                     Redis commands, one a line, run on every node first (the ACL user
                            the security guide creates is used by the example after it)
  text, toml, cmake         output or configuration: nothing to run

Flags: `setup-manager` / `setup-nodes` wrap a fragment in docs/tests/templates/<name>.<ext>
(at the `EXAMPLE` line), `args-nodes` passes the node URLs as arguments. Any other info string
fails the check, so no block goes unrun by accident.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "docs" / "src"
SITE = REPO / "target" / "docs"
OUT = REPO / "target" / "docs-examples"
TEMPLATES = REPO / "docs" / "tests" / "templates"
sys.path.insert(0, str(REPO / "tests" / "harness"))

from harness import Harness  # noqa: E402  (tests/harness/harness.py)

RUN = {"rust", "python", "js", "ts", "c", "cpp", "sh", "console", "redis"}
SHOWN = {"text", "toml", "cmake"}
FLAGS = {"setup-manager", "setup-nodes", "args-nodes", "cli", "norun"}
TEMPLATE_EXT = {"python": "py", "js": "mjs", "ts": "mts", "c": "c"}
# Keys an example may leave behind: ironlock's own bookkeeping (fence counters, dates, queue
# keys that expire by themselves) and the fencing page's stand-in storage.
LEFT_BY_DESIGN = re.compile(r"(:ironlock:(fence|ticket|queue|beats|limit|master|epoch)$|^ironlock:|"
                            r"^invoice:42:(total|highest-fence)$)")


@dataclass
class Block:
    page: str
    line: int
    lang: str
    flags: List[str]
    code: str
    name: str = field(default="")


def fail(msg: str) -> None:
    print(f"docs check: FAILED: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def expand(md: Path) -> str:
    """The page as mdBook sees it: `{{#include path}}` replaced by the file (relative to md),
    `{{#include path:name}}` by the lines between its `ANCHOR: name` and `ANCHOR_END: name`."""

    def include(m: "re.Match[str]") -> str:
        path, _, anchor = m.group(1).partition(":")
        target = (md.parent / path).resolve()
        if not target.is_file():
            fail(f"{md.relative_to(REPO)}: {{{{#include {m.group(1)}}}}}: no such file")
        text = target.read_text().rstrip("\n")
        if not anchor:
            return text
        lines = text.split("\n")
        marks = [i for i, l in enumerate(lines) if re.search(rf"\bANCHOR(_END)?: {re.escape(anchor)}\b", l)]
        if len(marks) != 2:
            fail(f"{md.relative_to(REPO)}: {{{{#include {m.group(1)}}}}}: no ANCHOR / ANCHOR_END pair")
        return "\n".join(l for l in lines[marks[0] + 1:marks[1]] if "ANCHOR" not in l)

    return re.sub(r"\{\{#include ([^}\s]+)\}\}", include, md.read_text())


def extract() -> List[Block]:
    blocks: List[Block] = []
    for md in sorted(SRC.rglob("*.md")):
        page = str(md.relative_to(SRC))
        lines = expand(md).split("\n")
        i = 0
        while i < len(lines):
            m = re.match(r"^(\s*)```(.*)$", lines[i])
            if not m:
                i += 1
                continue
            if m.group(1):
                fail(f"{page}:{i + 1}: an indented code fence (write it at the line start)")
            info = m.group(2).strip()
            start = i
            i += 1
            body = []
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            if i == len(lines):
                fail(f"{page}:{start + 1}: code block never closed")
            i += 1
            parts = info.split(",") if info else [""]
            lang, flags = parts[0], parts[1:]
            where = f"{page}:{start + 1}"
            if lang not in RUN | SHOWN:
                fail(f"{where}: code block language {lang!r}: use one of {sorted(RUN | SHOWN)}")
            bad = [f for f in flags if f not in FLAGS]
            if bad:
                fail(f"{where}: unknown flag(s) {bad} in {info!r}")
            if lang == "sh" and not ({"cli", "norun"} & set(flags)):
                fail(f"{where}: a sh block is `sh,cli` (run) or `sh,norun` (shown only)")
            if lang == "rust" and flags:
                fail(f"{where}: Rust blocks run as plain doctests; hide set-up lines with `# `")
            for f in flags:
                if f.startswith("setup-"):
                    name = f[len("setup-"):]
                    ext = TEMPLATE_EXT.get(lang)
                    if not ext or not (TEMPLATES / f"{name}.{ext}").is_file():
                        fail(f"{where}: no template docs/tests/templates/{name}.{ext or '?'}")
            slug = re.sub(r"[^a-z0-9]+", "_", page[:-3].lower())
            blocks.append(Block(page, start + 1, lang, flags, "\n".join(body) + "\n",
                                f"{slug}_{start + 1}"))
    return blocks


def check_readme_links() -> int:
    """README.md links into the guide by relative paths: each must name a file here."""
    text = (REPO / "README.md").read_text()
    targets = [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", t)]
    for t in targets:
        if not (REPO / t.split("#")[0]).exists():
            fail(f"README.md links to {t}, which does not exist")
    return len(targets)


def wrap(b: Block) -> str:
    setup = [f[len("setup-"):] for f in b.flags if f.startswith("setup-")]
    if not setup:
        return b.code
    template = (TEMPLATES / f"{setup[0]}.{TEMPLATE_EXT[b.lang]}").read_text()
    out = []
    for line in template.split("\n"):
        stripped = line.strip()
        if stripped in ("# EXAMPLE", "// EXAMPLE"):
            indent = line[: len(line) - len(line.lstrip())]
            out += [(indent + l if l else l) for l in b.code.rstrip("\n").split("\n")]
        else:
            out.append(line)
    return "\n".join(out)


def run(cmd: List[str], what: str, env: Optional[Dict[str, str]] = None, timeout: float = 120,
        cwd: Optional[Path] = None) -> str:
    t = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        fail(f"{what}: no result within {timeout:.0f} s\n{e.stdout or ''}{e.stderr or ''}")
    if p.returncode != 0:
        fail(f"{what}: exit code {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}")
    print(f"  ok  {what} ({time.monotonic() - t:.1f} s)", flush=True)
    return p.stdout


def run_rust(blocks: List[Block], env: Dict[str, str]) -> None:
    lib = (REPO / "docs" / "tests" / "rust" / "lib.rs").read_text()
    listed_pages = set(re.findall(r'include_str!\("\.\./\.\./src/([^"]+)"\)', lib))
    pages = {b.page for b in blocks}
    missing = sorted(pages - listed_pages)
    if missing:
        fail(f"pages with Rust blocks missing from docs/tests/rust/lib.rs: {missing}")
    env = dict(env, RUSTDOCFLAGS="--cfg ironlock_docs")
    out = run(["cargo", "test", "-q", "-p", "ironlock-docs-examples", "--doc", "--",
               "--test-threads=1"], f"rust: {len(blocks)} blocks as doctests", env, timeout=600)
    passed = sum(int(n) for n in re.findall(r"test result: ok\. (\d+) passed", out))
    if passed != len(blocks):
        fail(f"rust: {passed} doctests passed, but the pages have {len(blocks)} Rust blocks\n{out}")


def run_python(blocks: List[Block], env: Dict[str, str]) -> None:
    d = OUT / "python"
    d.mkdir(parents=True)
    for b in blocks:
        (d / f"{b.name}.py").write_text(wrap(b))
    cases = [(b.name, f"{b.page}:{b.line}") for b in blocks]
    (d / "test_docs_examples.py").write_text(f'''"""Generated by docs/tests/run.py: one test per Python block of the user guide."""
import os, subprocess, sys
from pathlib import Path

import pytest

CASES = {cases!r}


@pytest.mark.parametrize("name,where", CASES, ids=[w for _, w in CASES])
def test_block_runs(name: str, where: str) -> None:
    p = subprocess.run([sys.executable, str(Path(__file__).parent / (name + ".py"))],
                       capture_output=True, text=True, timeout=120, env=os.environ)
    assert p.returncode == 0, where + "\\n" + p.stdout + p.stderr
''')
    python = REPO / ".venv" / "bin" / "python"
    out = run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", str(d)],
              f"python: {len(blocks)} blocks under pytest", env, timeout=600)
    if f"{len(blocks)} passed" not in out:
        fail(f"python: expected {len(blocks)} passed\n{out}")


def node_dir() -> Path:
    d = OUT / "node"
    mods = d / "node_modules"
    mods.mkdir(parents=True, exist_ok=True)
    if not (mods / "ironlock").exists():
        (mods / "ironlock").symlink_to(REPO / "node")
        # What the examples import besides ironlock, and the types tsc needs.
        for dep in ("ioredis", "prom-client", "@types"):
            (mods / dep).symlink_to(REPO / "node" / "node_modules" / dep)
    return d


def check_settings() -> int:
    """Every setting of the core's table (read through the Node addon) is on the settings page."""
    out = run(["node", "-e", "console.log(JSON.stringify(require('./index.js').settingKinds()))"],
              "settings: the core's table", cwd=REPO / "node")
    names = [re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), n) for n, _ in json.loads(out)]
    page = (SRC / "reference" / "settings.md").read_text()
    missing = [n for n in names if f"`{n}`" not in page]
    if len(names) < 20 or missing:
        fail(f"settings missing from docs/src/reference/settings.md: {missing} (of {len(names)})")
    return len(names)


def run_js(blocks: List[Block], env: Dict[str, str]) -> None:
    print(f"  ok  settings: the reference lists all {check_settings()} settings of the core", flush=True)
    d = node_dir()
    for b in blocks:
        f = d / f"{b.name}.mjs"
        f.write_text(wrap(b))
        run(["node", str(f)], f"js: {b.page}:{b.line}", env, timeout=60)


def run_ts(blocks: List[Block], env: Dict[str, str]) -> None:
    d = node_dir()
    for b in blocks:
        (d / f"{b.name}.mts").write_text(wrap(b))
    shutil.copy(TEMPLATES / "tsconfig.json", d / "tsconfig.json")
    tsc = REPO / "node" / "node_modules" / "typescript" / "bin" / "tsc"
    run(["node", str(tsc), "-p", str(d)], f"ts: tsc of {len(blocks)} blocks", env, timeout=300)
    for b in blocks:
        run(["node", str(d / "build" / f"{b.name}.mjs")], f"ts: {b.page}:{b.line}", env, timeout=60)


def run_c(blocks: List[Block], env: Dict[str, str], urls: List[str]) -> None:
    d = OUT / "c"
    d.mkdir(parents=True)
    lib = REPO / "target" / "debug"
    for b in blocks:
        if b.lang == "c":
            src = d / f"{b.name}.c"
            cc = ["cc", "-std=c11"]
        else:
            src = d / f"{b.name}.cpp"
            cc = ["c++", "-std=c++17", "-pedantic"]
        src.write_text(wrap(b))
        exe = d / b.name
        run(cc + ["-Wall", "-Wextra", "-Werror", "-I", str(REPO / "include"), str(src), "-o", str(exe),
                  "-L", str(lib), "-lironlock", f"-Wl,-rpath,{lib}", "-lm", "-lpthread", "-ldl"],
            f"{b.lang}: compile {b.page}:{b.line}", env)
        args = urls if ("args-nodes" in b.flags or "setup-manager" in b.flags) else []
        run([str(exe), *args], f"{b.lang}: run {b.page}:{b.line}", env, timeout=60)


def check_cli_options() -> int:
    """Every option `ironlock COMMAND --help` lists is in the command-line reference."""
    page = (SRC / "reference" / "cli.md").read_text()
    real = str(REPO / "target" / "debug" / "ironlock")
    options = set()
    for sub in ([], ["run"], ["status"], ["release"], ["check"], ["elect"], ["leader"]):
        text = run([real, *sub, "--help"], f"cli: ironlock {' '.join(sub + ['--help'])}")
        options |= set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", text)) - {"--help", "--version"}
    missing = sorted(o for o in options if f"`{o}" not in page)
    if missing:
        fail(f"options of `ironlock --help` missing from docs/src/reference/cli.md: {missing}")
    return len(options)


def cli_wrapper() -> Path:
    """A folder with an `ironlock` that runs target/debug/ironlock. The nodes were started a
    moment ago: their votes count only with the restart quarantine off, which the examples do
    not show (the quick start has its own switch)."""
    d = OUT / "bin"
    wrapper = d / "ironlock"
    if not wrapper.exists():
        d.mkdir(parents=True)
        real = REPO / "target" / "debug" / "ironlock"
        wrapper.write_text(f"""#!/bin/sh
case " $* " in *" --no-restart-quarantine "*) exec {real} "$@";; esac
cmd=$1; shift
exec {real} "$cmd" --no-restart-quarantine "$@"
""")
        wrapper.chmod(0o755)
    return d


def run_sh(blocks: List[Block], env: Dict[str, str]) -> None:
    print(f"  ok  cli: the reference names all {check_cli_options()} options of ironlock --help",
          flush=True)
    d = OUT / "sh"
    d.mkdir(parents=True)
    env = dict(env, PATH=f"{cli_wrapper()}:{env['PATH']}")
    for b in blocks:
        f = d / f"{b.name}.sh"
        f.write_text(b.code)
        run(["sh", "-e", str(f)], f"sh: {b.page}:{b.line}", env, timeout=60)


def run_console(blocks: List[Block], env: Dict[str, str]) -> None:
    """Each `$ command` runs; each shown JSON line must have the real line's event and fields."""
    env = dict(env, PATH=f"{cli_wrapper()}:{env['PATH']}")
    for b in blocks:
        lines = b.code.rstrip("\n").split("\n")
        if not lines[0].startswith("$ ") or any(l.startswith("$ ") for l in lines[1:]):
            fail(f"{b.page}:{b.line}: a console block is one `$ command` line and its output")
        out = run(["sh", "-c", lines[0][2:]], f"console: {b.page}:{b.line}", env, timeout=60)

        def shape(line: str) -> object:
            v = json.loads(line)
            return (v.get("event"), sorted(v)) if isinstance(v, dict) else type(v).__name__

        shown = [shape(l) for l in lines[1:]]
        real = [shape(l) for l in out.strip().split("\n")]
        if shown != real:
            fail(f"{b.page}:{b.line}: the output shown does not match the real one\n"
                 f"shown: {shown}\nreal:  {real}")


def run_redis(blocks: List[Block], h: Harness) -> None:
    for b in blocks:
        for line in b.code.strip().split("\n"):
            for i in range(len(h.urls)):
                answer = json.loads(h.send(f"cmd {i} {line}"))
                if isinstance(answer, dict) and "error" in answer:
                    fail(f"{b.page}:{b.line}: node {i} refused {line!r}: {answer['error']}")
        print(f"  ok  redis: {b.page}:{b.line} on every node", flush=True)


def leftover_keys(h: Harness) -> List[str]:
    left = []
    for i in range(len(h.urls)):
        keys = json.loads(h.send("cmd %d KEYS *" % i))
        left += [f"node {i}: {k}" for k in keys if not LEFT_BY_DESIGN.search(k)]
    return left


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-browser", action="store_true", help="skip the Chromium check")
    ap.add_argument("--only", choices=sorted(RUN), help="run one language's blocks only")
    args = ap.parse_args()
    t0 = time.monotonic()
    blocks = extract()
    print(f"  ok  README.md: {check_readme_links()} links into the repository", flush=True)
    by: Dict[str, List[Block]] = {}
    for b in blocks:
        if b.lang in RUN and "norun" not in b.flags:
            by.setdefault({"cpp": "c"}.get(b.lang, b.lang), []).append(b)
    shown = [b for b in blocks if b.lang in SHOWN or "norun" in b.flags]
    print(f"docs check: {len(blocks)} code blocks in {len(set(b.page for b in blocks))} pages: "
          + ", ".join(f"{k} {len(v)}" for k, v in sorted(by.items()))
          + f", shown only {len(shown)} ({', '.join(sorted(set(b.lang for b in shown)))})", flush=True)

    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    h = Harness(3)
    try:
        env = dict(os.environ, IRONLOCK_NODES=",".join(h.urls), IRONLOCK_QUARANTINE="off")
        env.pop("REDIS_URL", None)
        runners = {
            "redis": lambda bs: run_redis(bs, h),
            "rust": lambda bs: run_rust(bs, env),
            "python": lambda bs: run_python(bs, env),
            "js": lambda bs: run_js(bs, env),
            "ts": lambda bs: run_ts(bs, env),
            "c": lambda bs: run_c(bs, env, h.urls),
            "sh": lambda bs: run_sh(bs, env),
            "console": lambda bs: run_console(bs, env),
        }
        for lang, run_lang in runners.items():
            # Redis blocks set the nodes up (users) for the other examples: they always run.
            wanted = args.only in (None, lang) or lang == "redis" or (lang, args.only) == ("c", "cpp")
            if lang in by and wanted:
                run_lang(by[lang])
        left = leftover_keys(h)
        if left:
            fail("keys left on the nodes (an example did not release what it took): "
                 + ", ".join(left))
        print("  ok  no example left a lock or permit on the nodes", flush=True)
    finally:
        h.close()
    counts = {k: len(v) for k, v in sorted(by.items())
              if args.only in (None, k) or (k == "c" and args.only == "cpp")}
    if not args.no_browser and not args.only:
        out = run(["node", "--experimental-websocket", "--no-warnings",
                   str(REPO / "docs" / "tests" / "browser.mjs"), str(SITE)],
                  "chromium: every page of the site", timeout=600)
        print(out.rstrip())
    print(f"docs check: passed in {time.monotonic() - t0:.0f} s; examples run: "
          + ", ".join(f"{k} {n}" for k, n in counts.items()), flush=True)


if __name__ == "__main__":
    main()
