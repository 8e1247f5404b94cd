"""The one-call decode layer (kernels_numba.cpu.decode_layer) against the op-by-op layer it replaces."""
import numba
import numpy as np
import pytest

from kernels_numba.cpu.matvec import dispatch
from pocketcli.config import EngineConfig
from pocketcli.engine.llm_engine import LLMEngine
from pocketcli.sampling_params import SamplingParams
from tests.models.tiny_gguf import ARCHS, write_tiny_model

PROMPT = [1, 40, 41, 42, 43, 44, 45]


def decode_logits(engine: LLMEngine, fused: bool, num_steps: int) -> tuple[np.ndarray, list[int]]:
    """Greedy decode after PROMPT; logits of every decode step, [num_steps, vocab], and the tokens."""
    if not fused:
        engine.model._decode_layer_plans = None
    seq = engine.add_request(PROMPT, SamplingParams(temperature=0, max_tokens=num_steps + 1, ignore_eos=True))
    engine.step()  # prefill
    rows = []
    while not seq.is_finished:
        batch = engine.scheduler.schedule()
        logits = engine.runner.run(batch)
        rows.append(logits[0])
        engine.scheduler.postprocess(batch, [int(logits[0].argmax())])
    return np.stack(rows), seq.token_ids[len(PROMPT):]


def tiny_engine(tmp_path, arch, quant, **config):
    path = write_tiny_model(tmp_path / f"{arch}_{quant}.gguf", arch, 3, quant)
    return LLMEngine(EngineConfig(str(path), ctx_size=64, block_size=4, **config))


@pytest.mark.parametrize("quant", ["Q8_0", "Q5_0", "Q4_0"])
@pytest.mark.parametrize("arch", ARCHS)
def test_fused_decode_equals_op_by_op(tmp_path, arch, quant):
    """Biases (qwen2), q/k norms (qwen3, gemma3), post norms, GELU and sliding windows (gemma3), across blocks."""
    fused_engine = tiny_engine(tmp_path, arch, quant)
    fused, fused_tokens = decode_logits(fused_engine, True, 12)
    assert fused_engine.model._decode_layer_plans is not None  # the fused path really ran
    plain, plain_tokens = decode_logits(tiny_engine(tmp_path, arch, quant), False, 12)
    np.testing.assert_allclose(fused, plain, atol=1e-5, rtol=1e-5)
    assert fused_tokens == plain_tokens


def test_fused_decode_on_two_threads_equals_one(tmp_path):
    """The mat-vecs split across the pool (big enough rows) give the single-thread numbers."""
    numba = pytest.importorskip("numba")
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs two numba threads")
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one, _ = decode_logits(tiny_engine(tmp_path, "gemma3", "Q8_0"), True, 4)
        numba.set_num_threads(2)
        two, _ = decode_logits(tiny_engine(tmp_path, "gemma3", "Q8_0"), True, 4)
        assert numba.get_num_threads() == 2  # the kernels restore the pool size they change
    finally:
        numba.set_num_threads(threads)
    np.testing.assert_allclose(one, two, atol=1e-5, rtol=1e-5)


def test_float32_weights_stay_op_by_op(tmp_path):
    """F32 mat-vecs go to BLAS in linear, so an F32 model keeps the op-by-op path (and its numbers)."""
    engine = tiny_engine(tmp_path, "llama", "F32")
    decode_logits(engine, True, 2)
    assert engine.model._decode_layer_plans is None


def test_tapped_hidden_is_a_snapshot(tmp_path):
    """Drafters' layer taps keep each layer's output although the fused path updates x in place."""
    engines = [tiny_engine(tmp_path, "llama", "Q8_0") for _ in range(2)]
    for engine in engines:
        engine.model.tap_layer_ids = frozenset({0})
    decode_logits(engines[0], True, 2)
    decode_logits(engines[1], False, 2)
    np.testing.assert_allclose(engines[0].model.tapped_hidden[0], engines[1].model.tapped_hidden[0], atol=1e-5)
    assert not np.allclose(engines[0].model.tapped_hidden[0], engines[0].runner.last_hidden)


PROMPTS = ([1, 40, 41, 42, 43, 44, 45], [1, 50, 51], [1, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69])


def count_fused_layers(monkeypatch, sizes: list) -> None:
    """Each fused layer's batch size goes to sizes, whether it ran alone (decode_layer) or with the step's other
    layers in one call (decode_layers)."""
    import kernels_numba.cpu as cpu_ops
    decode_layer, decode_layers = cpu_ops.decode_layer, cpu_ops.decode_layers
    monkeypatch.setattr(cpu_ops, "decode_layer", lambda x, *rest: sizes.append(len(x)) or decode_layer(x, *rest))

    def all_layers(x, plans, *rest):
        done = decode_layers(x, plans, *rest)
        sizes.extend([len(x)] * (len(plans) if done else 0))
        return done

    monkeypatch.setattr(cpu_ops, "decode_layers", all_layers)


