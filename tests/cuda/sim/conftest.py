"""The CUDA kernel tests: under numba's simulator when NUMBA_ENABLE_CUDASIM=1 (set before numba loads), on a real
GPU when POCKET_CUDA_DEVICE_TESTS=1 (scripts/gpu_check.sh); not collected otherwise.

Run as its own invocation: NUMBA_ENABLE_CUDASIM=1 python -m pytest -q tests/cuda/sim
"""
import os
import sys

ON_SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"

if not ON_SIMULATOR and os.environ.get("POCKET_CUDA_DEVICE_TESTS") != "1":
    collect_ignore_glob = ["test_*.py"]
if ON_SIMULATOR:
    # every simulated CUDA thread is a Python thread; waking them at barriers waits on the GIL switch interval
    sys.setswitchinterval(1e-4)
    # ...and they hand the GIL to each other thousands of times a launch: on one core a hand-off is a plain
    # context switch, while a thread woken on the other, idle core waits for that (virtual) CPU to wake up: the
    # stage took 8.5 min in CI on a quiet machine, 2 min on a busy one. The GIL keeps them on one core's worth
    # of work anyway; threads started later inherit the affinity.
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
