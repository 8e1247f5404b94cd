"""PocketLLM: a local LLM engine and CLI."""
import os

# numba's thread pool does the parallel work; a second, multi-threaded OpenBLAS pool fights it for the same
# cores (measured on 2 cores: pp512 141 tok/s with OpenBLAS on 2 threads, 212 with 1). Only effective when set
# before numpy loads OpenBLAS, as it is for the `pocket` command; an explicit setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
