"""Compile options shared by the numba kernels."""

# Reassociation lets LLVM split a float sum into SIMD lanes (the vectorised form of `acc[lane] += w * x`),
# contraction lets it use FMA. No nnan/ninf: infinities and NaNs in activations must still propagate.
SUM_FASTMATH = {"reassoc", "contract", "nsz"}
