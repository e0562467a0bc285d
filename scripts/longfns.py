#!/usr/bin/env python3
"""Lists the longest functions of the workspace's library and binary code (test modules and tests/, benches/
excluded), and the largest source files.

Usage: scripts/longfns.py [--over N] [--top K] [DIR ...]
  --over N   list every function longer than N lines and exit 1 if there is one (default: report only)
  --top K    how many of the longest functions and largest files to print (default 10)
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP_DIRS = {"target", "tests", "benches", "fuzz", ".git", "node_modules"}
FN = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?(?:extern\s+\"C\"\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)")


def strip(line, state):
    """Removes strings, chars and comments from one line; `state` carries an open block comment or raw string."""
    out, i, n = [], 0, len(line)
    while i < n:
        if state["block"]:
            j = line.find("*/", i)
            if j < 0:
                return "".join(out)
            state["block"] = False
            i = j + 2
            continue
        if state["raw"]:
            j = line.find(state["raw"], i)
            if j < 0:
                return "".join(out)
            i = j + len(state["raw"])
            state["raw"] = None
            continue
        if state["str"]:
            while i < n:
                if line[i] == "\\":
                    i += 2
                    continue
                if line[i] == '"':
                    state["str"] = False
                    i += 1
                    break
                i += 1
            continue
        c = line[i]
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"] = True
            i += 2
            continue
        m = re.match(r'r(#*)"', line[i:])
        if m and (i == 0 or not (line[i - 1].isalnum() or line[i - 1] == "_")):
            state["raw"] = '"' + m.group(1)
            i += len(m.group(0))
            continue
        if c == '"':
            state["str"] = True
            i += 1
            continue
        if c == "'":
            m = re.match(r"'(\\.|[^\\'])'", line[i:]) or re.match(r"'\\u\{[0-9a-fA-F]+\}'", line[i:])
            if m:
                i += len(m.group(0))
                continue
        out.append(c)
        i += 1
    return "".join(out)


def functions(path):
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    state = {"block": False, "raw": None, "str": False}
    code = []
    for line in lines:
        if re.match(r"^\s*#\[cfg\(test\)\]", line):
            break
        code.append(strip(line, state))
    out = []
    i = 0
    while i < len(code):
        m = FN.match(code[i])
        if not m:
            i += 1
            continue
        depth, started, j = 0, False, i
        while j < len(code):
            for ch in code[j]:
                if ch == "{":
                    depth += 1
                    started = True
                elif ch == "}":
                    depth -= 1
                elif ch == ";" and not started and depth == 0:
                    started = None
                    break
            if started is None or (started and depth <= 0):
                break
            j += 1
        if started:
            out.append((j - i + 1, m.group(1), i + 1))
        i += 1
    return out


def rust_files(dirs):
    for d in dirs:
        for dirpath, dirnames, files in os.walk(d):
            dirnames[:] = [x for x in dirnames if x not in SKIP_DIRS]
            for f in files:
                if f.endswith(".rs") and f != "tests.rs":
                    yield os.path.join(dirpath, f)


def main(argv):
    over, top, dirs = None, 10, []
    it = iter(argv)
    for a in it:
        if a == "--over":
            over = int(next(it))
        elif a == "--top":
            top = int(next(it))
        else:
            dirs.append(a)
    dirs = dirs or [ROOT]
    fns, sizes = [], []
    for p in rust_files(dirs):
        rel = os.path.relpath(p, ROOT)
        with open(p, encoding="utf-8") as fh:
            sizes.append((sum(1 for _ in fh), rel))
        fns.extend((n, f"{rel}:{line} {name}") for n, name, line in functions(p))
    fns.sort(reverse=True)
    sizes.sort(reverse=True)
    print(f"longest functions (of {len(fns)}):")
    for n, where in fns[:top]:
        print(f"  {n:5} {where}")
    print("largest files:")
    for n, rel in sizes[:top]:
        print(f"  {n:5} {rel}")
    if over is not None:
        long = [(n, w) for n, w in fns if n > over]
        print(f"{len(long)} functions over {over} lines")
        for n, w in long:
            print(f"  {n:5} {w}")
        return 1 if long else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
