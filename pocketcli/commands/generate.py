"""`pocket generate`: one-shot generation streamed to stdout, timings to stderr."""
from __future__ import annotations

import argparse
import dataclasses
import functools
import io
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator

from ..errors import UsageError
from ..sampling_params import SamplingParams
from .common import (add_engine_arguments, add_model_argument, add_sampling_arguments, make_engine, read_prompt,
                     sampling_settings)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("generate", help="generate text from a prompt")
    add_model_argument(p)
    p.add_argument("-p", "--prompt", default=None, help="prompt text")
    p.add_argument("-f", "--file", default=None, help="read the prompt from a file")
    add_sampling_arguments(p, "generate")
    add_engine_arguments(p, "generate")
    p.add_argument("--chat", action="store_true", help="wrap the prompt as a user message in the chat template")
    p.add_argument("--system", default=None, help="system message (with --chat)")
    p.add_argument("--messages", default=None, metavar="FILE",
                   help="JSON file with a list of {role, content} messages, rendered with the chat template")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    p.set_defaults(run=run)


def make_sampling_params(args: argparse.Namespace, metadata: dict | None = None) -> SamplingParams:
    """The flags' settings; with the model's metadata, its recommended ones fill the flags not given."""
    return SamplingParams(**sampling_settings(args, metadata))


def read_messages(path: str) -> list[dict]:
    try:
        with open(path, encoding="utf-8") as handle:
            messages = json.load(handle)
    except OSError as exc:
        raise UsageError(f"cannot read messages file {path}: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"messages file {path} is not valid JSON: {exc}") from None
    if not (isinstance(messages, list) and messages and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages)):
        raise UsageError(f"messages file {path} must hold a non-empty list of {{\"role\", \"content\"}} objects")
    return messages


def chat_messages(args: argparse.Namespace, prompt: str | None) -> list[dict] | None:
    if args.messages:
        return read_messages(args.messages)
    if not args.chat:
        return None
    messages = ([{"role": "system", "content": args.system}] if args.system else [])
    return messages + [{"role": "user", "content": prompt}]


def encode_prompt(engine, args: argparse.Namespace, prompt: str | None) -> list[int]:
    messages = chat_messages(args, prompt)
    if messages is None:
        return engine.tokenizer.encode(prompt, add_special=True, parse_special=True)
    from ..chat.session import encode_messages

    return encode_messages(engine, messages)


def sampling_report(params: SamplingParams) -> dict:
    """The settings a model may recommend, as this run used them."""
    from ..sampling_defaults import SAMPLING_FIELDS

    return {field: getattr(params, field) for field in SAMPLING_FIELDS}


def speculative_stats(engine) -> dict:
    """{"speculative": acceptance counters} when speculative decoding ran (bonus token: see SpecStats)."""
    if engine.speculative is None:
        return {}
    return {"speculative": {"method": engine.config.spec, **engine.speculative.stats.as_dict()}}


def generate(engine, prompt_ids: list[int], params: SamplingParams, compiles, show_text: bool) -> list:
    """The generation's chunks, the engine run by an EngineLoop (its thread owns it, as in chat and serve); with
    show_text their text streams to stdout, held back while kernels compile where stderr shares its terminal or file
    (the progress line would cut into it). Ctrl-C aborts the request and stops the loop."""
    from ..engine.engine_loop import EngineLoop, Request

    chunks: list = []
    engine_loop = EngineLoop(engine, log_step_errors=False).start()  # an error ends the run as one line
    try:
        stream = engine_loop.stream(Request(prompt_ids, params))
        texts = stream_texts(stream, chunks)
        for text in compiles.stream_after_compiles(texts) if shares_terminal_or_file() else texts:
            if show_text and text:
                sys.stdout.write(text)
                sys.stdout.flush()
    finally:
        engine_loop.stop()
    return chunks


def shares_terminal_or_file() -> bool:
    """stdout and stderr go to one place (a terminal, `2>&1`): text is then held back while kernels compile, or the
    progress line would cut into it. Apart (a pipe), the first token goes out at once: a first run's decode
    kernels compile right after it (commands/first_run.py) and would hold it back by ~30 s."""
    try:
        out, err = os.fstat(sys.stdout.fileno()), os.fstat(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):  # a capture in tests: hold, as before
        return True
    return (out.st_dev, out.st_ino) == (err.st_dev, err.st_ino)


def stream_texts(chunks: Iterable, seen: list) -> Iterator[str]:
    """Each chunk's text; the chunks themselves kept in seen."""
    for chunk in chunks:
        seen.append(chunk)
        yield chunk.text


REHEARSAL_TOKENS = 1  # a first run's rehearsal: up to its first token; the decode steps compile in a side child


