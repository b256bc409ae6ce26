"""llama.cpp as an alternative forward engine (through llama-cpp-python's low-level API).

For files whose architecture no Hearth plugin registers: `LlamaCppEngine` has the passes of
`ForwardEngine` (plan/run over a `PassInput` with per-sequence ids, a per-sequence cache for the
prompt cache, hidden states for embeddings), so Hearth's sampler, grammars, stop strings and
prompt-cache logic run on llama.cpp's logits; the runner serves it through the same interface
as its own engine (`hearth.runner.engine`).

Never import this package in a process that uses Hearth's own ggml engine (`hearth.engine.ml`):
both ship a libggml, and one process must hold only one of them. Importing the package itself is
cheap and loads nothing; `LlamaCppEngine` loads llama.cpp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["LlamaCppEngine", "LlamaCppLoadError", "LlamaCppTokenizer"]

if TYPE_CHECKING:
    from .engine import LlamaCppEngine
    from .library import LlamaCppLoadError
    from .tokenizer import LlamaCppTokenizer


def __getattr__(name: str) -> object:
    if name == "LlamaCppEngine":
        from .engine import LlamaCppEngine

        return LlamaCppEngine
    if name == "LlamaCppLoadError":
        from .library import LlamaCppLoadError

        return LlamaCppLoadError
    if name == "LlamaCppTokenizer":
        from .tokenizer import LlamaCppTokenizer

        return LlamaCppTokenizer
    raise AttributeError(name)
