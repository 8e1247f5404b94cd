"""Per-token attributes (llama.cpp's llama_token_attr) and their mapping from GGUF token types."""
import enum

import numpy as np


class TokenAttr(enum.IntFlag):
    UNDEFINED = 0
    UNKNOWN = 1 << 0
    UNUSED = 1 << 1
    NORMAL = 1 << 2
    CONTROL = 1 << 3
    USER_DEFINED = 1 << 4
    BYTE = 1 << 5


# GGUF tokenizer.ggml.token_type values: 1 normal, 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte
_ATTR_OF_TOKEN_TYPE = np.array([TokenAttr.UNDEFINED, TokenAttr.NORMAL, TokenAttr.UNKNOWN, TokenAttr.CONTROL,
                                TokenAttr.USER_DEFINED, TokenAttr.UNUSED, TokenAttr.BYTE], dtype=np.int32)

# tokens split out of raw text before the model runs (llama.cpp's special-token cache)
SPECIAL_ATTRS = TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN
# tokens that render as empty text unless special rendering is asked for
HIDDEN_ATTRS = TokenAttr.CONTROL | TokenAttr.UNKNOWN


def attrs_from_token_types(token_types, num_tokens: int) -> np.ndarray:
    """int32 attribute flags per token; tokens without a (known) type are NORMAL / UNDEFINED like llama.cpp."""
    if token_types is None:
        return np.full(num_tokens, int(TokenAttr.NORMAL), dtype=np.int32)
    types = np.asarray(token_types, dtype=np.int64)[:num_tokens]
    known = (types >= 0) & (types < len(_ATTR_OF_TOKEN_TYPE))
    return np.where(known, _ATTR_OF_TOKEN_TYPE[np.clip(types, 0, len(_ATTR_OF_TOKEN_TYPE) - 1)], 0).astype(np.int32)
