"""What the KV cache costs: bytes per token of each KV type, the context that fits in some memory, and the
load-time check that refuses a context the free RAM cannot hold (before anything is allocated)."""
from __future__ import annotations

from kernels_numba.host_arrays import free_memory_bytes as available_ram_bytes  # noqa: F401  (MemAvailable)
from kernels_numba.kv_type import KV_TYPES, KVType, kv_type_named


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, key_dim: int, value_dim: int | None,
                       kv_type: KVType) -> int:
    """Bytes one token's keys and values take in every layer (value_dim None: head_dim-wide values)."""
    value_dim = key_dim if value_dim is None else value_dim
    return num_layers * num_kv_heads * (kv_type.row_bytes(key_dim) + kv_type.row_bytes(value_dim))


def context_that_fits(memory_bytes: int, bytes_per_token: int) -> int:
    """Tokens of KV cache `memory_bytes` holds (0 when none)."""
    return max(0, memory_bytes // bytes_per_token) if bytes_per_token else 0


def kv_table(num_layers: int, num_kv_heads: int, key_dim: int, value_dim: int | None) -> dict[str, int]:
    """KV type name -> bytes per token, for every type the model's head widths allow."""
    value_dim = key_dim if value_dim is None else value_dim
    return {name: kv_bytes_per_token(num_layers, num_kv_heads, key_dim, value_dim, t) for name, t in KV_TYPES.items()
            if not t.is_blocked or (key_dim % 32 == 0 and value_dim % 32 == 0)}


def _size(num_bytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if num_bytes < 1024 or unit == "GiB":
            return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1024
    return ""


def check_kv_cache_fits(num_tokens: int, bytes_per_token: int, kv_type: str, free_bytes: int | None) -> None:
    """A ValueError (one line, the CLI's exit code 2) when num_tokens of KV cache need more than free_bytes."""
    needed = num_tokens * bytes_per_token
    if free_bytes is None or needed <= free_bytes:
        return
    fits = context_that_fits(free_bytes, bytes_per_token)
    smaller = [name for name in ("q8_0", "q4_0") if KV_TYPES[name].block_bytes < kv_type_named(kv_type).block_bytes]
    hint = f", or a smaller --kv-type ({' / '.join(smaller)})" if smaller else ""
    raise ValueError(f"the KV cache for {num_tokens} tokens needs {_size(needed)} ({kv_type}, "
                     f"{_size(bytes_per_token)} a token) but {_size(free_bytes)} of RAM is free: about "
                     f"{fits} tokens fit; lower --ctx-size (or --max-num-seqs){hint}")
