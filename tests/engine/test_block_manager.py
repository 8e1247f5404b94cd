"""Automatic prefix caching: hash-chained full blocks, ref counts, LRU eviction of free cached blocks."""
from pocketcli.engine.block_manager import BlockManager
from pocketcli.engine.scheduler import Scheduler, SchedulerConfig
from pocketcli.engine.sequence import Sequence, SequenceStatus
from pocketcli.sampling_params import SamplingParams

BS = 4


def make_seq(token_ids, max_tokens=4):
    return Sequence(list(token_ids), SamplingParams(temperature=0, max_tokens=max_tokens), BS)


def compute(manager: BlockManager, seq: Sequence, cached=()):
    """Allocate the whole sequence and mark every token computed, as a prefill step would."""
    manager.allocate(seq, len(seq), list(cached))
    seq.num_cached_tokens = len(seq)
    manager.cache_full_blocks(seq)


def test_full_blocks_are_reused_by_an_equal_prefix():
    manager = BlockManager(8, BS)
    a = make_seq(range(10))  # blocks [0..3] [4..7] full, [8, 9] partial
    compute(manager, a)
    b = make_seq([*range(8), 50, 51, 52])
    cached = manager.cached_prefix(b)
    assert cached == a.block_table[:2]
    manager.allocate(b, len(b), cached)
    assert b.num_cached_tokens == 8 and b.block_table[:2] == a.block_table[:2]
    assert [manager.blocks[i].ref_count for i in a.block_table] == [2, 2, 1]
    assert manager.num_used_blocks == 4  # a: 3 blocks, b: one new block
    assert manager.num_prefix_hit_tokens == 8


def test_different_earlier_block_breaks_the_chain():
    manager = BlockManager(8, BS)
    compute(manager, make_seq([1, 2, 3, 4, 5, 6, 7, 8, 9]))
    # the second block is equal, but the first is not: the chained hash must not match
    assert manager.cached_prefix(make_seq([9, 9, 9, 9, 5, 6, 7, 8, 9])) == []


def test_last_token_is_always_recomputed():
    manager = BlockManager(8, BS)
    compute(manager, make_seq(range(8)))
    same = make_seq(range(8))  # fully cached prompt: the block with the last token is recomputed
    assert len(manager.cached_prefix(same)) == 1
    longer = make_seq(range(9))
    assert len(manager.cached_prefix(longer)) == 2


def test_freed_cached_blocks_stay_findable_and_count_as_free():
    manager = BlockManager(4, BS)
    a = make_seq(range(9))
    compute(manager, a)
    first_two = a.block_table[:2]
    manager.deallocate(a)
    assert manager.num_free_blocks == 4 and all(manager.blocks[i].ref_count == 0 for i in range(4))
    b = make_seq(range(9))
    cached = manager.cached_prefix(b)
    assert cached == first_two
    assert manager.blocks_needed(b, len(b), cached) == 3  # two hits taken off the free list, one fresh
    manager.allocate(b, len(b), cached)
    assert manager.num_free_blocks == 1 and b.num_cached_tokens == 8


def test_uncached_free_blocks_are_used_before_evicting_cached_ones():
    manager = BlockManager(4, BS)
    a = make_seq(range(8))
    compute(manager, a)
    a_blocks = list(a.block_table)
    manager.deallocate(a)
    b = make_seq([40, 41])  # needs one block: must not evict a's cached blocks
    manager.allocate(b, len(b))
    assert b.block_table[0] not in a_blocks
    assert manager.cached_prefix(make_seq(range(9))) == a_blocks


def test_eviction_is_least_recently_freed_first():
    manager = BlockManager(2, BS)
    old, new = make_seq(range(4)), make_seq(range(100, 104))
    compute(manager, old)
    compute(manager, new)
    manager.deallocate(old)
    manager.deallocate(new)
    taker = make_seq([7, 7])
    manager.allocate(taker, 2)
    assert manager.cached_prefix(make_seq(range(5))) == []  # old was evicted
    assert len(manager.cached_prefix(make_seq([*range(100, 104), 1]))) == 1


