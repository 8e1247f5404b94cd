"""`reasoning_content`: split `<think>...</think>` out of a reply, whole or as streamed deltas.

Models whose template opens the think block in the prompt (DeepSeek-R1, Qwen3 with thinking on) start their
reply inside it: `starts_in_reasoning` covers that, so text before `</think>` is reasoning.
"""
from __future__ import annotations

from .tool_parsers.base import partial_suffix_length

THINK_START, THINK_END = "<think>", "</think>"
REASONING_PARSERS = ("think", "deepseek_r1", "qwen3")  # names `--reasoning-parser` takes; all use think tags


def uses_think_tags(template_source: str) -> bool:
    return THINK_END in template_source


def prompt_opens_reasoning(prompt_text: str) -> bool:
    """The rendered prompt ends inside an open think block (the reply starts as reasoning)."""
    tail = prompt_text.rstrip()
    return tail.endswith(THINK_START)


class ReasoningSplitter:
    """Feed text as it comes; get (reasoning delta, content delta) back, never a half tag in either."""

    def __init__(self, starts_in_reasoning: bool = False):
        self.in_reasoning = starts_in_reasoning
        self.had_reasoning = starts_in_reasoning
        self.seen_content = False  # once content has started, a later <think> is just text
        self.pending = ""
        self.after_reasoning = False

    def feed(self, text: str) -> tuple[str, str]:
        self.pending += text
        reasoning, content = [], []
        while True:
            tag = THINK_END if self.in_reasoning else (None if self.seen_content else THINK_START)
            if tag is None:
                content.append(self.pending)
                self.pending = ""
                break
            index = self.pending.find(tag)
            if index < 0:
                keep = partial_suffix_length(self.pending, (tag,))
                self._emit(self.pending[:len(self.pending) - keep], reasoning, content)
                self.pending = self.pending[len(self.pending) - keep:]
                break
            if tag == THINK_START and self.pending[:index].strip():  # text came first: no reasoning block
                self.seen_content = True
                continue
            self._emit(self.pending[:index], reasoning, content)
            self.pending = self.pending[index + len(tag):]
            self.after_reasoning = self.in_reasoning
            self.in_reasoning = not self.in_reasoning
            self.had_reasoning = True
        return "".join(reasoning), "".join(content)

    def _emit(self, text: str, reasoning: list[str], content: list[str]) -> None:
        if self.in_reasoning:
            reasoning.append(text)
            self.after_reasoning = True
            return
        if self.after_reasoning:  # the blank line between </think> and the answer is not content
            text = text.lstrip()
        if text:
            self.after_reasoning = False
            self.seen_content = self.seen_content or bool(text.strip())
            content.append(text)

    def flush(self) -> tuple[str, str]:
        out, self.pending = self.pending, ""
        return (out, "") if self.in_reasoning else ("", out)


def split_reasoning(text: str, starts_in_reasoning: bool = False) -> tuple[str | None, str]:
    """(reasoning or None when there was none, content) of a whole reply."""
    splitter = ReasoningSplitter(starts_in_reasoning)
    reasoning, content = splitter.feed(text)
    more_reasoning, more_content = splitter.flush()
    reasoning += more_reasoning
    content += more_content
    return (reasoning if splitter.had_reasoning else None), content
