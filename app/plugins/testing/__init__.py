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
* `sample_images`: test pictures of several formats and modes (`pictures.py`);
  `llamacpp_converter`/`run_llamacpp_converter`: llama.cpp's own Hugging Face converter, to
  make files to compare with (`llamacpp_convert.py`).

A plugin's own test helpers live in its package (Gemma 3's tiny vision model:
`hearth_gemma3.testing`).

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
from .llamacpp_convert import (
    LLAMACPP_VERSION,
    ConverterUnavailableError,
    llamacpp_converter,
    run_llamacpp_converter,
)
from .parity import (
    LLAMACPP_LOGITS,
    LlamaCppUnknownArchitectureError,
    compare,
    llamacpp_installed,
    run_oracle,
    teacher_forced,
)
from .pictures import sample_images
from .tiny import TinyTransformer, add_spm_vocab, add_tensor, spm_vocab, write_tiny_model

__all__ = [
    "CHECKS",
    "LLAMACPP_VERSION",
    "LLAMACPP_LOGITS",
    "CheckResult",
    "ConformanceError",
    "ConformanceReport",
    "ConverterUnavailableError",
    "LlamaCppUnknownArchitectureError",
    "TinyTransformer",
    "Tolerances",
    "add_spm_vocab",
    "add_tensor",
    "compare",
    "default_registry",
    "llamacpp_converter",
    "llamacpp_installed",
    "run_conformance",
    "run_llamacpp_converter",
    "run_oracle",
    "sample_images",
    "spm_vocab",
    "teacher_forced",
    "write_tiny_model",
]