def rehearse(args: argparse.Namespace, prompt: str | None) -> None:
    """This run's request, cut to a few tokens, its output dropped: a first run does it in child processes
    (pocketcli/commands/first_run.py), so that its kernels compile there and this process loads them from the cache."""
    engine = make_engine(args)
    params = make_sampling_params(args, engine.model_file.metadata)
    params = dataclasses.replace(params, max_tokens=min(params.max_tokens, REHEARSAL_TOKENS))
    engine.add_request(encode_prompt(engine, args, prompt), params)
    while engine.has_unfinished():
        engine.step()


def rehearse_decode(args: argparse.Namespace, prompt: str | None) -> None:
    """A first run's side rehearsal (first_run.py): the decode step's kernels, beside the children that rehearse
    up to the first token. Where the model has the fused decode layer, they compile from the weights' types
    (engine/decode_step_ahead.py), and the rest of a decode step is the first token's (embedding, head, sampling),
    which the chain compiles; otherwise (and with --spec, whose steps verify drafts) a decode is rehearsed:
    the prompt cut to its first token, then one more token, sampled as this run samples."""
    from .first_run import rehearse_decode_step

    config = _rehearsal_config(args)
    if rehearse_decode_step(config) and not config.spec:
        return
    engine = make_engine(args)
    params = make_sampling_params(args, engine.model_file.metadata)
    engine.add_request(encode_prompt(engine, args, prompt)[:1] or [0],
                       dataclasses.replace(params, max_tokens=2, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()


def rehearse_decode_tail(args: argparse.Namespace, prompt: str | None) -> None:
    """A first run's tail rehearsal (first_run.py): the decode step's kernels the side child would compile last
    (engine/decode_step_ahead.py), from the weights' types."""
    from ..engine.decode_step_ahead import compile_decode_step_ahead

    compile_decode_step_ahead(_rehearsal_config(args), is_tail=True)


def _rehearsal_config(args: argparse.Namespace):
    """The EngineConfig of this run's flags, as make_engine would build it."""
    from ..registry import resolve_model
    from .common import engine_config

    return engine_config(args, resolve_model(args.model))


def run(args: argparse.Namespace) -> int:
    from .first_run import compile_first_run_kernels, hold_decode_for_side_child, side_child_wait_seconds

    params = make_sampling_params(args)  # bad flags fail before the model loads
    prompt = None if args.messages else read_prompt(args)
    from ..registry import resolve_model

    rehearsal = functools.partial(rehearse, args, prompt)
    side_rehearsal = functools.partial(rehearse_decode, args, prompt) if params.max_tokens > 1 else None
    tail_rehearsal = functools.partial(rehearse_decode_tail, args, prompt) if params.max_tokens > 1 else None
    code = compile_first_run_kernels(args, resolve_model(args.model), rehearsal, side_rehearsal,
                                     tail_rehearsal)  # cold cache only
    if code:
        return code
    from ..compile_progress_line import report_compiles_to_stderr

    with report_compiles_to_stderr() as compiles:  # kernels compile in the load and the first steps (cold cache)
        load_started = time.perf_counter()
        engine = make_engine(args)
        load_seconds = time.perf_counter() - load_started
        hold_decode_for_side_child(engine)  # a first run's side child may still be saving the decode step's kernels
        params = make_sampling_params(args, engine.model_file.metadata)
        prompt_ids = encode_prompt(engine, args, prompt)
        chunks = generate(engine, prompt_ids, params, compiles, show_text=not args.json)
    pieces, last = [chunk.text for chunk in chunks], chunks[-1]
    token_ids = [token_id for chunk in chunks for token_id in chunk.token_ids]
    stats = last.stats
    timings = {"load_s": round(load_seconds, 3), "prompt_s": round(stats.prompt_seconds, 3),
               "decode_s": round(stats.decode_seconds, 3),
               "prompt_tokens_per_s": round(stats.prompt_tokens_per_second, 2),
               "decode_tokens_per_s": round(stats.decode_tokens_per_second, 2)}
    if args.json:
        print(json.dumps({"text": "".join(pieces), "token_ids": token_ids, "prompt_tokens": len(prompt_ids),
                          "completion_tokens": len(token_ids), "finish_reason": last.finish_reason,
                          "timings": timings, "sampling": sampling_report(params), **speculative_stats(engine)},
                         ensure_ascii=False))
    else:
        sys.stdout.write("\n")
        decode_rate = f"{timings['decode_tokens_per_s']:.1f} tok/s" if len(token_ids) > 1 else "n/a"
        compiled_s = compiles.compiled_seconds + side_child_wait_seconds()  # a first run's side child's too
        compiling = (f" | these timings include {compiled_s:.1f} s of kernel compiling (first run)"
                     if compiled_s >= 0.05 else "")
        print(f"load {timings['load_s']:.2f} s | prompt {len(prompt_ids)} tok, "
              f"{timings['prompt_tokens_per_s']:.1f} tok/s | decode {len(token_ids)} tok, "
              f"{decode_rate} | finish: {last.finish_reason}{compiling}", file=sys.stderr)
    return 0
