"""Grammar-constrained decoding through llguidance: JSON schema, any JSON object, regex or Lark grammar.

One `StructuredOutputBackend` per engine maps our tokenizer onto llguidance's (built lazily: ~5 s for a 262k
vocabulary) and compiles grammars; each constrained sequence gets its own `TokenConstraint` (an LLMatcher) that
says which tokens may come next, advances on each accepted token and reports when the grammar is complete.
Masks for a whole batch are computed in one call and applied as a boolean mask before sampling.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from ..sampling_params import StructuredOutputParams

MAX_CACHED_GRAMMARS = 64
SPECIAL_PREFIX = b"\xff"  # llguidance's marker for tokens that only a grammar's special-token syntax may produce
# compact JSON: with free whitespace, small models drift into endless newlines/spaces between tokens
JSON_OPTIONS = {"whitespace_flexible": False}


class GrammarError(ValueError):
    """The schema, regex or grammar does not compile."""


def make_grammar(params: StructuredOutputParams) -> str:
    """The llguidance grammar text for a request's constraint."""
    import llguidance as llg

    if params.kind == "json_object":
        return llg.LLMatcher.grammar_from_json_schema({"type": "object"}, JSON_OPTIONS)
    if params.kind == "json_schema":
        try:
            return llg.LLMatcher.grammar_from_json_schema(params.spec, JSON_OPTIONS)
        except ValueError as exc:
            raise GrammarError(f"json_schema is not valid: {exc}") from None
    if params.kind == "regex":
        return llg.LLMatcher.grammar_from_regex(params.spec)
    return llg.LLMatcher.grammar_from_lark(params.spec)


def token_pieces(tokenizer, vocab_size: int) -> tuple[list[bytes], list[int]]:
    """Bytes of every token id up to the model's vocabulary size (padding rows: b"") and the special ids;
    special tokens get llguidance's 0xFF prefix so plain text in a grammar never matches them."""
    pieces, special_ids = [], []
    for token_id in range(vocab_size):
        if token_id >= tokenizer.vocab_size:
            pieces.append(b"")
        elif tokenizer.is_special(token_id):
            pieces.append(SPECIAL_PREFIX + tokenizer.token_to_piece(token_id, special=True))
            special_ids.append(token_id)
        else:
            pieces.append(tokenizer.token_to_piece(token_id))
    return pieces, special_ids


class _TokenizerAdapter:
    """What llguidance.TokenizerWrapper reads: token bytes, EOS/BOS ids and an encode callable."""

    def __init__(self, tokenizer, vocab_size: int):
        self._tokenizer = tokenizer
        self.tokens, self.special_token_ids = token_pieces(tokenizer, vocab_size)
        self.eos_token_id = tokenizer.eos_id
        self.bos_token_id = tokenizer.bos_id

    def __call__(self, text: str | bytes) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return self._tokenizer.encode(text, add_special=False, parse_special=False)


class TokenConstraint:
    """One sequence's grammar state. Speculative decoding can ask `validate_tokens` and undo with `rollback`."""

    def __init__(self, matcher):
        self.matcher = matcher

    def accept(self, token_id: int) -> bool:
        """Advance past a sampled token; False when the grammar did not allow it (the matcher is then stopped)."""
        return self.matcher.consume_token(token_id)

    @property
    def is_finished(self) -> bool:
        """The grammar is complete (or broken): nothing but end-of-sequence may follow."""
        return self.matcher.is_stopped()

    @property
    def error(self) -> str:
        return self.matcher.get_error()

    def validate_tokens(self, token_ids: list[int]) -> int:
        """How many of `token_ids`, in order, the grammar allows from the current state (state unchanged)."""
        return self.matcher.validate_tokens(token_ids)

    def rollback(self, num_tokens: int) -> bool:
        return self.matcher.rollback(num_tokens)

    def allowed_token_mask(self, vocab_size: int) -> np.ndarray:
        """bool [vocab_size]: which tokens may come next."""
        bitmask = np.frombuffer(self.matcher.compute_bitmask(), dtype=np.uint8)
        return np.unpackbits(bitmask, bitorder="little")[:vocab_size].view(bool)


class StructuredOutputBackend:
    def __init__(self, tokenizer, vocab_size: int):
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self._ll_tokenizer = None
        self._executor = None
        self._lock = threading.Lock()
        self._grammars: OrderedDict[StructuredOutputParams, str] = OrderedDict()

    @property
    def ll_tokenizer(self):
        """Built on first use (any thread); later calls reuse it."""
        with self._lock:
            if self._ll_tokenizer is None:
                import llguidance as llg

                adapter = _TokenizerAdapter(self.tokenizer, self.vocab_size)
                eos_ids = list(self.tokenizer.stop_token_ids) or None
                self._ll_tokenizer = llg.LLTokenizer(llg.TokenizerWrapper(adapter), n_vocab=self.vocab_size,
                                                     eos_token=eos_ids)
                self._executor = llg.LLExecutor()
            return self._ll_tokenizer

    def compile(self, params: StructuredOutputParams) -> str:
        """The checked grammar for `params` (cached); raises GrammarError with llguidance's message."""
        import llguidance as llg

        with self._lock:
            grammar = self._grammars.get(params)
        if grammar is not None:
            return grammar
        grammar = make_grammar(params)
        is_error, messages = llg.LLMatcher.validate_grammar_with_warnings(grammar, self.ll_tokenizer)
        if is_error:
            raise GrammarError(f"{params.kind} does not compile: {_first_line(messages[0])}")
        with self._lock:
            self._grammars[params] = grammar
            while len(self._grammars) > MAX_CACHED_GRAMMARS:
                self._grammars.popitem(last=False)
        return grammar

    def make_constraint(self, params: StructuredOutputParams) -> TokenConstraint:
        import llguidance as llg

        matcher = llg.LLMatcher(self.ll_tokenizer, self.compile(params), log_level=0)
        if matcher.is_error():
            raise GrammarError(f"{params.kind} does not compile: {_first_line(matcher.get_error())}")
        return TokenConstraint(matcher)

    def fill_allowed(self, constraints: list[TokenConstraint]) -> np.ndarray:
        """bool [len(constraints), vocab_size]: one mask per constraint, computed in one batched call."""
        from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask_par

        bitmask = allocate_token_bitmask(len(constraints), self.vocab_size)
        fill_next_token_bitmask_par(self._executor, [(c.matcher, i) for i, c in enumerate(constraints)], bitmask)
        bits = np.unpackbits(bitmask.view(np.uint8), axis=1, bitorder="little")
        return bits[:, :self.vocab_size].view(bool)


def _first_line(message: str) -> str:
    return message.strip().splitlines()[0] if message.strip() else "unknown error"

