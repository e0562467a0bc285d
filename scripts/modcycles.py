#!/usr/bin/env python3
"""Module dependency check for the workspace's crates.

For every crate it maps each source file to its module path, collects the paths a module names
(`crate::a::b`, `super::x`, `self::x`, and `use` trees of them), and reports:

- cycles among sibling modules (two children of one parent that reach each other, directly or
  through other siblings; a child naming its own ancestor is not a cycle: the parent declares it);
- references against a crate's declared stage order (`LAYERS` below): a module may name modules of
  its own stage or of stages before it, never after.

Test modules (`#[cfg(test)]` blocks to the end of a file, `tests.rs` files) are skipped: a test may
reach anywhere. Exit status 1 when anything is reported, so CI can run it.

Usage: scripts/modcycles.py [--quiet] [CRATE_DIR ...]   (default: every crate in the workspace)
"""

import os
import re
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES = ["model", "proto", "httpd", "agent", "collector", "sim", "diagnose", "testdata", "probe", "."]

# Stage order per crate: top-level modules, earliest first. A module may depend only on modules in
# its own stage or an earlier one. Modules not listed are unconstrained (lib.rs wires everything).
LAYERS = {
    "collector": [
        ["stats", "pace", "config", "probes"],
        ["store"],
        ["telemetry"],
        ["ingest", "steps", "persist", "jobs", "collectives"],
        ["analysis"],
        ["export"],
        ["remote_write"],
    ],
    "agent": [
        ["telemetry", "nccl"],
        ["source"],
        ["steps", "inspector", "probe"],
        ["sampler"],
        ["shipper"],
        ["config"],
        ["http", "once"],
    ],
    "diagnose": [
        ["progress", "timeline"],
        ["nccl_tests", "nccl_log", "kineto", "nsys", "collector", "inspector"],
        ["analysis"],
        ["analysed", "link"],
        ["findings"],
        ["report"],
        ["baseline"],
    ],
}


def module_path(src_dir, path):
    rel = os.path.relpath(path, src_dir)[:-3].split(os.sep)
    if rel[-1] in ("lib", "main") and len(rel) == 1:
        return ()
    if rel[-1] == "mod":
        rel = rel[:-1]
    return tuple(rel)


# Comments, raw strings, strings and character literals (a lifetime such as `'a` is not one: no closing quote).
LEXEMES = re.compile(
    r"//[^\n]*|/\*.*?\*/|\br(#*)\".*?\"\1|b?\"(?:\\.|[^\"\\])*\"|b?'(?:\\.|[^'\\])'",
    re.S,
)


def strip_tests_and_comments(text):
    # Drop everything from a `#[cfg(test)]` item on: test modules sit at the end of a file here.
    m = re.search(r"^\s*#\[cfg\(test\)\]", text, re.M)
    if m:
        text = text[: m.start()]
    # One pass, so that a `//` inside a string, a `"` in a character literal or a `\` ending a string's line
    # cannot shift what is read as code.
    return LEXEMES.sub(lambda m: "" if m.group(0).startswith("/") else '""', text)


def expand_use_tree(tree):
    """Expand `a::{b, c::{d, e}}` into paths."""
    tree = tree.strip()
    out = []
    depth = 0
    start = None
    for i, ch in enumerate(tree):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                prefix = tree[:start].rstrip(":").rstrip()
                inner = tree[start + 1 : i]
                parts, d, cur = [], 0, ""
                for c in inner:
                    if c == "," and d == 0:
                        parts.append(cur)
                        cur = ""
                        continue
                    d += c == "{"
                    d -= c == "}"
                    cur += c
                parts.append(cur)
                for p in parts:
                    p = p.strip()
                    if not p:
                        continue
                    if p == "self":
                        out.append(prefix)
                    else:
                        for sub in expand_use_tree(p):
                            out.append(prefix + "::" + sub if prefix else sub)
                return out
    return [tree.split(" as ")[0].strip()]


