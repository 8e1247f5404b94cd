"""The sampling keys are written out in gguf_loader/sampling_keys.py (so that `pocket --help` need not import
gguf-py); they must be gguf-py's own."""
from gguf import Keys

from gguf_loader.sampling_keys import SAMPLING_KEYS


def test_keys_are_gguf_pys():
    general = Keys.General
    assert {field: key for field, (key, _) in SAMPLING_KEYS.items()} == {
        "temperature": general.SAMPLING_TEMP, "top_k": general.SAMPLING_TOP_K, "top_p": general.SAMPLING_TOP_P,
        "min_p": general.SAMPLING_MIN_P, "repeat_penalty": general.SAMPLING_PENALTY_REPEAT,
        "repeat_last_n": general.SAMPLING_PENALTY_LAST_N}