def test_evicted_block_is_not_found_after_reuse():
    manager = BlockManager(1, BS)
    a = make_seq(range(4))
    compute(manager, a)
    manager.deallocate(a)
    b = make_seq([9, 9, 9, 9])
    compute(manager, b)
    assert manager.cached_prefix(make_seq([0, 1, 2, 3, 4])) == []
    manager.deallocate(b)
    assert len(manager.cached_prefix(make_seq([9, 9, 9, 9, 1]))) == 1


def test_shared_block_survives_until_last_owner_frees_it():
    manager = BlockManager(4, BS)
    a = make_seq(range(5))
    compute(manager, a)
    b = make_seq(range(5))
    compute(manager, b, manager.cached_prefix(b))
    shared = a.block_table[0]
    manager.deallocate(a)
    assert manager.blocks[shared].ref_count == 1 and shared not in manager.free_block_ids
    manager.deallocate(b)
    assert manager.num_free_blocks == 4


def test_disabled_prefix_cache_never_hits():
    manager = BlockManager(4, BS, enable_prefix_caching=False)
    compute(manager, make_seq(range(9)))
    assert manager.cached_prefix(make_seq(range(9))) == []


def test_scheduler_starts_a_cached_prompt_at_the_block_boundary():
    manager = BlockManager(8, BS)
    scheduler = Scheduler(SchedulerConfig(2, 16, 64), manager, {99})
    a = make_seq(range(10), max_tokens=1)
    scheduler.add(a)
    scheduler.postprocess(scheduler.schedule(), [5])
    assert a.is_finished and manager.num_free_blocks == 8
    b = make_seq([*range(10), 11], max_tokens=1)
    scheduler.add(b)
    batch = scheduler.schedule()
    assert b.num_cached_tokens == 8 and batch.items[0].num_new_tokens == 3 and batch.items[0].samples_token


def test_preempted_sequence_resumes_from_its_own_cached_blocks():
    manager = BlockManager(3, BS)
    scheduler = Scheduler(SchedulerConfig(2, 16, 64), manager, {99})
    a, b = make_seq(range(4), max_tokens=10), make_seq(range(50, 54), max_tokens=10)
    scheduler.add(a)
    scheduler.add(b)
    scheduler.postprocess(scheduler.schedule(), [7, 8])  # each: 5 tokens, 1 full computed block
    batch = scheduler.schedule()  # both need a 2nd block: only one is free, so b is preempted
    assert [i.seq for i in batch.items] == [a] and b.status == SequenceStatus.WAITING
    scheduler.postprocess(batch, [9])
    scheduler.finish(a, "abort")
    assert manager.num_free_blocks == 3
    batch = scheduler.schedule()
    assert b.num_cached_tokens == 4 and [i.num_new_tokens for i in batch.items] == [1]
    assert b.token_ids == [50, 51, 52, 53, 8]


def test_clear_prefix_cache_forgets_free_blocks_but_not_those_in_use():
    from pocketcli.engine.block_manager import BlockManager
    from pocketcli.engine.sequence import Sequence
    from pocketcli.sampling_params import SamplingParams
    manager = BlockManager(num_blocks=8, block_size=4)
    kept, freed = (Sequence(list(range(start, start + 8)), SamplingParams(), 4) for start in (0, 100))
    for seq in (kept, freed):
        manager.allocate(seq, len(seq))
        seq.num_cached_tokens = len(seq)
        manager.cache_full_blocks(seq)
    manager.deallocate(freed)
    manager.clear_prefix_cache()
    assert manager.num_prefix_query_tokens == manager.num_prefix_hit_tokens == 0
    assert sorted(manager.hash_to_block_id.values()) == sorted(kept.block_table)
    assert manager.num_free_blocks == 8 - len(kept.block_table)
    again = Sequence(list(range(100, 108)), SamplingParams(), 4)
    assert manager.cached_prefix(again) == []  # the freed prompt is no longer found
