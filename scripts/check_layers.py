#!/usr/bin/env python3
"""check_layers.py — every #include "..." in the product points down the layers,
and calls go one way inside each folder.

The layers are the folders of docs/LAYOUT.md.  A file may include headers of
its own folder and of the folders listed as below it here; anything else (an
include that points up or sideways, a header name that two folders define, a
quoted include that resolves nowhere) is reported and the exit status is 1.
Inside a folder, file A calls file B when A's code names a function B.c
defines (not static); a circle of such calls between files is reported too
(the files would be one room cut in two).  tests/ and bench/ sit on top of
everything and are not checked.
"""
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# folder -> the folders it may include (besides itself); order = bottom to top
CORE = ["core/base", "core/prompt", "core/segment", "core/plan"]
KERNELS = ["kernels", "kernels/cpu", "kernels/cuda"]
ENGINE = ["engine/model", "engine/compute", "engine/pic", "engine/cluster",
          "engine/serve", "engine/cli"]
BELOW = {          # the op interface and its backends are one layer
    "kernels": ["kernels/cpu", "kernels/cuda"],
    "kernels/cpu": ["kernels"],
    "kernels/cuda": ["kernels"],
    "ngx_pic_module": CORE,
}
for stack, base in ((CORE, []), (ENGINE, CORE + ["kernels"])):
    for i, folder in enumerate(stack):
        BELOW[folder] = base + stack[:i]

INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# a function definition: its name at the start of a line (the return type on
# the line above, as every C file here writes it), then its parameters
DEF_RE = re.compile(r'^([A-Za-z_]\w*)\(', re.M)
COMMENT_RE = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"', re.S)


def _defined(text):
    """Names of the non-static functions text (a .c file) defines."""
    names = set()
    for m in DEF_RE.finditer(text):
        before = text[:m.start()].rstrip().rsplit("\n", 1)[-1]
        after = text[m.end():text.find("\n{", m.end()) + 2]
        if "static" in before.split() or ";" in after or not after.endswith("{"):
            continue
        if not m.group(1).startswith("__"):
            names.add(m.group(1))
    return names


def call_circles(folder):
    """The circles of calls between the .c files of one folder: lists of files."""
    files = sorted(n for n in os.listdir(os.path.join(ROOT, folder))
                   if n.endswith((".c", ".cu")))
    code, defs = {}, {}
    for name in files:
        with open(os.path.join(ROOT, folder, name), encoding="utf-8") as f:
            code[name] = COMMENT_RE.sub(" ", f.read())
        defs[name] = _defined(code[name])
    edges = {a: set() for a in files}
    for a in files:
        used = set(re.findall(r"\b([A-Za-z_]\w*)\s*\(", code[a]))
        for b in files:
            if a != b and used & defs[b]:
                edges[a].add(b)
    # Tarjan's strongly connected components
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
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
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in files:
        if v not in index:
            visit(v)
    return [[(a, sorted(edges[a] & set(c))) for a in c] for c in out]


def main():
    headers = {}    # bare name -> folder that holds it
    problems = []
    for folder in BELOW:
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            if name.endswith((".h", ".cuh")):
                if name in headers:
                    problems.append("%s/%s: header name also in %s/ (bare includes "
                                    "need unique names)" % (folder, name, headers[name]))
                headers[name] = folder
    for folder, below in BELOW.items():
        for name in sorted(os.listdir(os.path.join(ROOT, folder))):
            if not name.endswith((".c", ".h", ".cu", ".cuh")):
                continue
            path = os.path.join(folder, name)
            with open(os.path.join(ROOT, path), encoding="utf-8") as f:
                text = f.read()
            for m in INCLUDE_RE.finditer(text):
                inc = m.group(1)
                line = text.count("\n", 0, m.start()) + 1
                if "/" in inc:      # relative to a layer folder ("cpu/cpu_ops.h")
                    target = None
                    for base in [folder] + list(BELOW):
                        if os.path.exists(os.path.join(ROOT, base, inc)):
                            target = os.path.dirname(os.path.normpath(os.path.join(base, inc)))
                            break
                else:
                    target = headers.get(inc)
                if target is None:
                    problems.append("%s:%d: \"%s\" is in no layer folder" % (path, line, inc))
                elif target != folder and target not in below:
                    problems.append("%s:%d: includes %s/%s, which is not below %s/"
                                    % (path, line, target, inc, folder))
    for folder in BELOW:
        for circle in call_circles(folder):
            problems.append("%s/: a circle of calls: %s" % (folder, "; ".join(
                "%s calls %s" % (a, ", ".join(bs)) for a, bs in circle)))
    for p in problems:
        print("layers: " + p, file=sys.stderr)
    if problems:
        print("layers: %d problem(s) with docs/LAYOUT.md" % len(problems), file=sys.stderr)
        return 1
    print("layers: every include points down, no circle of calls (%d folders)" % len(BELOW))
    return 0


if __name__ == "__main__":
    sys.exit(main())
