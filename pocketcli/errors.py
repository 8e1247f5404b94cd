"""Errors that mean the user asked for something we cannot do: the CLI prints one line and exits 2."""
from gguf_loader import ModelFileError, UnsupportedModelError

from .engine.llm_engine import PromptTooLongError


class UsageError(ValueError):
    """A bad combination of command-line inputs."""


# ValueError covers tokenizer errors, unsupported quant types and invalid sampling settings
USER_ERRORS = (ModelFileError, UnsupportedModelError, PromptTooLongError, UsageError, ValueError, OSError)
