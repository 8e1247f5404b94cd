"""TokenIndex answers as dict(zip(texts, ids)) would, without a Python object per token."""
import os
import pickle
import random
import subprocess
import sys

import numpy as np
import pytest

from pocketcli.tokenizer.token_index import TokenIndex, drop_repeated_texts, place_sorted_ids, table_size
from pocketcli.tokenizer.token_texts import TokenTexts


def random_texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    alphabet = "ab▁ü日<>"
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4))) for _ in range(count)]


@pytest.mark.parametrize("count", [1, 7, 300, 5000])
def test_matches_a_dict_including_duplicates_and_misses(count):
    texts = random_texts(count, seed=count)  # short texts over 7 characters: many duplicates
    index, expected = TokenIndex(texts), dict(zip(texts, range(len(texts))))  # the last id of a text wins
    assert len(index) == len(expected)
    assert all(index[text] == token_id for text, token_id in expected.items())
    probes = random_texts(2000, seed=-count) + ["", "not a token", "ab▁ü日<>ab"]
    assert [index.get(p) for p in probes] == [expected.get(p) for p in probes]
    assert [p in index for p in probes] == [p in expected for p in probes]
    assert list(index) == sorted(expected, key=expected.get)
    assert dict(index.items()) == expected
    with pytest.raises(KeyError):
        index["not a token"]


def test_empty_texts_are_named_by_id():
    texts = TokenTexts(["a", "", "b", ""])
    assert list(texts) == ["a", "[EMPTY_1]", "b", "[EMPTY_3]"] and texts[-1] == "[EMPTY_3]"
    index = TokenIndex(texts)
    assert index["[EMPTY_3]"] == 3 and index.get("") is None
    assert texts == TokenTexts(["a", "", "b", ""]) and texts == list(texts)
    assert texts != TokenTexts(["a", "", "b", "c"]) and texts != ["a", "", "b", ""]


def test_survives_pickling_into_another_hash_seed():
    """hash(str) differs between processes: an unpickled index is rebuilt, not copied with stale hashes."""
    texts = random_texts(200, seed=1)
    check = ("import pickle, sys; index = pickle.loads(sys.stdin.buffer.read()); "
             f"assert dict(index.items()) == dict(zip({texts!r}, range({len(texts)})))")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    done = subprocess.run([sys.executable, "-c", check], input=pickle.dumps(TokenIndex(texts)), env=env,
                          capture_output=True)
    assert done.returncode == 0, done.stderr.decode()


def test_real_str_hash_collisions_stay_apart():
    """CPython hashes a str's code units: "er" (0x65 0x72) and "牥" (U+7265) share a hash in every process."""
    assert hash("er") == hash("牥") and hash("\n\n") == hash("ਊ")
    texts = ["er", "牥", "x", "er", "ਊ", "\n\n"]
    index = TokenIndex(texts)
    assert dict(index.items()) == {"牥": 1, "x": 2, "er": 3, "ਊ": 4, "\n\n": 5}
    assert [index.get(t) for t in ("er", "牥", "ਊ", "\n\n", "r")] == [3, 1, 4, 5, None]


def test_equal_hashes_keep_distinct_texts_and_drop_repeats():
    texts = ["x", "y", "x", "z", "y", "w"]
    hashes = np.array([5, 5, 5, 7, 5, 6], dtype=np.int64)  # one hash for x and y: a collision, not a repeat
    keys = np.array([1, 1, 1, 2, 1, 1], dtype=np.int64)  # w shares the key, not the hash
    order = np.argsort(keys, kind="stable")
    assert sorted(drop_repeated_texts(order, keys[order], hashes, texts).tolist()) == [2, 3, 4, 5]
    assert drop_repeated_texts(order, np.arange(6), hashes, texts) is order  # distinct keys: nothing to compare


def test_linear_probing_places_every_id_after_its_home_slot():
    rng = np.random.default_rng(0)
    num_home_slots = table_size(1000)
    home = rng.integers(0, num_home_slots // 16, size=1000)  # crowded into a sixteenth: long runs
    order = np.argsort(home, kind="stable")
    table = place_sorted_ids(home[order], order, num_home_slots)
    assert table[-1] == -1 and len(table) >= num_home_slots
    slot_of = {int(token_id): slot for slot, token_id in enumerate(table) if token_id >= 0}
    assert sorted(slot_of) == list(range(1000))
    for token_id, slot in slot_of.items():  # nothing empty between an id's home slot and its slot
        assert slot >= home[token_id] and np.all(table[home[token_id]:slot] >= 0)
