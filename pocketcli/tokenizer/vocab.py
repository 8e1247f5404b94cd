"""The vocabulary read from GGUF metadata: tokens, scores, attributes, special ids and flags (llama_vocab::load).

No Python object per token: texts are read on demand from the metadata's string array, text -> id is a
TokenIndex and the scores stay a float32 array (as str/int/float objects, a 262k vocabulary costs ~60 MiB).
"""
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .errors import TokenizerError
from .pre_tokenizer import PreTokenizerSpec, find_pre_tokenizer
from .token_attr import SPECIAL_ATTRS, TokenAttr, attrs_from_token_types
from .token_index import TokenIndex
from .token_texts import TokenTexts

KEY = "tokenizer.ggml."
MODEL_KINDS = {"llama": "spm", "gpt2": "bpe"}

# special-id keys in llama.cpp's reading order (later keys win, e.g. the deprecated prefix/suffix/middle ids)
_SPECIAL_ID_KEYS = (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("eot", "eot_token_id"),
                    ("eom", "eom_token_id"), ("unk", "unknown_token_id"), ("sep", "seperator_token_id"),
                    ("pad", "padding_token_id"), ("mask", "mask_token_id"), ("fim_pre", "fim_pre_token_id"),
                    ("fim_suf", "fim_suf_token_id"), ("fim_mid", "fim_mid_token_id"), ("fim_pad", "fim_pad_token_id"),
                    ("fim_rep", "fim_rep_token_id"), ("fim_sep", "fim_sep_token_id"), ("fim_pre", "prefix_token_id"),
                    ("fim_suf", "suffix_token_id"), ("fim_mid", "middle_token_id"))
_DEFAULT_IDS = {"spm": {"bos": 1, "eos": 2, "unk": 0}, "bpe": {"bos": 11, "eos": 11}}

# texts llama.cpp recognises when the file does not name the id (and forces to CONTROL)
_DETECTED_TEXTS = {
    "eot": ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
            "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"),
    "eom": ("<|eom_id|>",),
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
                "<|code_prefix|>", "<|prefix|>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
                "<|code_suffix|>", "<|suffix|>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
                "<|code_middle|>", "<|middle|>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}
# texts of end-of-generation tokens (llama.cpp's special_eog_ids)
_EOG_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
              "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
              "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
              "<｜end▁of▁sentence｜>", "[e~[")

# gpt-oss (harmony) markers that llama.cpp turns into user-defined tokens so they always render
_ALWAYS_RENDERED_TEXTS = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")


@dataclass
class Vocab:
    kind: str  # "spm" | "bpe"
    tokens: TokenTexts
    token_to_id: TokenIndex  # a read-only Mapping[str, int]
    scores: Sequence[float]
    attrs: np.ndarray  # int32 TokenAttr flags per token
    special_ids: dict[str, int | None]
    eog_ids: frozenset[int]
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    clean_spaces: bool
    pre: PreTokenizerSpec | None
    merges: Sequence[str] = field(default_factory=list)
    special_ids_longest_first: list[int] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.tokens)

    def attr(self, token_id: int) -> int:
        return int(self.attrs[token_id])

    @classmethod
    def from_metadata(cls, metadata: dict) -> "Vocab":
        kind, pre = _model_kind(metadata)
        tokens = _read_tokens(metadata)
        attrs = attrs_from_token_types(metadata.get(KEY + "token_type"), len(tokens))
        token_to_id = TokenIndex(tokens)  # duplicate texts: the last id wins, as in llama.cpp
        special_ids = _read_special_ids(metadata, kind, len(tokens))
        _detect_special_ids(special_ids, token_to_id, attrs)
        _mark_unused(tokens, attrs)
        for text in _ALWAYS_RENDERED_TEXTS:
            if text in token_to_id:
                attrs[token_to_id[text]] = TokenAttr.USER_DEFINED
        vocab = cls(kind=kind, tokens=tokens, token_to_id=token_to_id, scores=_read_scores(metadata, len(tokens)),
                    attrs=attrs, special_ids=special_ids, eog_ids=_find_eog_ids(special_ids, token_to_id, attrs),
                    pre=pre, merges=metadata.get(KEY + "merges") or [],
                    clean_spaces=bool(pre and pre.clean_spaces), add_space_prefix=kind == "spm",
                    add_bos=kind == "spm" or bool(pre and pre.add_bos), add_eos=False)
        _read_flags(vocab, metadata)
        vocab.special_ids_longest_first = _special_ids_longest_first(tokens, attrs)
        return vocab


def _model_kind(metadata: dict) -> tuple[str, PreTokenizerSpec | None]:
    model = metadata.get(KEY + "model")
    kind = MODEL_KINDS.get(model)
    if kind is None:
        raise TokenizerError(f"unknown tokenizer model {model!r} (tokenizer.ggml.model); supported: "
                             + ", ".join(sorted(MODEL_KINDS)))
    if kind == "bpe":
        if not metadata.get(KEY + "merges"):
            raise TokenizerError("BPE vocabulary has no tokenizer.ggml.merges")
        return kind, find_pre_tokenizer(metadata.get(KEY + "pre"))
    return kind, None


