"""Which ggml types the numba kernels handle, as small integer codes that numba can branch on."""
from gguf_loader.weight_tensor import WeightTensor
from kernels_numba.errors import UnsupportedQuantType

# the ggml types' codes are shared with the CUDA kernels (kernels_numba/quant_codes.py)
from kernels_numba.quant_codes import (BF16, F16, F32, IQ2_XXS, IQ3_XXS, IQ4_NL, IQ4_XS, Q2_K,  # noqa: F401
                                       Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0, TYPE_CODES)

# CPU-only regroupings of GGUF types for the run dots (run_layout.py); never a file's type
R_Q5_0, R_Q4_0, R_Q4_K, R_Q6_K, R_Q8_0, R_Q4_1 = range(17, 23)

SUPPORTED_TYPES = frozenset(TYPE_CODES)  # what a model loader can check its tensors against before loading
# types whose dot product needs sums of runs of x (they carry a minimum per run): values per run
VALUES_PER_X_SUM = {Q4_1: 32, Q5_1: 32, Q4_K: 32, Q5_K: 32, Q2_K: 16}
# types the fused dot decodes into a float32 scratch row first
CODES_DECODED_TO_SCRATCH = frozenset({F32, F16, BF16})


def type_code_of(w: WeightTensor) -> int:
    """The kernel code of `w`'s type; raises UnsupportedQuantType naming the type and tensor."""
    code = TYPE_CODES.get(w.ggml_type)
    if code is None:
        raise UnsupportedQuantType(w.type_name, w.name, "cpu")
    return code
