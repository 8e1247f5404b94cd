"""Greedy and top-k sampling next to device logits: the host Sampler's tokens, without copying the logits."""
from types import SimpleNamespace

import numpy as np
import pytest

from kernels_numba import get_ops
from pocketcli.engine.device_sampler import DeviceSampler
from pocketcli.engine.sampler import Sampler
from pocketcli.sampling_params import SamplingParams

cuda_ops = get_ops("cuda")
VOCAB = 100


def item(seq_id, **params):
    seq = SimpleNamespace(seq_id=seq_id, params=SamplingParams(seed=seq_id, **params), constraint=None,
                          token_ids=[1, 2, 3], num_prompt_tokens=3)
    return SimpleNamespace(seq=seq)


@pytest.fixture
def copied_sizes():
    """cuda ops whose to_host records how many values each copy to the host carries."""
    sizes = []
    real = cuda_ops.to_host
    spy = SimpleNamespace(**{name: getattr(cuda_ops, name) for name in ("top_k_on_device", "MAX_TOP_K")},
                          to_host=lambda a: (sizes.append(a.size), real(a))[1])
    return spy, sizes


def test_greedy_and_top_k_draws_equal_the_host_sampler(copied_sizes):
    spy_ops, sizes = copied_sizes
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((3, VOCAB)).astype(np.float32) * 3
    logits[0, 7] = logits[0, 9] = logits[0].max() + 1  # greedy tie: the first index, as np.argmax
    items = [item(1, temperature=0.0), item(2, temperature=0.8, top_k=5, top_p=0.9),
             item(3, temperature=1.3, top_k=6, min_p=0.05)]
    device_logits = cuda_ops.to_device(logits)
    device, host = DeviceSampler(spy_ops, Sampler()), Sampler()
    assert device.can_sample(items)
    for _ in range(2):  # the same generator draws: the same tokens every time
        expected = [host.sample(row, it.seq.params, it.seq.seq_id, it.seq.token_ids, 3) for row, it in
                    zip(logits, items)]
        assert device.sample(device_logits, items) == expected
    assert expected[0] == 7 and max(sizes) == 3 * 7  # rows x (largest k + 1): never a logits row


def test_a_tie_at_the_kth_place_takes_the_host_path(copied_sizes):
    spy_ops, sizes = copied_sizes
    logits = np.linspace(0.0, 1.0, VOCAB, dtype=np.float32)[None].copy()
    logits[0, 10], logits[0, [20, 30]] = 6.0, 5.0  # tied 2nd and 3rd: top-2 keeps three tokens on the host
    it = item(4, temperature=1.0, top_k=2, top_p=1.0)
    device, host = DeviceSampler(spy_ops, Sampler()), Sampler()
    draws = [device.sample(cuda_ops.to_device(logits), [it])[0] for _ in range(3)]
    assert draws == [host.sample(logits[0], it.seq.params, 4, [1, 2, 3], 3) for _ in range(3)]
    assert VOCAB in sizes  # the tied row came to the host


@pytest.mark.parametrize("params", [dict(temperature=0.8, top_k=0), dict(temperature=0.0, repeat_penalty=1.2),
                                    dict(temperature=0.8, top_k=5, logprobs=2), dict(temperature=0.8, top_k=256)])
def test_rows_that_need_the_whole_vocabulary_are_refused(params):
    assert not DeviceSampler(cuda_ops, Sampler()).can_sample([item(5, **params)])