def referenced_paths(text):
    paths = []
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        paths.extend(expand_use_tree(m.group(1)))
    for m in re.finditer(r"\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)", text):
        paths.append(m.group(1))
    return paths


def resolve(modpath, is_mod_file, path):
    parts = path.split("::")
    if parts[0] == "crate":
        base, rest = [], parts[1:]
    elif parts[0] in ("self", "super"):
        # In `a/b.rs` (module a::b) `self` is a::b and `super` is a; the same holds for `a/b/mod.rs`.
        base = list(modpath)
        rest = parts
        while rest and rest[0] in ("self", "super"):
            if rest[0] == "super":
                base = base[:-1]
            rest = rest[1:]
    else:
        return None
    return tuple(base + rest)


def crate_graph(crate_dir):
    src = os.path.join(crate_dir, "src")
    modules = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if f.endswith(".rs") and f != "tests.rs" and "bin" not in dirpath.split(os.sep):
                p = os.path.join(dirpath, f)
                modules[module_path(src, p)] = p
    known = set(modules)
    edges = defaultdict(set)  # module -> set of referenced known modules
    for mod, p in modules.items():
        with open(p, encoding="utf-8") as fh:
            text = strip_tests_and_comments(fh.read())
        for ref in referenced_paths(text):
            target = resolve(mod, p.endswith("mod.rs"), ref)
            if target is None:
                continue
            # Longest known module prefix of the path.
            while target and target not in known:
                target = target[:-1]
            if target and target != mod:
                edges[mod].add(target)
    return known, edges


def sibling_cycles(known, edges):
    """SCCs of size > 1 among the children of each parent (descendants folded into the child)."""
    found = []
    parents = {m[:-1] for m in known if m}
    for parent in sorted(parents):
        children = sorted({m[: len(parent) + 1] for m in known if len(m) > len(parent) and m[: len(parent)] == parent})
        g = defaultdict(set)
        for src, targets in edges.items():
            if len(src) <= len(parent) or src[: len(parent)] != parent:
                continue
            a = src[: len(parent) + 1]
            for t in targets:
                if len(t) > len(parent) and t[: len(parent)] == parent:
                    b = t[: len(parent) + 1]
                    if a != b:
                        g[a].add(b)
        for scc in tarjan(children, g):
            if len(scc) > 1:
                found.append(sorted("::".join(x) for x in scc))
    return found


def tarjan(nodes, g):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            strong(v)
    return out


def layer_violations(name, edges):
    layers = LAYERS.get(name)
    if not layers:
        return []
    rank = {m: i for i, stage in enumerate(layers) for m in stage}
    out = []
    for src, targets in sorted(edges.items()):
        if not src or src[0] not in rank:
            continue
        for t in sorted(targets):
            if t and t[0] in rank and rank[t[0]] > rank[src[0]]:
                out.append(f"{'::'.join(src)} -> {'::'.join(t)} (stage {rank[src[0]]} reaches stage {rank[t[0]]})")
    return out


def main(argv):
    quiet = "--quiet" in argv
    args = [a for a in argv if not a.startswith("--")]
    crates = args or [c for c in CRATES if os.path.isdir(os.path.join(ROOT, c, "src"))]
    problems = 0
    for c in crates:
        crate_dir = os.path.join(ROOT, c)
        name = os.path.basename(os.path.normpath(crate_dir)) if c != "." else "commwatch"
        known, edges = crate_graph(crate_dir)
        cycles = sibling_cycles(known, edges)
        layers = layer_violations(name, edges)
        problems += len(cycles) + len(layers)
        if cycles or layers or not quiet:
            print(f"{name}: {len(known)} modules, {len(cycles)} cycles, {len(layers)} stage violations")
        for cyc in cycles:
            print("  cycle: " + " <-> ".join(cyc))
        for v in layers:
            print("  stage: " + v)
    print(f"{problems} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
