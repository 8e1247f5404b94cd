#!/usr/bin/env bash
# Wheels for scripts/gpu_check.sh on a GPU machine that reaches no package index (the device machine: CPython
# 3.12 on x86-64 Linux, CUDA 13, with numpy, numba, numba-cuda, cuda-core, torch, transformers, tokenizers,
# jinja2, pyyaml, tqdm and pytest already installed; see /work/.library/device/KINDS.md). Run it here, where pip
# reaches an index; it downloads into .wheelhouse/ (git-ignored) what that image lacks and the check imports,
# pinned to the versions of this environment, and checks that the tree plus the wheels fit the 64 MiB the
# device tool carries. Then, on the device: run(command="bash scripts/gpu_check.sh", carry=[".wheelhouse"]).
#   usage: scripts/gpu_wheelhouse.sh [PYTHON_VERSION]    (default 3.12, the device image's)
#   The default model (a ~250 MB PyPI package) does not fit the carry limit: gpu_check.sh builds a
#   Gemma-3-270M-shaped model with random weights instead (tests/models/tiny_gguf.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PY_VERSION="${1:-3.12}"
WHEELHOUSE=.wheelhouse
CARRY_LIMIT_BYTES=$((64 * 1024 * 1024))
# gguf: the GGUF reader/writer (pure Python); platformdirs: the user dirs (pure Python);
# numba-cuda: a fallback, installed by gpu_check.sh only when the image's is missing or older than 0.29;
# numpy: the image's NumPy 2.5 dropped np.row_stack, which numba-cuda 0.30.4 overloads at its first kernel
# compile (seen on the H200 image, 2026-12-04: every CUDA test failed), so this environment's NumPy goes first
PACKAGES=(gguf platformdirs numba-cuda numpy)
# not installed here (no GPU), so pinned by hand: nccl4py, the `cuda` extra's NCCL bindings (--tp on GPUs); the
# image has its dependencies (cuda-core, cuda-pathfinder, nvidia-nccl-cu13)
PINNED=(nccl4py==0.6.0)

version_here() {
  python -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"
}

rm -rf "$WHEELHOUSE"
mkdir -p "$WHEELHOUSE"
platforms=()
for tag in manylinux_2_34 manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
  platforms+=(--platform "${tag}_x86_64")
done
for package in "${PACKAGES[@]}"; do
  pin="$package==$(version_here "$package")"
  python -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" --implementation cp \
    --abi "cp${PY_VERSION/./}" --abi abi3 --abi none "${platforms[@]}" --platform any -d "$WHEELHOUSE" "$pin"
  echo "downloaded $pin"
done

for pin in "${PINNED[@]}"; do
  python -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" --implementation cp \
    --abi "cp${PY_VERSION/./}" --abi abi3 --abi none "${platforms[@]}" --platform any -d "$WHEELHOUSE" "$pin"
  echo "downloaded $pin"
done

wheel_bytes=$(du -cb "$WHEELHOUSE"/*.whl | tail -1 | cut -f1)
tree_bytes=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -cb 2>/dev/null \
  | awk '$2 == "total" {sum += $1} END {print sum}')
total=$((wheel_bytes + tree_bytes))
printf 'wheels %.1f MiB + tree %.1f MiB = %.1f MiB of the %d MiB carry limit\n' \
  "$(echo "$wheel_bytes / 1048576" | bc -l)" "$(echo "$tree_bytes / 1048576" | bc -l)" \
  "$(echo "$total / 1048576" | bc -l)" $((CARRY_LIMIT_BYTES / 1048576))
if [ "$total" -gt "$CARRY_LIMIT_BYTES" ]; then
  echo "too large to carry: remove untracked files or wheels" >&2
  exit 1
fi
