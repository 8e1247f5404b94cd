"""The `<think>…</think>` section reasoning models (Qwen3, DeepSeek-R1, QwQ) write before their answer, split
from the answer so the chat app can show it collapsed, live while the reply streams."""
from __future__ import annotations

from dataclasses import dataclass

OPEN_TAG, CLOSE_TAG = "<think>", "</think>"


@dataclass(frozen=True)
class ThinkingSplit:
    thinking: str | None  # None: the reply has no thinking section
    answer: str
    is_thinking: bool = False  # the section is still open (the model is thinking now)


def split_thinking(text: str, streaming: bool = False) -> ThinkingSplit:
    """Thinking and answer of `text`. A reply may also start inside the section (the chat template wrote
    `<think>` itself) and only close it. With `streaming`, a tail that may still grow into `<think>` is
    held back, so the answer never shows half a tag."""
    body = text.lstrip()
    if body.startswith(OPEN_TAG):
        return split_after_open(body[len(OPEN_TAG):])
    if CLOSE_TAG in text:
        thinking, _, answer = text.partition(CLOSE_TAG)
        return ThinkingSplit(thinking.strip(), answer.lstrip())
    if streaming and body and OPEN_TAG.startswith(body):
        return ThinkingSplit(None, "")
    return ThinkingSplit(None, text)


def split_after_open(rest: str) -> ThinkingSplit:
    thinking, closed, answer = rest.partition(CLOSE_TAG)
    if not closed:
        return ThinkingSplit(rest.strip(), "", is_thinking=True)
    return ThinkingSplit(thinking.strip(), answer.lstrip())


def thinking_title(split: ThinkingSplit) -> str:
    words = len((split.thinking or "").split())
    return f"Thinking… ({words} words)" if split.is_thinking else f"Thought for {words} words"
