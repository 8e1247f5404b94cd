"""GGUF-style tokenizer metadata from a tiktoken BPE file (base64 token, rank per line), the way llama.cpp's
convert_hf_to_gguf handles tiktoken vocabularies: ranks become token ids and the merges are recovered from
the ranks (each token splits into the two parts that BPE, limited to lower ranks, leaves of it)."""
import base64
from pathlib import Path

from .byte_encoding import BYTE_TO_UNICODE

TOKEN_TYPE_NORMAL, TOKEN_TYPE_CONTROL, TOKEN_TYPE_UNUSED = 1, 3, 5


def load_tiktoken_ranks(path: str | Path) -> dict[bytes, int]:
    ranks = {}
    for line in Path(path).read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def token_bytes_to_text(token: bytes) -> str:
    return "".join(BYTE_TO_UNICODE[b] for b in token)


def split_by_lower_ranks(ranks: dict[bytes, int], token: bytes, max_rank: int) -> list[bytes]:
    """BPE of `token` using only merges ranked below `max_rank`."""
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best_rank, best_index = None, -1
        for index in range(len(parts) - 1):
            rank = ranks.get(parts[index] + parts[index + 1])
            if rank is not None and (best_rank is None or rank < best_rank):
                best_rank, best_index = rank, index
        if best_rank is None or best_rank >= max_rank:
            break
        parts[best_index:best_index + 2] = [parts[best_index] + parts[best_index + 1]]
    return parts


def recover_merges(ranks: dict[bytes, int]) -> list[str]:
    """'left right' merges in rank order, in byte-level text form."""
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) == 1:
            continue
        parts = split_by_lower_ranks(ranks, token, rank)
        if len(parts) != 2:
            raise ValueError(f"tiktoken token {token!r} (rank {rank}) does not split into two lower-ranked parts")
        merges.append(" ".join(map(token_bytes_to_text, parts)))
    return merges


def make_tiktoken_metadata(ranks: dict[bytes, int], special_tokens: dict[str, int], pre: str,
                           num_tokens: int | None = None) -> dict:
    """tokenizer.ggml.* metadata: ranks and special tokens at their ids, gaps filled with unused [PAD<i>] tokens."""
    text_of_id = {rank: token_bytes_to_text(token) for token, rank in ranks.items()}
    num_tokens = max(num_tokens or 0, max(text_of_id) + 1, max(special_tokens.values()) + 1)
    special_of_id = {token_id: text for text, token_id in special_tokens.items()}
    tokens, token_types = [], []
    for token_id in range(num_tokens):
        if token_id in special_of_id:
            tokens.append(special_of_id[token_id])
            token_types.append(TOKEN_TYPE_CONTROL)
        elif token_id in text_of_id:
            tokens.append(text_of_id[token_id])
            token_types.append(TOKEN_TYPE_NORMAL)
        else:
            tokens.append(f"[PAD{token_id}]")
            token_types.append(TOKEN_TYPE_UNUSED)
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre, "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": token_types, "tokenizer.ggml.merges": recover_merges(ranks)}
