"""The ggml types the numba kernels decode, as small integer codes that numba can branch on: one numbering for
every backend (the CPU's and the CUDA kernels' decoders switch on the same codes)."""
from gguf import GGMLQuantizationType as QT

F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K = range(11)
Q2_K, Q3_K, IQ4_NL, IQ4_XS, IQ2_XXS, IQ3_XXS = range(11, 17)
NUM_GGML_CODES = 17  # codes from here on are a backend's own (the CPU's run layouts, the CUDA FP8 code)

TYPE_CODES = {
    QT.F32: F32, QT.F16: F16, QT.BF16: BF16, QT.Q4_0: Q4_0, QT.Q4_1: Q4_1, QT.Q5_0: Q5_0, QT.Q5_1: Q5_1,
    QT.Q8_0: Q8_0, QT.Q4_K: Q4_K, QT.Q5_K: Q5_K, QT.Q6_K: Q6_K, QT.Q2_K: Q2_K, QT.Q3_K: Q3_K,
    QT.IQ4_NL: IQ4_NL, QT.IQ4_XS: IQ4_XS, QT.IQ2_XXS: IQ2_XXS, QT.IQ3_XXS: IQ3_XXS,
}