def batch_decode_logits(engine: LLMEngine, fused: bool, prompts, num_steps: int) -> list[np.ndarray]:
    """Greedy decode of every prompt in one batch; per sequence, its logits of every decode step [num_steps, vocab].
    Only steps where all sequences decode together are recorded."""
    if not fused:
        engine.model._decode_layer_plans = None
    seqs = [engine.add_request(list(p), SamplingParams(temperature=0, max_tokens=num_steps + 1, ignore_eos=True))
            for p in prompts]
    rows: dict[int, list[np.ndarray]] = {seq.seq_id: [] for seq in seqs}
    while not all(seq.is_finished for seq in seqs):
        batch = engine.scheduler.schedule()
        logits = engine.runner.run(batch)
        sampled = [item.seq for item in batch.items if item.samples_token]
        if len(batch.items) == len(seqs) and all(item.num_new_tokens == 1 for item in batch.items):
            for seq, row in zip(sampled, logits):
                rows[seq.seq_id].append(row)
        engine.scheduler.postprocess(batch, [int(row.argmax()) for row in logits])
    return [np.stack(rows[seq.seq_id]) for seq in seqs]


@pytest.mark.parametrize("arch", ["gemma3", "qwen2"])
def test_fused_batched_decode_equals_op_by_op_and_each_sequence_alone(tmp_path, arch, monkeypatch):
    """Three sequences at different positions (across KV blocks) in one fused call per layer: the op-by-op layer's
    numbers, and each sequence's logits bit for bit those it gets decoded alone."""
    fused_batch_sizes = []
    count_fused_layers(monkeypatch, fused_batch_sizes)
    fused_engine = tiny_engine(tmp_path, arch, "Q8_0", max_num_seqs=4)
    fused = batch_decode_logits(fused_engine, True, PROMPTS, 6)
    assert fused_batch_sizes.count(len(PROMPTS)) >= 4 * fused_engine.model.hparams.num_layers
    plain = batch_decode_logits(tiny_engine(tmp_path, arch, "Q8_0", max_num_seqs=4), False, PROMPTS, 6)
    for fused_rows, plain_rows in zip(fused, plain):
        assert fused_rows.shape[0] >= 4  # the sequences really decoded together
        np.testing.assert_allclose(fused_rows, plain_rows, atol=1e-5, rtol=1e-5)
    for prompt, batched_rows in zip(PROMPTS, fused):
        alone = batch_decode_logits(tiny_engine(tmp_path, arch, "Q8_0"), True, [prompt], 6)[0]
        if dispatch.USE_INT8_DOT:  # the 8-bit dots give a token the same bits alone and in a batch
            np.testing.assert_array_equal(batched_rows, alone[-batched_rows.shape[0]:])
        else:  # the portable tier's float kernels sum a batch (register tiles) and a lone token in other orders
            np.testing.assert_allclose(batched_rows, alone[-batched_rows.shape[0]:], atol=1e-5, rtol=1e-5)


def staggered_decode_logits(engine: LLMEngine, fused: bool, late_prompt, num_steps: int) -> dict[int, list]:
    """Greedy decode of PROMPTS[:2]; after their second decode step late_prompt (if any) joins, so its prompt
    shares a step with their decodes. Per request index, its logits rows in step order."""
    if not fused:
        engine.model._decode_layer_plans = None
    params = SamplingParams(temperature=0, max_tokens=num_steps, ignore_eos=True)
    seqs = [engine.add_request(list(p), params) for p in PROMPTS[:2]]
    rows: dict[int, list] = {0: [], 1: [], 2: []}
    steps = 0
    while not all(seq.is_finished for seq in seqs):
        if steps == 3 and late_prompt is not None:
            seqs.append(engine.add_request(list(late_prompt), params))
        batch = engine.scheduler.schedule()
        logits = engine.runner.run(batch)
        sampled = [item.seq for item in batch.items if item.samples_token]
        for seq, row in zip(sampled, logits):
            rows[[s.seq_id for s in seqs].index(seq.seq_id)].append(row)
        engine.scheduler.postprocess(batch, [int(row.argmax()) for row in logits])
        steps += 1
    return rows


