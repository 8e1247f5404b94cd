"""The one error type of the tokenizer package."""


class TokenizerError(ValueError):
    """A vocabulary or template this package cannot build or use (names the offending value)."""
