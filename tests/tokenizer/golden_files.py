"""Where the tokenizer corpus and llama.cpp goldens live, and how to read them."""
import gzip
import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tokenizer"
SETTINGS = {"TT": (True, True), "TF": (True, False), "FT": (False, True)}  # (add_special, parse_special)


def load_corpus() -> list[str]:
    return json.loads((FIXTURES / "corpus.json").read_text("utf-8"))


def load_golden(name: str) -> dict:
    with gzip.open(FIXTURES / f"golden_{name}.json.gz", "rt", encoding="utf-8") as f:
        return json.load(f)
