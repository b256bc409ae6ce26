"""Pre-tokenizers for byte-level BPE: the regexes chosen by `tokenizer.ggml.pre`.

A pre-tokenizer is a list of regexes applied one after another, the way llama.cpp does it:
each regex splits every piece produced so far into its matches *and* the text between matches,
so nothing is ever dropped. Byte-pair merges then run inside each piece separately.

The patterns follow the `tokenizer.json` files of the model families, in the form llama.cpp
uses (case-insensitive contractions spelled out, Tekken/GPT-4o upper/lower classes written as
"a letter that is not ASCII lower/upper case"), so results match llama.cpp's. Character classes
come from the `regex` module's Unicode tables; llama.cpp 0.3.x ships Unicode 15 tables, so
characters assigned in later Unicode versions may split differently.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import regex

__all__ = ["PreTokenizer", "get_pretokenizer", "KNOWN_PRE"]

log = logging.getLogger(__name__)

_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_WS_TAIL = r"\s*[\r\n]+|\s+(?!\S)|\s+"

LLAMA3 = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|" + _WS_TAIL
)
QWEN2 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|" + _WS_TAIL
QWEN35 = (
    _CONTRACTIONS
    + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|"
    + _WS_TAIL
)
# GPT-2's regex; the text between matches (a lone whitespace before a non-space) is kept as its
# own piece, which is what the original's trailing `\s+` does.
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
STARCODER = (r"\p{N}", GPT2)
FALCON = (r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"[0-9][0-9][0-9]")
DEFAULT = (r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]")
# Non-ASCII characters are written as escapes: several of them (e.g. U+1F7D, U+2126) would be
# changed by Unicode normalization in editors, which breaks the ranges. llama.cpp runs regexes
# without \p{..} on text whose non-ASCII whitespace is replaced by \x0b, so whitespace never
# matches a literal range there: the ranges below leave it out ("--\s", U+3000 dropped).
_CJK = r"(?V1)[[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]--\s]+"
_KANA = r"\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff"
DEEPSEEK_LLM = (
    r"[\r\n]",
    r"\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293"
    r"\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c"
    r"\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5"
    r"\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
    r"\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59"
    r"\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc"
    r"\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107"
    r"\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    r"\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee"
    r"\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e"
    r"\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f"
    r"\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
    r"\U000118a0-\U000118df\U0001e900-\U0001e943]+",
    r"\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3001-\u3002]+",
    r"\s+\Z",
    _CJK,
    r"\p{N}+",
)
DEEPSEEK_CODER = (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}")
DEEPSEEK3 = (
    r"\p{N}{1,3}",
    "[" + _KANA + "]+",
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
    r"| ?[\p{P}\p{S}]+[\r\n]*|" + _WS_TAIL,
)
BLOOM = (r" ?[^(\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+",)
VIKING = (BLOOM[0], r"\p{N}")
# "Upper" = a letter that is not a-z, "lower" = a letter that is not A-Z (llama.cpp's reading).
_UP = r"[\p{L}--[a-z]]"
_LO = r"[\p{L}--[A-Z]]"
TEKKEN = (
    rf"(?V1)[^\r\n\p{{L}}\p{{N}}]?{_UP}*{_LO}+|[^\r\n\p{{L}}\p{{N}}]?{_UP}+{_LO}*|\p{{N}}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|" + _WS_TAIL
)
GPT4O = (
    rf"(?V1)[^\r\n\p{{L}}\p{{N}}]?{_UP}*{_LO}+{_CONTRACTIONS}?"
    rf"|[^\r\n\p{{L}}\p{{N}}]?{_UP}+{_LO}*{_CONTRACTIONS}?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|" + _WS_TAIL
)
SEED_CODER = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|" + _WS_TAIL
)
BAILINGMOE = (
    r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"
)
EXAONE_MOE = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+"
)


@dataclass(frozen=True)
class PreTokenizer:
    """How one `tokenizer.ggml.pre` family splits text before BPE merges.

    `ignore_merges`: a piece that is already a vocabulary token becomes that token directly.
    `clean_spaces`: decoding removes spaces before punctuation and some contractions
    (llama.cpp's `clean_up_tokenization_spaces`). `add_bos`: the default for files that do not
    set `tokenizer.ggml.add_bos_token`.
    """

    name: str
    patterns: tuple[str, ...]
    ignore_merges: bool = False
    clean_spaces: bool = True
    add_bos: bool = False

    def compiled(self) -> list[regex.Pattern[str]]:
        return _compile(self.patterns)

    def split(self, text: str) -> list[str]:
        """Split `text` into the pieces BPE merges run on (concatenated, they give `text`)."""
        pieces = [text]
        for pat in self.compiled():
            nxt: list[str] = []
            for piece in pieces:
                found = pat.findall(piece)
                if sum(map(len, found)) == len(piece):
                    nxt.extend(found)
                    continue
                last = 0
                for m in pat.finditer(piece):
                    start, end = m.span()
                    if start > last:
                        nxt.append(piece[last:start])
                    if end > start:
                        nxt.append(piece[start:end])
                    last = end
                if last < len(piece):
                    nxt.append(piece[last:])
            pieces = nxt
        return pieces


_COMPILED: dict[tuple[str, ...], list[regex.Pattern[str]]] = {}


def _compile(patterns: tuple[str, ...]) -> list[regex.Pattern[str]]:
    out = _COMPILED.get(patterns)
    if out is None:
        out = [regex.compile(p) for p in patterns]
        _COMPILED[patterns] = out
    return out


def _p(name: str, patterns: str | Sequence[str], **kw: bool) -> PreTokenizer:
    return PreTokenizer(name, (patterns,) if isinstance(patterns, str) else tuple(patterns), **kw)


_L3 = {"ignore_merges": True, "add_bos": True}
_NC = {"clean_spaces": False}

# tokenizer.ggml.pre value -> pre-tokenizer (names and flags as llama.cpp reads them).
KNOWN_PRE: dict[str, PreTokenizer] = {}
for _names, _pats, _kw in [
    (
        ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"),
        LLAMA3,
        _L3,
    ),
    (("dbrx", "smaug-bpe"), LLAMA3, {}),
    (("chatglm-bpe",), LLAMA3, {}),
    (("glm4",), LLAMA3, {"ignore_merges": True}),
    (("default",), DEFAULT, {}),
    (("falcon",), FALCON, {}),
    (("deepseek-llm",), DEEPSEEK_LLM, _NC),
    (("deepseek-coder",), DEEPSEEK_CODER, _NC),
    (("deepseek-v3", "hunyuan-dense"), DEEPSEEK3, _NC),
    (("starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"), STARCODER, {}),
    (("command-r", "smollm"), STARCODER, _NC),
    (
        (
            "gpt-2",
            "phi-2",
            "jina-es",
            "jina-de",
            "gigachat",
            "jina-v2-es",
            "jina-v2-de",
            "a.x-4.0",
            "mellum",
            "modern-bert",
            "mpt",
            "olmo",
            "jais",
            "exaone4",
            "jina-v1-en",
            "jina-v2-code",
            "roberta-bpe",
        ),
        GPT2,
        {},
    ),
    (("trillion", "granite-docling"), GPT2, _NC),
    (
        ("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open", "grok-2"),
        QWEN2,
        _NC,
    ),
    (("stablelm2", "megrez"), QWEN2, {}),
    (("qwen35",), QWEN35, _NC),
    (("poro-chat",), BLOOM, _NC),
    (("bloom", "gpt3-finnish"), BLOOM, {}),
    (("viking",), VIKING, _NC),
    (("tekken",), TEKKEN, {"ignore_merges": True, "add_bos": True, "clean_spaces": False}),
    (("gpt-4o", "llama4", "kanana2", "minimax-m2"), GPT4O, _NC),
    (("seed-coder",), SEED_CODER, _NC),
    (("bailingmoe", "bailingmoe2", "llada-moe"), BAILINGMOE, _NC),
    (("exaone-moe",), EXAONE_MOE, {}),
]:
    for _name in _names:
        KNOWN_PRE[_name] = _p(_name, _pats, **_kw)


def get_pretokenizer(name: str) -> PreTokenizer:
    """The pre-tokenizer for a `tokenizer.ggml.pre` value.

    A missing value means "default" (as in llama.cpp); an unknown one falls back to the
    Llama 3 regex with a warning, since most recent BPE models use a variant of it.
    """
    if not name:
        log.warning("tokenizer.ggml.pre is missing; using the 'default' BPE pre-tokenizer")
        return KNOWN_PRE["default"]
    pre = KNOWN_PRE.get(name)
    if pre is None:
        log.warning("unknown pre-tokenizer '%s'; using the Llama 3 regex instead", name)
        return PreTokenizer(name, (LLAMA3,))
    return pre
