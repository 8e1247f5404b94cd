"""EngineLoop: one thread owns the engine; requests in and typed chunks out through queues."""
import threading

import numba
import pytest

from pocketcli.config import EngineConfig
from pocketcli.engine.engine_loop import EngineLoop, Request
from pocketcli.engine.generation import stream_generate
from pocketcli.engine.llm_engine import LLMEngine, PromptTooLongError
from pocketcli.engine.outputs import GenerationChunk
from pocketcli.registry import resolve_model
from pocketcli.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)


@pytest.fixture(scope="module")
def loop():
    engine_loop = EngineLoop(LLMEngine(EngineConfig(resolve_model(None), ctx_size=128, max_num_seqs=4))).start()
    yield engine_loop
    engine_loop.stop()


def drain(out_queue, timeout=300):  # a hang guard; a cold numba cache compiles for minutes
    items = []
    while (item := out_queue.get(timeout=timeout)) is not None:
        items.append(item)
    return items


def prompt(loop, text="The capital of France is"):
    return loop.engine.tokenizer.encode(text, add_special=True)


def test_chunks_end_with_finish_reason_then_none(loop):
    chunks = drain(loop.submit(Request(prompt(loop), GREEDY)))
    assert all(isinstance(c, GenerationChunk) for c in chunks)
    assert [c.finish_reason for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    last = chunks[-1]
    assert last.finish_reason == "length" and last.stats.num_completion_tokens == 6
    assert sum(len(c.token_ids) for c in chunks) == 6


def test_concurrent_requests_match_a_single_request(loop):
    ids = prompt(loop, "Once upon a time")
    outputs = [loop.submit(Request(ids, GREEDY)) for _ in range(3)]
    texts = ["".join(c.text for c in drain(q)) for q in outputs]
    assert len(set(texts)) == 1 and texts[0]
    assert loop.stats().num_blocks_used == 0


def test_errors_are_forwarded_and_the_loop_goes_on(loop):
    items = drain(loop.submit(Request(list(range(1, 200)), GREEDY)))
    assert len(items) == 1 and isinstance(items[0], PromptTooLongError)
    assert drain(loop.submit(Request(prompt(loop), GREEDY)))[-1].finish_reason == "length"


def test_abort_from_another_thread_frees_blocks_at_once(loop):
    request = Request(prompt(loop), SamplingParams(temperature=0.0, max_tokens=100, ignore_eos=True))
    out = loop.submit(request)
    first = out.get(timeout=300)
    assert isinstance(first, GenerationChunk)
    threading.Thread(target=loop.abort, args=(request.request_id,)).start()
    rest = drain(out)
    assert rest[-1].finish_reason == "abort"
    assert sum(len(c.token_ids) for c in [first, *rest]) < 100
    stats = loop.stats()
    assert stats.num_running == 0 and stats.num_blocks_free == stats.num_blocks


def test_a_failing_sink_aborts_its_request(loop):
    calls = []

    def sink(item):
        calls.append(item)
        if len(calls) == 1:
            raise RuntimeError("receiver is gone")

    done = loop.submit(Request(prompt(loop), SamplingParams(temperature=0.0, max_tokens=50, ignore_eos=True)), sink)
    assert done is None
    drain(loop.submit(Request(prompt(loop), GREEDY)))  # the loop has moved on
    assert calls[-1] is None and loop.stats().num_blocks_used == 0


def test_engine_loop_text_matches_stream_generate():
    engine = LLMEngine(EngineConfig(resolve_model(None), ctx_size=128))
    ids = engine.tokenizer.encode("Water boils at", add_special=True)
    direct = "".join(c.text for c in stream_generate(engine, ids, GREEDY))
    engine_loop = EngineLoop(engine).start()
    try:
        assert "".join(c.text for c in drain(engine_loop.submit(Request(ids, GREEDY)))) == direct
    finally:
        engine_loop.stop()
    late = drain(engine_loop.submit(Request(ids, GREEDY)))
    assert len(late) == 1 and isinstance(late[0], RuntimeError)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 cores to tell counts apart")
def test_engine_thread_keeps_its_creators_numba_thread_count(loop):
    """numba.set_num_threads is per thread: `pocket serve -t 1` sets it where the EngineLoop is built, and the
    engine thread must run its kernels with that count, not numba's default."""
    seen = []

    def build_and_ask():
        numba.set_num_threads(1)
        other = EngineLoop(loop.engine).start()  # only a rejected request reaches it: it never steps the engine
        other.submit(Request([], GREEDY), lambda item: seen.append(numba.get_num_threads()))
        other.stop()

    builder = threading.Thread(target=build_and_ask)
    builder.start()
    builder.join(60)
    assert seen == [1, 1]  # the error, then the end of the stream, both delivered on the engine thread


def test_stream_yields_chunks_and_closing_it_aborts(loop):
    chunks = list(loop.stream(Request(prompt(loop), GREEDY)))
    assert chunks[-1].finish_reason == "length" and sum(len(c.token_ids) for c in chunks) == 6
    stream = loop.stream(Request(prompt(loop), SamplingParams(temperature=0.0, max_tokens=100, ignore_eos=True)))
    next(stream)
    stream.close()  # what a Ctrl-C, a stopped chat reply or a gone reader does
    drain(loop.submit(Request(prompt(loop), GREEDY)))  # queued after the abort: the blocks are free by now
    assert loop.stats().num_running == 0 and loop.stats().num_blocks_used == 0
    with pytest.raises(PromptTooLongError):
        list(loop.stream(Request(list(range(1, 200)), GREEDY)))


async def test_astream_awaits_the_chunks_on_the_event_loop_and_closing_it_aborts(loop):
    """The chat app's way: the engine thread puts each chunk on this event loop; no other thread waits."""
    threads_before = threading.active_count()
    chunks = [chunk async for chunk in loop.astream(Request(prompt(loop), GREEDY))]
    expected = list(loop.stream(Request(prompt(loop), GREEDY)))  # greedy: the same chunks
    assert [(c.text, c.token_ids, c.finish_reason) for c in chunks] == [
        (c.text, c.token_ids, c.finish_reason) for c in expected]
    stream = loop.astream(Request(prompt(loop), SamplingParams(temperature=0.0, max_tokens=100, ignore_eos=True)))
    await stream.__anext__()
    await stream.aclose()  # a stopped reply, or the app's worker cancelled at quit
    drain(loop.submit(Request(prompt(loop), GREEDY)))
    assert loop.stats().num_running == 0 and loop.stats().num_blocks_used == 0
    with pytest.raises(PromptTooLongError):
        [chunk async for chunk in loop.astream(Request(list(range(1, 200)), GREEDY))]
    assert threading.active_count() == threads_before


def test_load_builds_the_engine_on_the_loop_thread_and_replaces_the_one_before():
    """Chat's model switch: the engine thread builds the new engine; a failed load leaves the previous one."""
    def build():
        built_on.append(threading.current_thread().name)
        return LLMEngine(EngineConfig(resolve_model(None), ctx_size=64))

    built_on = []
    engine_loop = EngineLoop().start()
    try:
        with pytest.raises(RuntimeError, match="no model is loaded"):
            list(engine_loop.stream(Request([1, 2], GREEDY)))
        first = engine_loop.load(build).result(timeout=300)
        assert engine_loop.engine is first and built_on == ["engine-loop"]
        with pytest.raises(ValueError, match="bad model"):
            engine_loop.load(lambda: (_ for _ in ()).throw(ValueError("bad model"))).result(timeout=60)
        assert engine_loop.engine is first
        assert engine_loop.call(lambda: threading.current_thread().name).result(timeout=60) == "engine-loop"
        ids = first.tokenizer.encode("Hi", add_special=True)
        assert list(engine_loop.stream(Request(ids, GREEDY)))[-1].finish_reason == "length"
    finally:
        engine_loop.stop()


def test_each_step_is_told_to_the_step_observer(loop):
    steps = []

    def observe(seconds, num_seqs, num_tokens):
        steps.append((seconds, num_seqs, num_tokens))
    loop.add_step_observer(observe)
    try:
        outputs = [loop.submit(Request(prompt(loop, text), GREEDY)) for text in ("Once upon a time", "The sky is")]
        for out in outputs:
            drain(out)
    finally:
        loop.remove_step_observer(observe)
    assert sum(num_tokens for _, _, num_tokens in steps) == 2 * GREEDY.max_tokens
    assert all(seconds > 0 and 1 <= num_seqs <= 2 and num_seqs <= num_tokens for seconds, num_seqs, num_tokens in steps)


def test_a_failing_step_observer_leaves_the_loop_running(loop):
    def fail(*_):
        raise RuntimeError("observer bug")
    steps = []

    def observe(*step):
        steps.append(step)
    loop.add_step_observer(fail)
    loop.add_step_observer(observe)
    try:
        chunks = drain(loop.submit(Request(prompt(loop), GREEDY)))
    finally:
        loop.remove_step_observer(fail)
        loop.remove_step_observer(observe)
    assert chunks[-1].finish_reason == "length" and loop.is_alive
    assert sum(num_tokens for _, _, num_tokens in steps) == GREEDY.max_tokens  # the next observer still hears
