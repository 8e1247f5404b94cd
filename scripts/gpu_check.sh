#!/usr/bin/env bash
# The CUDA backend on a real NVIDIA GPU, in one run (< 8 min): device tests, greedy parity CPU vs CUDA on the
# default model (5 prompts x 64 tokens), and tg128 / pp512 benchmarks of the default model and of a synthetic
# Llama-3-8B-shaped Q4_K_M model (random weights, written here), with achieved GB/s against the device's peak.
#   usage: scripts/gpu_check.sh [WORKDIR]    (WORKDIR holds the synthetic model; default /tmp/pocket_gpu_check)
set -uo pipefail
cd "$(dirname "$0")/.."
WORKDIR="${1:-/tmp/pocket_gpu_check}"
mkdir -p "$WORKDIR"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
status=0

echo "== 1. environment"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "nvidia-smi: not found"
python -c "import numba_cuda" 2>/dev/null || pip install -q -e '.[cuda]' \
  || pip install -q 'numba-cuda[cu13]' cuda-python || echo "cannot install the cuda extra (offline?)"
python -c "from numba import cuda; print('numba-cuda sees a GPU:', cuda.is_available()); cuda.detect()" || status=1

echo "== 2. CUDA kernel tests on the device (the simulator's tests, run for real)"
POCKET_CUDA_DEVICE_TESTS=1 timeout 240 python -m pytest -q -x tests/cuda/sim -p no:cacheprovider || status=1
timeout 120 python -m pytest -q -x tests/cuda/test_cuda_ptx.py -p no:cacheprovider -k sm_90 || status=1

echo "== 3. greedy parity and benchmarks"
timeout 330 python - "$WORKDIR" <<'PY' || status=1
import sys, time
from pathlib import Path

import numpy as np
import gguf
from numba import cuda

from kernels_numba.cuda.decode_graph import CapturedStep
from kernels_numba.cuda.sampler import top_k_on_device
from pocketcli.config import EngineConfig
from pocketcli.engine.llm_engine import LLMEngine
from pocketcli.models.attn_metadata import AttnMetadata
from pocketcli.registry import resolve_model
from pocketcli.sampling_params import SamplingParams

workdir = Path(sys.argv[1])
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
    return 2.0 * gpu.MEMORY_CLOCK_RATE * 1e3 * gpu.GLOBAL_MEMORY_BUS_WIDTH / 8  # bytes/s (DDR)


def bench(engine, label, n_prompt=512, n_gen=128):
    vocab = engine.hparams.vocab_size
    rng = np.random.default_rng(0)
    prompt = [1] + rng.integers(3, vocab, n_prompt - 1).tolist()
    engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=1))
    cuda.synchronize(); t = time.perf_counter()
    while engine.has_unfinished():
        engine.step()
    cuda.synchronize(); pp = n_prompt / (time.perf_counter() - t)
    # tg: eager engine steps (host sampler), then the captured decode step (device argmax, graph replay)
    seq = engine.add_request([1, 100, 200, 300], SamplingParams(temperature=0.0, max_tokens=n_gen + 2))
    engine.step(); engine.step()
    t = time.perf_counter(); count = 0
    while engine.has_unfinished() and count < 32:
        engine.step(); count += 1
    cuda.synchronize(); tg_eager = count / (time.perf_counter() - t)
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
    host_s = 0.0
    cuda.synchronize(); t = time.perf_counter()
    for pos in range(n_gen):
        h = time.perf_counter()
        out = captured.replay(inputs_at(pos))
        token = int(out.copy_to_host()[0, 0])
        host_s += time.perf_counter() - h
    tg = n_gen / (time.perf_counter() - t)
    model.keep_on_device = False
    nbytes = model.ops.uploaded_bytes()
    peak = peak_bandwidth()
    print(f"{label}: pp{n_prompt} {pp:8.1f} tok/s | tg{n_gen} eager {tg_eager:7.1f} tok/s | "
          f"tg{n_gen} {'graph' if graphed else 'eager-replay'} {tg:7.1f} tok/s = {tg * nbytes / 1e9:7.1f} GB/s "
          f"({100 * tg * nbytes / peak:4.1f}% of {peak / 1e9:.0f} GB/s peak; weights {nbytes / 1e9:.2f} GB)")


def write_llama3_8b_q4_k_m(path: Path) -> Path:
    """Llama-3-8B shapes, random Q4_K weights (Q6_K output and attn_v / ffn_down like Q4_K_M), sane scales."""
    if path.exists():
        return path
    D, F, L, H, KV, V = 4096, 14336, 32, 32, 8, 128256
    rng = np.random.default_rng(0)
    QT = gguf.GGMLQuantizationType
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("synthetic-llama3-8b"); w.add_context_length(8192); w.add_embedding_length(D)
    w.add_block_count(L); w.add_feed_forward_length(F); w.add_head_count(H); w.add_head_count_kv(KV)
    w.add_layer_norm_rms_eps(1e-5); w.add_rope_freq_base(500000.0); w.add_rope_dimension_count(128)
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
        w.add_tensor(name, raw.reshape(rows, -1), raw_shape=(rows, cols), raw_dtype=qt)

    quant("token_embd.weight", V, D, QT.Q4_K)
    w.add_tensor("output_norm.weight", np.ones(D, np.float32))
    quant("output.weight", V, D, QT.Q6_K)
    for i in range(L):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(D, np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(D, np.float32))
        quant(p + "attn_q.weight", D, D, QT.Q4_K); quant(p + "attn_k.weight", KV * 128, D, QT.Q4_K)
        quant(p + "attn_v.weight", KV * 128, D, QT.Q6_K); quant(p + "attn_output.weight", D, D, QT.Q4_K)
        quant(p + "ffn_gate.weight", F, D, QT.Q4_K); quant(p + "ffn_up.weight", F, D, QT.Q4_K)
        quant(p + "ffn_down.weight", D, F, QT.Q6_K if i % 2 == 0 else QT.Q4_K)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    return path


default_model = resolve_model(None)
cpu = LLMEngine(EngineConfig(default_model, ctx_size=512, backend="cpu"))
gpu = LLMEngine(EngineConfig(default_model, ctx_size=1024, backend="cuda"))
mismatches = 0
for prompt in PROMPTS:
    ids = cpu.tokenizer.encode(prompt)
    a, b = greedy(cpu, ids, 64), greedy(gpu, ids, 64)
    same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    mismatches += same is not None
    print(f"parity {'OK ' if same is None else f'DIFF at step {same}'} {prompt!r}")
print(f"greedy parity: {len(PROMPTS) - mismatches}/{len(PROMPTS)} prompts identical for 64 steps")
bench(gpu, "gemma-3-270m Q4_K_M")
del gpu, cpu
t = time.perf_counter()
path = write_llama3_8b_q4_k_m(workdir / "synthetic-llama3-8b-q4_k_m.gguf")
print(f"synthetic 8B written in {time.perf_counter() - t:.0f} s")
bench(LLMEngine(EngineConfig(str(path), ctx_size=1024, backend="cuda")), "llama3-8b-shaped Q4_K_M")
sys.exit(1 if mismatches else 0)
PY
echo "== 4. kernel resources (ptxas -v)"
timeout 120 python scripts/ptx_report.py --arch sm_90 || true
exit $status
