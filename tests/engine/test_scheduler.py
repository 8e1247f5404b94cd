from pocketcli.engine.block_manager import BlockManager
from pocketcli.engine.scheduler import Scheduler, SchedulerConfig
from pocketcli.engine.sequence import Sequence, SequenceStatus
from pocketcli.sampling_params import SamplingParams

EOS = 99


def make_scheduler(num_blocks=8, block_size=4, max_num_seqs=2, max_tokens_per_step=6, max_model_len=64):
    manager = BlockManager(num_blocks, block_size)
    config = SchedulerConfig(max_num_seqs, max_tokens_per_step, max_model_len)
    return Scheduler(config, manager, {EOS}), manager


def make_seq(num_tokens, max_tokens=4, block_size=4):
    return Sequence(list(range(1, num_tokens + 1)), SamplingParams(temperature=0, max_tokens=max_tokens), block_size)


def test_chunked_prefill_then_decode():
    scheduler, manager = make_scheduler(max_tokens_per_step=6)
    seq = make_seq(10)
    scheduler.add(seq)
    batch = scheduler.schedule()
    assert [i.num_new_tokens for i in batch.items] == [6] and not batch.items[0].samples_token
    assert scheduler.postprocess(batch, []) == []
    batch = scheduler.schedule()
    assert [i.num_new_tokens for i in batch.items] == [4] and batch.items[0].samples_token
    scheduler.postprocess(batch, [5])
    assert seq.token_ids[-1] == 5 and seq.num_cached_tokens == 10
    batch = scheduler.schedule()
    assert [i.num_new_tokens for i in batch.items] == [1]
    assert len(seq.block_table) == 3  # 11 tokens in blocks of 4


def test_eos_and_max_tokens_finish_and_free_blocks():
    scheduler, manager = make_scheduler()
    a, b = make_seq(3, max_tokens=1), make_seq(3, max_tokens=5)
    scheduler.add(a)
    scheduler.add(b)
    batch = scheduler.schedule()
    assert len(batch.items) == 2
    finished = scheduler.postprocess(batch, [7, EOS])
    assert {s.finish_reason for s in finished} == {"length", "stop"}
    assert manager.num_free_blocks == 8 and not scheduler.has_unfinished()


def test_max_num_seqs_limits_running():
    scheduler, _ = make_scheduler(max_num_seqs=1)
    for _ in range(2):
        scheduler.add(make_seq(2))
    batch = scheduler.schedule()
    assert len(batch.items) == 1 and len(scheduler.waiting) == 1


def test_context_full_finishes_with_length():
    scheduler, _ = make_scheduler(max_model_len=4)
    seq = make_seq(3, max_tokens=100)
    scheduler.add(seq)
    scheduler.postprocess(scheduler.schedule(), [7])
    assert seq.finish_reason == "length"


def test_preemption_when_blocks_run_out():
    scheduler, manager = make_scheduler(num_blocks=2, block_size=4, max_tokens_per_step=16)
    a, b = make_seq(4, max_tokens=10), make_seq(4, max_tokens=10)
    scheduler.add(a)
    scheduler.add(b)
    scheduler.postprocess(scheduler.schedule(), [7, 7])  # both now hold 5 tokens in 1 block each: need 2
    batch = scheduler.schedule()
    assert [i.seq for i in batch.items] == [a]  # b (newest) was preempted to make room
    assert b.status == SequenceStatus.WAITING and b.num_cached_tokens == 0 and b.block_table == []
