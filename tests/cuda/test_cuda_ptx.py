"""Every CUDA kernel compiles to PTX for sm_80, sm_86, sm_89 and sm_90 (no GPU needed; no simulator)."""
import os

import pytest

pytest.importorskip("numba_cuda")
if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
    pytest.skip("compile_ptx needs the real numba-cuda target, not the simulator", allow_module_level=True)

from kernels_numba.cuda.ptx import ARCHITECTURES, KERNEL_SIGNATURES, kernel_ptx  # noqa: E402


@pytest.mark.parametrize("cc", ARCHITECTURES, ids=lambda cc: "sm_%d%d" % cc)
@pytest.mark.parametrize("name", sorted(KERNEL_SIGNATURES))
def test_kernel_compiles_to_ptx(name, cc):
    ptx = kernel_ptx(name, cc)
    assert ".target sm_%d%d" % cc in ptx
    assert ".entry" in ptx  # a kernel, not only device functions
