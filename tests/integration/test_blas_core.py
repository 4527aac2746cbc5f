"""test_blas_core.py — the engine runs OpenBLAS on kernels that fit the CPU.

Debian's OpenBLAS falls back to its SSE3 "Prescott" kernels on CPU models it
does not know (measured 4.5x slower prefill on an AVX-512 Xeon); the engine
then names the core itself from the CPU's features (kernels/pic_kernels.c,
pic_kernels_process_env).  The oracle for what the CPU can do is the flags
line of /proc/cpuinfo, read here independently of the engine's cpuid code.
"""
import json
import os
import subprocess

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("PIC_BUILD", "build")
ENGINE = os.path.join(ROOT, BUILD, "pic-engine") if not os.path.isabs(BUILD) \
    else os.path.join(BUILD, "pic-engine")

# OpenBLAS cores without AVX2 kernels (what its detection falls back to)
LEGACY = {"prescott", "katmai", "coppermine", "northwood", "core2", "penryn", "dunnington",
          "nehalem", "atom", "sandybridge", "unknown", "generic", "barcelona", "bobcat",
          "bulldozer", "piledriver", "steamroller", "excavator", "opteron", "athlon"}


def _cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def _sysinfo(**env):
    e = dict(os.environ)
    e.pop("OPENBLAS_CORETYPE", None)
    e.update(env)
    out = subprocess.run([ENGINE, "sysinfo", "--quick", "--threads", "1"], env=e,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return json.loads(out)


def test_blas_core_has_the_cpus_vector_units():
    flags = _cpu_flags()
    if not {"avx2", "fma"} <= flags:
        pytest.skip("CPU without AVX2+FMA: OpenBLAS's own choice stands")
    core = _sysinfo()["blas_core"]
    assert core.lower() not in LEGACY, core
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"} <= flags:
        # an AVX-512 CPU gets AVX-512 kernels (OpenBLAS names them per family)
        assert core.lower() in {"skylakex", "cooperlake", "sapphirerapids"}, core


@pytest.mark.parametrize("core", ["Haswell", "Prescott"])
def test_user_coretype_is_respected(core):
    assert _sysinfo(OPENBLAS_CORETYPE=core)["blas_core"].lower() == core.lower()
