"""test_pic_dp.py — checkpoint placement (engine/pic/checkpoint_dp.h) through
`pic-lab dp`: the engine's DP placement against a Python brute force
over every subset, the live policy (balanced before enough history, the DP
after), and the fixed placements the checkpoints benchmark compares.
"""
import itertools
import json
import os
import random
import subprocess

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("PIC_BUILD", "build")
PIC_LAB = os.path.join(ROOT, BUILD, "pic-lab")  # bench/pic_lab.c


def dp(spec):
    p = subprocess.run([PIC_LAB, "dp"], input=json.dumps(spec), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["plans"]


def waste(depths, ck, n):
    total = 0
    for d in depths:
        d = min(d, n)
        total += d - max([c for c in ck if c <= d], default=0)
    return total


def test_dp_equals_brute_force():
    rnd = random.Random(5)
    block = 16
    for trial in range(25):
        B = rnd.randint(1, 9)
        n = B * block + rnd.randrange(block)
        m = rnd.randint(1, 3)
        depths = [rnd.randint(0, n + 40) for _ in range(rnd.randint(1, 25))]
        ops = [["observe", d] for d in depths] + [["solve", n]]
        got = dp({"block": block, "M": m, "decay": 1.0, "max_tokens": 4096, "ops": ops})[0]
        best = min(waste(depths, list(c), n)
                   for k in range(m + 1)
                   for c in itertools.combinations(range(block, B * block + 1, block), k))
        assert len(got) <= m
        assert all(c % block == 0 and 0 < c <= n for c in got)
        assert waste(depths, got, n) == best, (depths, got, best)


def test_policy_and_fixed_placements():
    ops = [["plan", 1000]] + [["observe", 700]] * 20 + [["plan", 1000],
           ["balanced", 1000], ["block", 3000], ["log", 4100]]
    plans = dp({"block": 64, "M": 2, "every": 10, "min_history": 20, "ops": ops})
    assert plans[0] == [512, 960]              # balanced: round(k·15/2) blocks
    assert plans[1] == [640, 960]              # all mass at 700: 640, then a balanced filler
    assert plans[2] == [512, 960]
    assert plans[3] == [1024, 2048]
    assert plans[4] == [2048, 4096]
