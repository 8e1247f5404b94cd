"""A checkpoint's recommended sampling settings (GGUF general.sampling.*, generation_config.json): shown by
`pocket info`, used by generate, chat and serve where the user sets nothing; explicit flags and request fields
win; --no-model-defaults ignores them."""
import json

import pytest

from gguf_loader.hf_checkpoint import open_hf_checkpoint
from pocketcli.cli import main, make_parser
from pocketcli.commands.chat import make_session
from pocketcli.config import EngineConfig
from pocketcli.engine.engine_loop import EngineLoop
from pocketcli.engine.llm_engine import LLMEngine
from pocketcli.sampling_defaults import model_sampling_defaults
from pocketcli.server import make_app
from pocketcli.server.protocol import ChatCompletionRequest, make_sampling_params
from tests.models.tiny_gguf import write_tiny_model

GGUF_SAMPLING = {"general.sampling.temp": 0.0, "general.sampling.top_k": 7, "general.sampling.top_p": 0.5,
                 "general.sampling.min_p": 0.125, "general.sampling.penalty_repeat": 1.25,
                 "general.sampling.penalty_last_n": 16}
MODEL_DEFAULTS = {"temperature": 0.0, "top_k": 7, "top_p": 0.5, "min_p": 0.125, "repeat_penalty": 1.25,
                  "repeat_last_n": 16}
BUILTIN = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "repeat_penalty": 1.0, "repeat_last_n": 64}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return str(write_tiny_model(tmp_path_factory.mktemp("sampling") / "m.gguf", "llama",
                                extra_metadata=GGUF_SAMPLING))


def generate_sampling(capsys, model, *flags) -> dict:
    assert main(["generate", "-m", model, "-p", "hello", "-n", "2", "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)["sampling"]


def test_generate_takes_the_models_settings_where_no_flag_is_given(model, capsys):
    assert generate_sampling(capsys, model) == MODEL_DEFAULTS
    assert generate_sampling(capsys, model, "--temperature", "0.5", "--top-k", "0") == {
        **MODEL_DEFAULTS, "temperature": 0.5, "top_k": 0}
    assert generate_sampling(capsys, model, "--no-model-defaults") == BUILTIN
    assert generate_sampling(capsys, model, "--no-model-defaults", "--min-p", "0.2") == {**BUILTIN, "min_p": 0.2}


def test_info_shows_them(model, capsys):
    assert main(["info", "-m", model, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sampling_defaults"] == MODEL_DEFAULTS
    assert main(["info", "-m", model]) == 0
    line = next(row for row in capsys.readouterr().out.splitlines() if row.startswith("sampling_defaults"))
    assert "temperature 0, top_k 7, top_p 0.5, min_p 0.125, repeat_penalty 1.25, repeat_last_n 16" in line


def test_chat_settings_take_them_too(model):
    parser = make_parser()
    session = make_session(parser.parse_args(["chat", "-m", model, "--top-p", "0.75"]))
    assert session.settings.sampling_params().top_p == 0.75
    assert {k: getattr(session.settings, k) for k in MODEL_DEFAULTS} == {**MODEL_DEFAULTS, "top_p": 0.75}
    session = make_session(parser.parse_args(["chat", "-m", model, "--no-model-defaults"]))
    assert {k: getattr(session.settings, k) for k in BUILTIN} == BUILTIN


def test_server_requests_fall_back_to_them(model):
    body = ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}], top_p=0.9)
    params = make_sampling_params(body, 0, 8, {}, None, model_defaults=MODEL_DEFAULTS)
    assert (params.temperature, params.top_k, params.top_p, params.min_p, params.repeat_penalty,
            params.repeat_last_n) == (0.0, 7, 0.9, 0.125, 1.25, 16)
    plain = make_sampling_params(body, 0, 8, {}, None)  # the OpenAI API's defaults
    assert (plain.temperature, plain.top_k, plain.top_p, plain.min_p, plain.repeat_penalty) == (1.0, 0, 0.9, 0.0, 1.0)
    loop = EngineLoop(LLMEngine(EngineConfig(model, ctx_size=64, backend="reference")))
    assert make_app(loop, "m").state.server.completions.sampling_defaults == MODEL_DEFAULTS
    assert make_app(loop, "m", use_model_defaults=False).state.server.completions.sampling_defaults == {}


def test_generation_config_json_reads_into_the_same_keys(tmp_path):
    from tests.hf.tiny_hf import save_tiny_model

    save_tiny_model(tmp_path, "llama")
    config = json.loads((tmp_path / "generation_config.json").read_text())
    config.update(do_sample=True, temperature=0.6, top_p=0.9, top_k=20, min_p=None, repetition_penalty=1.05)
    (tmp_path / "generation_config.json").write_text(json.dumps(config))
    assert model_sampling_defaults(open_hf_checkpoint(tmp_path).metadata) == {
        "temperature": 0.6, "top_k": 20, "top_p": 0.9, "repeat_penalty": 1.05, "repeat_last_n": -1}
