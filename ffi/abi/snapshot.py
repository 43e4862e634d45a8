#!/usr/bin/env python3
"""The recorded ABI of libironlock.so.0 (ffi/abi/libironlock.so.0.abi) and its check.

    ffi/abi/snapshot.py --check  LIB   compare the ABI of include/ironlock.h + LIB with the record
    ffi/abi/snapshot.py --update LIB   rewrite the record (a deliberate, reviewed step)

The record has one line per fact: the SONAME, each exported symbol, each function prototype,
each typedef and opaque type, each public struct's size and alignment and each field's offset
and size (measured by compiling a C program against the header), and each constant's value.
The version macros are left out (they change with every release by design).

--check fails when a recorded line is missing from the current ABI (something was removed or
changed: a broken promise to compiled programs) and lists the lines that are new (additions:
allowed; --update records them).
"""

import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER = os.path.join(ROOT, "include", "ironlock.h")
# The 0.1.0 header, verbatim: the baseline every later library of generation 0 must honour.
BASELINE = os.path.join(ROOT, "ffi", "abi", "0.1.0", "ironlock.h")
RECORD = os.path.join(ROOT, "ffi", "abi", "libironlock.so.0.abi")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def statements(code):
    """Top-level statements of the header (ending with ';' at brace depth 0), preprocessor
    lines left out, whitespace folded."""
    # The C++ wrappers (`#ifdef __cplusplus` / `extern "C" {` / `#endif`) are not declarations.
    code = re.sub(r"#ifdef __cplusplus.*?#endif", "", code, flags=re.S)
    body = "\n".join(l for l in code.splitlines() if not l.strip().startswith("#"))
    out, depth, cur = [], 0, []
    for ch in body:
        cur.append(ch)
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == ";" and depth == 0:
            out.append(re.sub(r"\s+", " ", "".join(cur)).strip())
            cur = []
    return [s for s in out if s]


def header_facts(code):
    facts, structs, defines = [], {}, []
    for line in code.splitlines():
        m = re.match(r"\s*#define\s+(IRONLOCK_\w+)\s+(.+)$", line)
        if m and not m.group(1).startswith("IRONLOCK_VERSION_") and m.group(1) != "IRONLOCK_H":
            defines.append(m.group(1))
    for st in statements(code):
        m = re.match(r"typedef struct (\w+) \{(.*)\} (\w+);$", st)
        if m:
            fields = [f.strip() for f in m.group(2).split(";") if f.strip()]
            structs[m.group(1)] = [re.search(r"(\w+)(\[\d*\])?$", f).group(1) for f in fields]
            facts.append("struct " + m.group(1) + " { " + "; ".join(fields) + "; }")
            continue
        m = re.match(r"typedef struct (\w+) (\w+);$", st)
        if m:
            facts.append("opaque " + m.group(1))
            continue
        if st.startswith("typedef "):
            facts.append(st.rstrip(";"))
            continue
        if "(" in st and re.search(r"\bironlock_\w+\s*\(", st):
            proto = re.sub(r"\s*\(\s*", "(", st.rstrip(";"))
            proto = re.sub(r"\s*,\s*", ", ", re.sub(r"\s*\)", ")", proto))
            facts.append("function " + proto)
    return facts, structs, defines


def measured(structs, defines, header=HEADER):
    """Sizes, offsets and constant values, from a C program compiled against the header."""
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "ironlock.h"', "int main(void) {"]
    for name, fields in sorted(structs.items()):
        lines.append(f'  printf("layout {name} size=%zu align=%zu\\n", sizeof({name}), _Alignof({name}));')
        for f in fields:
            lines.append(
                f'  printf("field {name}.{f} offset=%zu size=%zu\\n", offsetof({name}, {f}), '
                f"sizeof((({name} *)0)->{f}));"
            )
    for d in defines:
        lines.append(f'  printf("const {d} = %lld\\n", (long long)({d}));')
    lines.append("  return 0;\n}")
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "abi.c"), os.path.join(tmp, "abi")
        with open(src, "w") as f:
            f.write("\n".join(lines) + "\n")
        subprocess.run(["cc", "-std=c11", "-I", os.path.dirname(header), src, "-o", exe], check=True)
        return subprocess.run([exe], check=True, capture_output=True, text=True).stdout.splitlines()


def library_facts(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True, text=True).stdout
    symbols = sorted(l.split()[-1] for l in out.splitlines() if l.strip())
    dyn = subprocess.run(["readelf", "-d", lib], check=True, capture_output=True, text=True).stdout
    soname = re.search(r"Library soname: \[(.+?)\]", dyn)
    return [f"soname {soname.group(1) if soname else '(none)'}"] + [f"symbol {s}" for s in symbols]


def facts_of(header):
    with open(header) as f:
        code = strip_comments(f.read())
    facts, structs, defines = header_facts(code)
    return facts + measured(structs, defines, header)


def current(lib):
    return sorted(set(library_facts(lib) + facts_of(HEADER)))


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("--check", "--update"):
        sys.exit(__doc__)
    now = current(sys.argv[2])
    if sys.argv[1] == "--update":
        with open(RECORD, "w") as f:
            f.write("# The ABI of libironlock.so.0 (generation 0). Generated by ffi/abi/snapshot.py --update;\n")
            f.write("# change it only deliberately: a line that disappears breaks compiled programs.\n")
            f.write("\n".join(now) + "\n")
        print(f"abi: recorded {len(now)} facts in {os.path.relpath(RECORD, ROOT)}")
        return
    with open(RECORD) as f:
        recorded = [l.rstrip("\n") for l in f if l.strip() and not l.startswith("#")]
    # Even a record regenerated after a removal cannot hide a broken 0.1.0 promise.
    gone = [l for l in dict.fromkeys(recorded + facts_of(BASELINE)) if l not in set(now)]
    new = [l for l in now if l not in set(recorded)]
    for l in new:
        print(f"abi: addition (not yet recorded): {l}")
    for l in gone:
        print(f"abi: REMOVED OR CHANGED: {l}")
    if gone:
        print(f"abi: {len(gone)} recorded facts changed or removed: the ABI must only grow")
        sys.exit(1)
    print(f"abi: {len(recorded)} recorded facts unchanged, {len(new)} additions")


if __name__ == "__main__":
    main()
