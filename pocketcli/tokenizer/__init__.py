"""Tokenizers built from GGUF vocabularies (SentencePiece-style and byte-level BPE), streaming detokenization
and chat templates."""
from .chat_template import ChatTemplate, make_chat_template
from .detokenizer import StreamingDetokenizer
from .errors import TokenizerError
from .tokenizer import Tokenizer
from .vocab import Vocab

__all__ = ["ChatTemplate", "StreamingDetokenizer", "Tokenizer", "TokenizerError", "Vocab", "make_chat_template"]
