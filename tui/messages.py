"""Small messages the engine thread posts to the chat screen."""
from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from pocketcli.chat.session import ReplyStats
from pocketcli.compile_progress import CompileProgress


@dataclass
class ModelLoading(Message):
    model: str


@dataclass
class ModelLoaded(Message):
    model: str


@dataclass
class ModelFailed(Message):
    error: str


@dataclass
class KernelsCompiling(Message):
    progress: CompileProgress  # is_done: the last of a burst of compiles


@dataclass
class ReplyChunk(Message):
    text: str


@dataclass
class ReplyFinished(Message):
    stats: ReplyStats | None


@dataclass
class ReplyFailed(Message):
    error: str
