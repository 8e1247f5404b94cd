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


class ThinkingStream:
    """Turns streamed pieces into ('thinking' | 'answer', text) deltas for a plain terminal: each character
    once, in order, never half a tag (a tail that may grow into `</think>` waits for the next piece)."""

    def __init__(self):
        self.text = ""
        self.num_thinking_shown = 0
        self.num_answer_shown = 0

    def feed(self, piece: str) -> list[tuple[str, str]]:
        self.text += piece
        if not self.text.strip():  # leading whitespace may come before `<think>`: wait
            return []
        split = split_thinking(self.text, streaming=True)
        if split.thinking is not None and self.num_answer_shown and not self.num_thinking_shown:
            split = ThinkingSplit(None, self.text)  # a section closed after text already shown as answer: keep it
        thinking = without_partial_close_tag(split.thinking or "") if split.is_thinking else split.thinking or ""
        deltas = []
        if len(thinking) > self.num_thinking_shown:
            deltas.append(("thinking", thinking[self.num_thinking_shown:]))
            self.num_thinking_shown = len(thinking)
        if len(split.answer) > self.num_answer_shown:
            deltas.append(("answer", split.answer[self.num_answer_shown:]))
            self.num_answer_shown = len(split.answer)
        return deltas


def without_partial_close_tag(thinking: str) -> str:
    for size in range(min(len(CLOSE_TAG) - 1, len(thinking)), 0, -1):
        if CLOSE_TAG.startswith(thinking[-size:]):
            return thinking[:-size]
    return thinking