def _read_tokens(metadata: dict) -> TokenTexts:
    tokens = metadata.get(KEY + "tokens")
    if tokens is None or len(tokens) == 0:
        raise TokenizerError("GGUF metadata has no tokenizer.ggml.tokens")
    return TokenTexts(tokens)


def _read_scores(metadata: dict, num_tokens: int) -> Sequence[float]:
    """A float32 memoryview: its items read as Python floats (fast in the SPM merge loop), and the file's
    scores are not copied."""
    scores = metadata.get(KEY + "scores")
    values = np.zeros(num_tokens, dtype=np.float32) if scores is None else np.asarray(scores, dtype=np.float32)
    return memoryview(np.ascontiguousarray(values[:num_tokens])).cast("B").cast("f")  # numpy exports "=f"


def _read_special_ids(metadata: dict, kind: str, num_tokens: int) -> dict[str, int | None]:
    defaults = _DEFAULT_IDS[kind]
    ids = {name: defaults.get(name) for name, _ in _SPECIAL_ID_KEYS}
    ids = {name: (i if i is not None and i < num_tokens else None) for name, i in ids.items()}
    for name, key in _SPECIAL_ID_KEYS:
        value = metadata.get(KEY + key)
        if value is not None and 0 <= int(value) < num_tokens:
            ids[name] = int(value)
    return ids


def _detect_special_ids(ids: dict[str, int | None], token_to_id: Mapping[str, int], attrs: np.ndarray) -> None:
    for name, texts in _DETECTED_TEXTS.items():
        if ids[name] is not None:
            continue
        found = next((token_to_id[t] for t in texts if t in token_to_id), None)
        if found is not None:
            ids[name] = found
            attrs[found] |= TokenAttr.CONTROL


def _mark_unused(tokens: TokenTexts, attrs: np.ndarray) -> None:
    """Control tokens named like "<unused42>" are UNUSED too."""
    ids = np.array(tokens.indices_containing("unused"), dtype=np.int64)
    ids = ids[(attrs[ids] & TokenAttr.CONTROL) != 0]
    attrs[ids] |= TokenAttr.UNUSED


def _find_eog_ids(ids: dict[str, int | None], token_to_id: Mapping[str, int], attrs: np.ndarray) -> frozenset[int]:
    eog = {ids[name] for name in ("fim_pad", "fim_rep", "fim_sep", "eos", "eot", "eom") if ids[name] is not None}
    for text in _EOG_TEXTS:
        token_id = token_to_id.get(text)
        if token_id is not None:
            eog.add(token_id)
            attrs[token_id] |= TokenAttr.CONTROL
    _drop_false_eogs(eog, token_to_id, attrs)
    return frozenset(eog)


def _drop_false_eogs(eog: set[int], token_to_id: Mapping[str, int], attrs: np.ndarray) -> None:
    """llama.cpp's exceptions: <|end|> is not EOG next to <|return|>+<|call|> (or <|calls|>+<|flush|>),
    and </s> is a normal token in vocabs that have <|tool_response> or <|plamo:eos|>."""
    eog_texts = {text: token_to_id[text] for text in _EOG_TEXTS + ("<|plamo:eos|>",)
                 if text in token_to_id and token_to_id[text] in eog}
    has_call = "<|call|>" in eog_texts or "<|calls|>" in eog_texts
    if "<|end|>" in eog_texts and has_call and ("<|return|>" in eog_texts or "<|flush|>" in eog_texts):
        eog.discard(eog_texts["<|end|>"])
        attrs[eog_texts["<|end|>"]] = TokenAttr.USER_DEFINED
    if "</s>" in eog_texts and ("<|tool_response>" in eog_texts or "<|plamo:eos|>" in eog_texts):
        eog.discard(eog_texts["</s>"])
        attrs[eog_texts["</s>"]] = TokenAttr.NORMAL


def _read_flags(vocab: Vocab, metadata: dict) -> None:
    for attr_name, key in (("add_bos", "add_bos_token"), ("add_eos", "add_eos_token"),
                           ("add_space_prefix", "add_space_prefix")):
        value = metadata.get(KEY + key)
        if value is not None:
            setattr(vocab, attr_name, bool(value))


def _special_ids_longest_first(tokens: Sequence[str], attrs: np.ndarray) -> list[int]:
    special = np.flatnonzero(attrs & SPECIAL_ATTRS).tolist()
    # llama.cpp sorts by UTF-8 length; equal lengths keep id order here (its sort is unstable)
    return sorted(special, key=lambda i: -len(tokens[i].encode("utf-8")))
