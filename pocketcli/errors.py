"""Errors that mean the user asked for something we cannot do: the CLI prints one line and exits 2.

Kept free of heavy imports (no engine, no numpy): every command module imports it, `pocket --help` included."""


class UsageError(ValueError):
    """A bad combination of command-line inputs."""


# ValueError covers gguf_loader's ModelFileError and UnsupportedModelError, the engine's PromptTooLongError,
# tokenizer errors, unsupported quant types and invalid sampling settings (tests/cli/test_light_commands.py)
USER_ERRORS = (UsageError, ValueError, OSError)
