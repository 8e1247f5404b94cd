"""The engine's CUDA-graph decode (pocketcli/engine/graphed_decode.py): a lone sequence's decode steps replay one
captured step fed through its input buffers (token, position, slot, block table, length); greedy tokens are
the host's, and a graph whose replay disagrees with the eager step is dropped, the tokens unchanged. Under the
simulator the "graph" runs the step eagerly on the same buffers, so these check what the engine feeds it."""
from pocketcli.config import EngineConfig
from pocketcli.engine.graphed_decode import GraphedDecode
from pocketcli.engine.llm_engine import LLMEngine
from pocketcli.sampling_params import SamplingParams
from tests.cuda.sim.test_cuda_model import PROMPT, smaller_gemma3  # noqa: F401 (the fixture)
from tests.models import tiny_gguf

NEW_TOKENS = 6  # past a block boundary (block_size 4) and the sliding window (3)


def greedy(path, backend, max_tokens=NEW_TOKENS):
    engine = LLMEngine(EngineConfig(str(path), ctx_size=32, backend=backend, block_size=4))
    seq = engine.add_request(list(PROMPT), SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    return seq.token_ids[len(PROMPT):], engine


def test_decode_steps_replay_one_captured_step_with_the_host_tokens(tmp_path, smaller_gemma3):
    path = tiny_gguf.write_tiny_model(tmp_path / "gemma3.gguf", "gemma3", seed=0, quant="Q8_0")
    tokens, engine = greedy(path, "cuda")
    graphed = engine.runner.graphed_decode
    assert graphed is not None and graphed.captured is not None and not graphed.disabled
    assert tokens == greedy(path, "reference")[0]
    eager = LLMEngine(EngineConfig(str(path), ctx_size=32, backend="cuda", block_size=4, cuda_graph=False))
    assert eager.runner.graphed_decode is None


def test_a_replay_that_disagrees_with_the_eager_step_turns_the_graph_off(tmp_path, smaller_gemma3, monkeypatch,
                                                                        capsys):
    """A graph that read a value fixed at capture (here: logits shifted after the capture) fails its check at
    the first new position; that step and the rest run eagerly."""
    capture = GraphedDecode._capture

    def capture_then_shift(self, inputs):
        logits = capture(self, inputs)
        ops, replay = self.model.ops, self.captured.replay
        self.verified = False  # as on a GPU, where capture() recorded a real graph

        def shifted(values):
            out = ops.to_host(replay(values)).copy()
            out[0, 0] += 100.0
            return ops.to_device(out)

        self.captured.replay = shifted
        return logits

    monkeypatch.setattr(GraphedDecode, "_capture", capture_then_shift)
    path = tiny_gguf.write_tiny_model(tmp_path / "gemma3.gguf", "gemma3", seed=0, quant="Q8_0")
    tokens, engine = greedy(path, "cuda", max_tokens=3)  # prefill, the capture, then the checked replay
    graphed = engine.runner.graphed_decode
    assert graphed.disabled and graphed.captured is None
    assert tokens == greedy(path, "reference", max_tokens=3)[0] and 0 not in tokens
    assert capsys.readouterr().err.count("warning: CUDA graph decode off") == 1
