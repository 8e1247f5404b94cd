"""Flags come from the fields (pocketcli/flag_spec.py): every SamplingParams flag field is a flag of generate,
chat and serve, every EngineConfig flag field one of the commands that build an engine, each with the one default
its field has; the chat settings and the server's request defaults are read from the same fields."""
import ast
import dataclasses
from pathlib import Path

import pytest

from pocketcli.chat.session import ChatSettings
from pocketcli.cli import make_parser
from pocketcli.commands.common import sampling_settings
from pocketcli.config import EngineConfig
from pocketcli.flag_spec import api_default, api_fields, cli_default, flag_fields, spec_of
from pocketcli.sampling_params import SamplingParams
from pocketcli.server.protocol import ChatCompletionRequest, CompletionRequest, make_sampling_params

ROOT = Path(__file__).resolve().parents[2]
REQUEST_ONLY = {"logit_bias", "logprobs", "structured_output"}  # set by API requests only, never a flag
NOT_FLAGS = {"model_path", "block_size", "follow_free_cores"}  # -m; internal; always on from the CLI
SAMPLING_COMMANDS = ("generate", "chat", "serve")
ENGINE_COMMANDS = ("generate", "chat", "serve", "bench", "perplexity", "warmup")
COMMAND_DEFAULTS = {"perplexity": {"ctx_size": 512}}  # llama-perplexity's window


def subparser(command: str):
    return make_parser()._subparsers._group_actions[0].choices[command]


def actions(command: str) -> dict:
    return {action.dest: action for action in subparser(command)._actions}


def test_every_sampling_field_is_a_flag_or_request_only():
    names = {f.name for f in dataclasses.fields(SamplingParams)}
    assert names - set(flag_fields(SamplingParams)) == REQUEST_ONLY


@pytest.mark.parametrize("command", SAMPLING_COMMANDS)
def test_every_sampling_flag_is_a_flag_of_generate_chat_and_serve(command):
    found = actions(command)
    for name, field in flag_fields(SamplingParams).items():
        assert name in found, f"pocket {command} lacks --{name.replace('_', '-')}"
        action = found[name]
        assert action.default is None, f"{command} --{name}: unset must mean 'not given' (model defaults)"
        assert set(spec_of(field).option_strings(name)) == set(action.option_strings)
        assert action.help.startswith(spec_of(field).help)


def test_unset_sampling_flags_take_the_one_default_of_each_command():
    """generate: SamplingParams'; chat: the same but its reply cap (ChatSettings.max_tokens); serve: the API's."""
    builtin = {name: cli_default(field) for name, field in flag_fields(SamplingParams).items()}
    generate = sampling_settings(make_parser().parse_args(["generate"]))
    assert generate == builtin
    chat = sampling_settings(make_parser().parse_args(["chat"]), defaults=ChatSettings)
    assert chat == {**builtin, "max_tokens": ChatSettings().max_tokens} and ChatSettings().max_tokens == 512
    assert {name: getattr(ChatSettings(), name) for name in builtin} == chat
    for name in builtin:
        assert actions("serve")[name].help.startswith(spec_of(flag_fields(SamplingParams)[name]).help)


def test_the_request_defaults_are_the_fields_api_defaults():
    request_fields = api_fields(SamplingParams)
    assert request_fields["repetition_penalty"] == "repeat_penalty"
    for request_field, field in request_fields.items():
        for body in (ChatCompletionRequest, CompletionRequest):
            if request_field != "stop":  # None there: not sent
                assert body.model_fields[request_field].default == api_default(SamplingParams, field), request_field
    params = make_sampling_params(ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}]), 0, 8, {}, None)
    assert (params.temperature, params.top_k, params.top_p, params.min_p, params.repeat_penalty,
            params.repeat_last_n, params.stop, params.seed) == (1.0, 0, 1.0, 0.0, 1.0, 64, [], None)