def test_decodes_sharing_a_step_with_a_prompt_stay_fused_and_unchanged(tmp_path, monkeypatch):
    """A prompt chunk joins two decoding sequences: their tokens still take the fused layer (the prompt goes op
    by op in the same layer loop), keep the bits they get without the newcomer, and every row matches the
    op-by-op forward."""
    fused_batch_sizes = []
    count_fused_layers(monkeypatch, fused_batch_sizes)
    late = PROMPTS[2]
    engine = tiny_engine(tmp_path, "gemma3", "Q8_0", max_num_seqs=4)
    op_by_op_calls = []
    layer_forward = engine.model._layer_forward
    monkeypatch.setattr(engine.model, "_layer_forward", lambda *args: op_by_op_calls.append(len(args[2])) or
                        layer_forward(*args))
    mixed = staggered_decode_logits(engine, True, late, 6)
    num_layers = engine.model.hparams.num_layers
    # op by op: the first two prompts (no decode yet), then, in one mixed step, only the newcomer's prompt
    assert op_by_op_calls == [len(PROMPTS[0]) + len(PROMPTS[1])] * num_layers + [len(late)] * num_layers
    assert fused_batch_sizes.count(3) >= 2 * num_layers  # then all three decoded fused
    alone = staggered_decode_logits(tiny_engine(tmp_path, "gemma3", "Q8_0", max_num_seqs=4), True, None, 6)
    for i in (0, 1):
        np.testing.assert_array_equal(np.stack(mixed[i]), np.stack(alone[i]))
    plain = staggered_decode_logits(tiny_engine(tmp_path, "gemma3", "Q8_0", max_num_seqs=4), False, late, 6)
    for i in (0, 1, 2):
        np.testing.assert_allclose(np.stack(mixed[i]), np.stack(plain[i]), atol=1e-5, rtol=1e-5)


def fused_decode_runs(tmp_path, arch, quant, monkeypatch) -> tuple:
    """(engine, fused decode logits of PROMPT alone, of PROMPTS in one batch), 5 steps each, on a new tiny engine;
    then the test's monkeypatches are undone."""
    engine = tiny_engine(tmp_path, arch, quant, max_num_seqs=4)
    alone, _ = decode_logits(engine, True, 5)
    batched = batch_decode_logits(engine, True, PROMPTS, 5)
    monkeypatch.undo()
    return engine, alone, batched


@pytest.mark.parametrize("arch", ARCHS)
def test_every_layer_in_one_call_gives_a_layer_at_a_times_bits(tmp_path, arch, monkeypatch):
    """decode_stack.decode_layers (the step's layers in one compiled call, their arguments in a typed List) against
    decode_layer called a layer at a time: the same bits, one sequence and three at different positions."""
    import kernels_numba.cpu as cpu_ops

    def run(one_call: bool):
        if not one_call:
            monkeypatch.setattr(cpu_ops, "decode_layers", lambda *args: False)
        return fused_decode_runs(tmp_path, arch, "Q8_0", monkeypatch)

    engine, alone, batched = run(True)
    assert set(engine.model._decode_layer_plans[0].stacks) == {1, 3}  # the one-call path really ran
    _, alone_by_layer, batched_by_layer = run(False)
    np.testing.assert_array_equal(alone, alone_by_layer)
    for rows, rows_by_layer in zip(batched, batched_by_layer):
        np.testing.assert_array_equal(rows, rows_by_layer)


def test_a_decode_stack_serves_only_its_token_count_and_caches():
    """A stack holds its caches in its typed List: new caches (a new engine on the same model) get a new one."""
    from kernels_numba.cpu.decode_stack import DecodeStack

    from kernels_numba.cpu.decode_stack import _array_kind

    caches = (np.zeros(4), np.zeros(4))
    tables = _array_kind(np.zeros((1, 2), dtype=np.int32))
    stack = DecodeStack(1, caches, caches, tables, None, (0, 0))
    assert stack.serves(1, list(caches), list(caches), tables)
    assert not stack.serves(2, caches, caches, tables)
    assert not stack.serves(1, (caches[0], caches[1].copy()), caches, tables)
    assert not stack.serves(1, caches, caches, _array_kind(np.zeros((1, 2), dtype=np.int64)))


def _record_calls(monkeypatch, owner, name: str, calls: list) -> None:
    """owner.name(*args) goes on as before and appends its args to calls."""
    function = getattr(owner, name)

    def recorded(*args, **kwargs):
        calls.append(args)
        return function(*args, **kwargs)

    monkeypatch.setattr(owner, name, recorded)


@pytest.mark.parametrize("arch,quant,kv_type", [("gemma3", "Q4_0", "f16"), ("qwen2", "Q8_0", "bf16"),
                                                ("llama", "Q5_0", "f32"), ("qwen3", "F16", "f16")])
