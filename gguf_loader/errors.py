"""Errors raised while opening a model file: each carries one clear line for the user."""


class ModelFileError(ValueError):
    """The model file is missing, not a GGUF file, truncated or otherwise unusable."""


class UnsupportedModelError(ValueError):
    """The file is valid but describes something we do not run (architecture, quant type)."""
