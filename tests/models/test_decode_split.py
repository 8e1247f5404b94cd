"""split_decodes: which tokens of a batch the fused decode layer takes, and the metadata of the rest."""
import numpy as np

from pocketcli.models.attn_metadata import AttnMetadata
from pocketcli.models.decode_split import split_decodes


def _attn(num_queries, context_lens, slots):
    starts = np.concatenate([[0], np.cumsum(num_queries)]).astype(np.int32)
    tables = np.arange(len(num_queries) * 3, dtype=np.int32).reshape(len(num_queries), 3)
    return AttnMetadata(slot_mapping=np.asarray(slots, dtype=np.int64), block_tables=tables,
                        context_lens=np.asarray(context_lens, dtype=np.int32), query_start_loc=starts)


def test_decodes_and_a_prompt_chunk_are_split_with_the_rest_renumbered():
    # seq 0 decodes at position 9, seq 1 is a 3-token prompt chunk, seq 2 decodes at position 4
    positions = np.array([9, 0, 1, 2, 4], dtype=np.int64)
    split = split_decodes(positions, _attn([1, 3, 1], [10, 3, 5], [19, 20, 21, 22, 34]), max_decodes=8)
    np.testing.assert_array_equal(split.decode_tokens, [0, 4])
    np.testing.assert_array_equal(split.positions, [9, 4])
    np.testing.assert_array_equal(split.slots, [19, 34])
    np.testing.assert_array_equal(split.block_tables, [[0, 1, 2], [6, 7, 8]])
    np.testing.assert_array_equal(split.rest_tokens, [1, 2, 3])
    np.testing.assert_array_equal(split.rest_positions, [0, 1, 2])
    np.testing.assert_array_equal(split.rest_attn.query_start_loc, [0, 3])
    np.testing.assert_array_equal(split.rest_attn.context_lens, [3])
    np.testing.assert_array_equal(split.rest_attn.block_tables, [[3, 4, 5]])


def test_one_token_that_is_not_its_sequences_last_or_has_no_slot_is_not_a_decode():
    positions = np.array([3, 7], dtype=np.int64)
    # seq 0: one query at position 3 of a 6-token context (the fused layer would attend over 4 keys only);
    # seq 1: no cache slot
    assert split_decodes(positions, _attn([1, 1], [6, 8], [3, -1]), max_decodes=8) is None


def test_at_most_max_decodes_take_the_fused_layer():
    positions = np.array([5, 6, 7], dtype=np.int64)
    split = split_decodes(positions, _attn([1, 1, 1], [6, 7, 8], [5, 6, 7]), max_decodes=2)
    np.testing.assert_array_equal(split.decode_tokens, [0, 1])
    np.testing.assert_array_equal(split.rest_tokens, [2])
