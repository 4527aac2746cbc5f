#!/usr/bin/env python3
"""check_layers.py — every #include "..." in the product points down the layers.

The layers are the folders of docs/LAYOUT.md.  A file may include headers of
its own folder and of the folders listed as below it here; anything else (an
include that points up or sideways, a header name that two folders define, a
quoted include that resolves nowhere) is reported and the exit status is 1.
tests/ and bench/ sit on top of everything and are not checked.
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
    for p in problems:
        print("layers: " + p, file=sys.stderr)
    if problems:
        print("layers: %d include(s) break docs/LAYOUT.md" % len(problems), file=sys.stderr)
        return 1
    print("layers: every include points down (%d folders)" % len(BELOW))
    return 0


if __name__ == "__main__":
    sys.exit(main())
