"""LLVM IR helpers (numba intrinsics): SIMD vectors, 8-bit activation quantization, prefetch, AMX tiles, fast exp."""
