"""llama.cpp's perplexity with its own KV cache types on the same windows `pocket perplexity` scores (issue 26), so
the two engines' KV types compare on one text. Runs under the llama-cpp-python venv (bench/.llamacpp-venv):

    bench/.llamacpp-venv/bin/python bench/llamacpp_perplexity.py -m GGUF [-f TEXT] [--ctx-size 512]
        [--chunks 16] [--types f32 f16 q8_0 q4_0] [-t THREADS]

The windows are llama.cpp's tokens of the text (PocketLLM's ids equal them, tests/models/test_default_model.py),
BOS first, second half scored, as pocketcli/engine/perplexity.py does. Flash attention is on for every type (llama.cpp
needs it for a quantized V cache).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 8, "bf16": 30}


def main() -> int:
    import llama_cpp

    from pocketcli.engine.perplexity import PerplexityEstimate, make_windows, token_nll

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-m", "--model", required=True,
                        help="the GGUF file (that venv has no gguf package for the registry: pocket info shows the path)")
    parser.add_argument("-f", "--file", default=str(ROOT / "bench" / "texts" / "botchan.txt"))
    parser.add_argument("--ctx-size", type=int, default=512)
    parser.add_argument("--chunks", type=int, default=16)
    parser.add_argument("--types", nargs="+", default=["f32", "f16", "q8_0", "q4_0"], choices=sorted(GGML_TYPES))
    parser.add_argument("-t", "--threads", type=int, default=1)
    args = parser.parse_args()
    path = args.model
    vocab = llama_cpp.Llama(path, vocab_only=True, verbose=False)
    text = Path(args.file).read_text(encoding="utf-8").encode()
    windows = make_windows(vocab.tokenize(text, add_bos=False, special=False), args.ctx_size, vocab.token_bos(),
                           args.chunks)
    for kv_type in args.types:
        llm = llama_cpp.Llama(path, n_ctx=args.ctx_size, n_batch=args.ctx_size, n_ubatch=args.ctx_size,
                              logits_all=True, type_k=GGML_TYPES[kv_type], type_v=GGML_TYPES[kv_type],
                              flash_attn=True, n_threads=args.threads, verbose=False)
        estimate, started = PerplexityEstimate(), time.perf_counter()
        for window in windows:
            llm.reset()
            llm.eval(window)
            first = len(window) // 2
            logits = np.asarray(llm.scores[first:len(window) - 1], dtype=np.float32)
            estimate.add(token_nll(logits, np.asarray(window[first + 1:], dtype=np.int64)))
        print(json.dumps({"engine": "llama.cpp", "kv_type": kv_type, "windows": estimate.num_windows,
                          "scored_tokens": estimate.num_scored, "perplexity": round(estimate.perplexity, 6),
                          "uncertainty": round(estimate.uncertainty, 6),
                          "seconds": round(time.perf_counter() - started, 1)}), flush=True)
        del llm
    return 0


if __name__ == "__main__":
    sys.exit(main())