def test_the_decode_step_compiled_from_types_is_the_step_that_runs(tmp_path, arch, quant, kv_type, monkeypatch):
    """A first run's side and tail children compile the fused decode step from the weights' types, reading no
    weight (engine/decode_step_ahead.py): decode_layer_into, decode_layer_tail_into and the stack's loop get the
    very signatures a decode step then calls, whatever the KV type and whether every matrix takes the run path
    (F16 weights: the general glue), and the leaves of every type the step's layers multiply compile."""
    import importlib

    from pocketcli.engine.decode_step_ahead import compile_decode_step_ahead

    decode_layer = importlib.import_module("kernels_numba.cpu.decode_layer")  # the package exports a function so named
    decode_stack = importlib.import_module("kernels_numba.cpu.decode_stack")
    kernels = {"layer": decode_layer.decode_layer_into, "tail": decode_layer.decode_layer_tail_into,
               "loop": decode_stack.decode_layers_into}
    compiled = {name: [] for name in kernels}
    for name, kernel in kernels.items():
        _record_calls(monkeypatch, kernel, "compile", compiled[name])
    leaves: list = []
    _record_calls(monkeypatch, decode_stack, "leaf_handles", leaves)
    path = write_tiny_model(tmp_path / f"{arch}_{quant}.gguf", arch, 3, quant)
    config = EngineConfig(str(path), ctx_size=64, block_size=4, kv_type=kv_type)
    assert compile_decode_step_ahead(config)
    assert compile_decode_step_ahead(config, is_tail=True)
    assert [len(calls) for calls in compiled.values()] == [1, 1, 2]  # the loop: by the side and the tail child

    engine = LLMEngine(config)  # the step as the command then runs it
    engine.add_request(PROMPT[:1], SamplingParams(temperature=0, max_tokens=2, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    plans = engine.model._decode_layer_plans
    stack = plans[0].stacks[1]  # the one-call path ran, for one token
    block_tables = np.zeros((1, 2), dtype=np.int32)
    _, layer_types = decode_stack._stack_arguments(plans, 1, engine.kv_cache.keys, engine.kv_cache.values,
                                                   block_tables)
    assert compiled["layer"][0] == (layer_types,) and compiled["tail"][0] == (layer_types,)
    x, positions = np.zeros((1, 8), dtype=np.float32), np.zeros(1, dtype=np.int64)
    loop_types = tuple(numba.typeof(value) for value in (x, stack.layers, block_tables, positions, positions))
    assert compiled["loop"][0][0][:5] == loop_types
    assert {call for call in leaves} == {(dispatch.linear_path(code, 1), code) for plan in plans
                                         for code in plan.codes}
    # the run path's glue alone where the 8-bit dots run (not on the generic tier: every matrix takes the fused dot)
    assert (plans[0].mixed_paths(1) is None) == (quant != "F16" and dispatch.USE_RUN_LAYOUT)


def test_no_decode_step_from_types_without_the_fused_layer(tmp_path):
    """F32 weights (BLAS) make no fused layer: nothing compiles ahead, and the side child rehearses a decode."""
    from pocketcli.engine.decode_step_ahead import compile_decode_step_ahead

    path = write_tiny_model(tmp_path / "llama_F32.gguf", "llama", 3, "F32")
    assert not compile_decode_step_ahead(EngineConfig(str(path), ctx_size=64, block_size=4))
    assert not compile_decode_step_ahead(EngineConfig(str(path), ctx_size=64, block_size=4, backend="reference"))


@pytest.mark.parametrize("arch", ["gemma3", "qwen2"])
def test_the_run_path_glue_alone_gives_the_general_glues_bits(tmp_path, arch, monkeypatch):
    """Where every matrix takes the run path (mixed_paths None: the 8-bit dot tiers, run-layout types), the decode
    layer compiles only the run path's glue; forced through the general glue (mixed_paths True, as a model with
    some matrix on another path gets), one sequence and three give the same bits."""
    from kernels_numba.cpu.decode_layer import DecodeLayerPlan

    def run(mixed_paths):
        if mixed_paths:
            monkeypatch.setattr(DecodeLayerPlan, "mixed_paths", lambda plan, num_tokens: True)
        return fused_decode_runs(tmp_path, arch, "Q4_0", monkeypatch)

    engine, alone, batched = run(False)
    plan = engine.model._decode_layer_plans[0]
    assert set(plan.stacks) == {1, 3}  # the one-call path ran
    run_only = all(kernel[0] == dispatch.RUN for kernel in plan.kernels(1))
    assert run_only == dispatch.USE_INT8_DOT  # Q4_0 takes the run path wherever the 8-bit dots do
    assert (plan.mixed_paths(1) is None) == run_only
    assert (plan.stacks[1].layers[0][-1] is None) == run_only  # what the stack's layers pass
    general, alone_general, batched_general = run(True)
    assert general.model._decode_layer_plans[0].stacks[3].layers[0][-1] is True
    np.testing.assert_array_equal(alone, alone_general)
    for rows, rows_general in zip(batched, batched_general):
        np.testing.assert_array_equal(rows, rows_general)
