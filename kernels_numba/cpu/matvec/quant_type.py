"""Which ggml types the numba kernels handle, as small integer codes that numba can branch on."""
from gguf import GGMLQuantizationType as QT

from gguf_loader.weight_tensor import WeightTensor
from kernels_numba.errors import UnsupportedQuantType

F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K = range(11)
Q2_K, Q3_K, IQ4_NL, IQ4_XS, IQ2_XXS, IQ3_XXS = range(11, 17)
# CPU-only regroupings of GGUF types for the run dots (run_layout.py); never a file's type
R_Q5_0, R_Q4_0, R_Q4_K, R_Q6_K, R_Q8_0, R_Q4_1 = range(17, 23)

TYPE_CODES = {
    QT.F32: F32, QT.F16: F16, QT.BF16: BF16, QT.Q4_0: Q4_0, QT.Q4_1: Q4_1, QT.Q5_0: Q5_0, QT.Q5_1: Q5_1,
    QT.Q8_0: Q8_0, QT.Q4_K: Q4_K, QT.Q5_K: Q5_K, QT.Q6_K: Q6_K, QT.Q2_K: Q2_K, QT.Q3_K: Q3_K,
    QT.IQ4_NL: IQ4_NL, QT.IQ4_XS: IQ4_XS, QT.IQ2_XXS: IQ2_XXS, QT.IQ3_XXS: IQ3_XXS,
}
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