def test_serve_flags_are_request_defaults_that_a_request_field_overrides():
    body = ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}], top_p=0.9, seed=3)
    flags = {"top_p": 0.5, "temperature": 0.25, "stop": ["\n\n"], "seed": 11, "presence_penalty": 0.5}
    params = make_sampling_params(body, 1, 8, {}, None, model_defaults=flags)
    assert (params.top_p, params.temperature, params.stop, params.seed, params.presence_penalty) == (
        0.9, 0.25, ["\n\n"], 4, 0.5)  # the request's top_p and seed (+ choice index), the flags for the rest


@pytest.mark.parametrize("command", ENGINE_COMMANDS)
def test_every_engine_flag_is_a_flag_of_the_commands_that_build_an_engine(command):
    found = actions(command)
    fields = flag_fields(EngineConfig)
    assert {f.name for f in dataclasses.fields(EngineConfig)} - set(fields) == NOT_FLAGS
    for name, field in fields.items():
        takes = spec_of(field).commands is None or command in spec_of(field).commands
        assert (name in found) == takes, f"pocket {command} --{name}"
        if takes:
            default = COMMAND_DEFAULTS.get(command, {}).get(name, cli_default(field))
            assert found[name].default == default, f"{command} --{name}"
            if default not in (None, True, False):
                assert f"(default: {default})" in found[name].help, f"{command} --{name}: {found[name].help}"
            assert set(found[name].option_strings) == set(spec_of(field).option_strings(name))


def test_engine_flags_reach_the_engine_config():
    from pocketcli.commands.common import engine_config

    args = make_parser().parse_args(["serve", "--device", "cpu", "-c", "512", "-b", "64", "--max-num-seqs", "3",
                                     "--no-prefix-caching", "--kv-type", "q8_0", "--spec", "ngram", "--spec-k", "2"])
    config = engine_config(args, "model.gguf")
    assert (config.ctx_size, config.max_num_batched_tokens, config.max_num_seqs, config.enable_prefix_caching,
            config.kv_type, config.spec, config.spec_k, config.tp_size, config.follow_free_cores) == (
        512, 64, 3, False, "q8_0", "ngram", 2, 1, True)
    default = engine_config(make_parser().parse_args(["generate", "--device", "cpu"]), "model.gguf")
    assert (default.kv_type, default.max_num_seqs, default.ctx_size) == ("f16", 1, 4096)


def test_only_the_engine_factory_builds_an_engine():
    """generate, bench, serve and chat build engines through pocketcli/engine_factory.py, which attaches the
    ranks of --tp and builds the draft engine of --spec draft (EngineConfig.draft_config)."""
    allowed = {"pocketcli/engine_factory.py"}
    found = set()
    for path in [*ROOT.glob("pocketcli/**/*.py"), *ROOT.glob("tui/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "LLMEngine":
                found.add(str(path.relative_to(ROOT)))
    assert found == allowed


def test_the_draft_engine_config_follows_the_target():
    config = EngineConfig("target.gguf", ctx_size=0, max_num_seqs=3, block_size=8, backend="reference",
                          spec="draft", draft_model_path="draft.gguf", spec_k=5, kv_type="q8_0", tp_size=2)
    draft = config.draft_config(max_model_len=384)
    assert (draft.model_path, draft.ctx_size, draft.max_num_seqs, draft.block_size, draft.backend, draft.kv_type) == (
        "draft.gguf", 384, 3, 8, "reference", "q8_0")
    assert (draft.spec, draft.tp_size, draft.enable_prefix_caching) == (None, 1, False)


def test_a_sampling_field_the_protocol_does_not_write_out_is_a_request_field():
    """SamplingFields writes out the fields with the API's ranges; any other request field of SamplingParams is
    added from the dataclass (type, API default), so a new sampling setting needs no edit in protocol.py."""
    from pydantic import BaseModel

    from pocketcli.server.protocol import DeclaredSamplingFields, SamplingFields, generated_request_fields

    class WithoutMinP(BaseModel):
        temperature: float = 1.0

    generated = generated_request_fields(WithoutMinP)
    assert generated["min_p"] == (float, 0.0) and generated["seed"] == (int | None, None)
    assert "temperature" not in generated and "repeat_last_n" not in generated  # not an API field
    assert set(SamplingFields.model_fields) >= set(api_fields(SamplingParams))
    assert not generated_request_fields(DeclaredSamplingFields)  # today every one is written out, with its range
