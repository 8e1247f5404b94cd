"""The generic tier (x86 without F16C) gets LLVM's f16 conversion functions: a kernel reading f16 scales compiles
and runs there instead of aborting (LLVM ERROR: Symbol not found: __extendhfsf2)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernels_numba.cpu.ir.half_symbols import needs_half_conversions

ROOT = Path(__file__).resolve().parents[2]

F16_PROBE = """
import warnings
warnings.simplefilter("ignore")
import numpy as np
from gguf import GGMLQuantizationType as QT
from kernels_numba.cpu.matvec import dispatch, quant_type
from kernels_numba.cpu.dequant import readonly_bytes
from kernels_numba.reference import dequantize
from tests.kernels.kernel_test_data import random_weight

w = random_weight(QT.Q8_0, (8, 64), np.random.default_rng(0))  # an f16 scale per block of 32
x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
out = np.empty((1, 8), np.float32)
with dispatch.forced_path("fused"):
    dispatch.linear_rows_into(quant_type.Q8_0, readonly_bytes(w), x, out)
np.testing.assert_allclose(out, x @ dequantize(w).T, rtol=1e-4, atol=1e-4)
print("ok")
"""


def test_only_x86_without_f16c_needs_them():
    assert needs_half_conversions(frozenset({"sse2"}), "x86_64")
    assert not needs_half_conversions(frozenset({"sse2", "f16c"}), "x86_64")
    assert not needs_half_conversions(frozenset(), "aarch64")


@pytest.mark.skipif(not needs_half_conversions(frozenset(), os.uname().machine), reason="not an x86 machine")
def test_f16_scales_compile_and_run_at_the_generic_tier(tmp_path):
    env = {key: value for key, value in os.environ.items()
           if key not in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "POCKET_CPU_TIER")}
    env.update(POCKET_CPU_TIER="generic", NUMBA_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", F16_PROBE], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
