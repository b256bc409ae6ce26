"""Testing a plugin: tiny GGUF files with random weights, and the conformance suite.

    from hearth.plugins.testing import TinyTransformer, run_conformance

    def test_conforms(tmp_path):
        run_conformance(TinyTransformer("qwen2", qkv_bias=True), tmp_path, llama_cpp=True)

* `TinyTransformer` / `write_tiny_model`: a small random Llama-like file of any architecture
  name (`tiny.py`); `add_spm_vocab` and `add_tensor` for files of another shape.
* `run_conformance`: parity with llama.cpp, batch vs token-by-token, several sequences in one
  batch, context shift, cache reuse (`conformance.py`); `CHECKS` names them.
* `run_oracle`, `compare`: llama.cpp in its own process, and the comparison (`parity.py`).
* `default_registry`: the architectures Hearth finds installed (is your entry point seen?).

Importing this module imports the engine but never llama.cpp (which runs in a subprocess).
"""

from ..registry import default_registry
from .conformance import (
    CHECKS,
    CheckResult,
    ConformanceError,
    ConformanceReport,
    Tolerances,
    run_conformance,
)
from .parity import (
    LLAMACPP_LOGITS,
    LlamaCppUnknownArchitectureError,
    compare,
    llamacpp_installed,
    run_oracle,
    teacher_forced,
)
from .tiny import TinyTransformer, add_spm_vocab, add_tensor, spm_vocab, write_tiny_model

__all__ = [
    "CHECKS",
    "LLAMACPP_LOGITS",
    "CheckResult",
    "ConformanceError",
    "ConformanceReport",
    "LlamaCppUnknownArchitectureError",
    "TinyTransformer",
    "Tolerances",
    "add_spm_vocab",
    "add_tensor",
    "compare",
    "default_registry",
    "llamacpp_installed",
    "run_conformance",
    "run_oracle",
    "spm_vocab",
    "teacher_forced",
    "write_tiny_model",
]
