"""`pocket tokenize`: token ids and pieces of a text under a model's tokenizer (no weights are run)."""
from __future__ import annotations

import argparse
import json

from .common import add_model_argument


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("tokenize", help="show the tokens of a text")
    add_model_argument(p)
    p.add_argument("text", help="text to tokenize")
    p.add_argument("--no-special", action="store_true", help="do not add BOS/EOS")
    p.add_argument("--no-parse-special", action="store_true", help="treat special-token text as plain text")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..model_source import make_tokenizer, open_model_file
    from ..registry import resolve_model

    tokenizer = make_tokenizer(open_model_file(resolve_model(args.model)))
    ids = tokenizer.encode(args.text, add_special=not args.no_special, parse_special=not args.no_parse_special)
    pieces = [tokenizer.token_to_piece(i, special=True).decode("utf-8", errors="backslashreplace") for i in ids]
    if args.json:
        print(json.dumps({"token_ids": ids, "pieces": pieces, "num_tokens": len(ids)}, ensure_ascii=False))
        return 0
    for token_id, piece in zip(ids, pieces):
        print(f"{token_id:>8} {piece!r}")
    print(f"{len(ids)} tokens")
    return 0
