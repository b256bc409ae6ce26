"""bench/shapes.py: a file written at a model's shape is what llama.cpp reads back (its sizes,
its vocabulary, the Q4_K_M mix its own quantizer chose), and Hearth loads it too."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import shapes  # noqa: E402

SMALL = shapes.Shape(
    "test-llama", "llama", "a small llama", embd=256, layers=2, heads=4, kv_heads=2,
    head_dim=64, ff=512, vocab=1000, tied_output=True, rope_freqs=True, rope_base=500000.0,
)  # fmt: skip

_LLAMACPP = """
import json, sys
import llama_cpp
from llama_cpp import Llama
m = Llama(sys.argv[1], n_ctx=64, verbose=False)
print(json.dumps({"vocab": m.n_vocab(), "embd": m.n_embd(),
                  "layers": llama_cpp.llama_model_n_layer(m.model),
                  "piece": m.detokenize([600]).decode()}))
"""


@pytest.mark.slow
def test_a_shape_is_what_llamacpp_reads(tmp_path: Path) -> None:
    path = shapes.build(SMALL, tmp_path, threads=2)
    assert path.exists() and not list(tmp_path.glob("*.part"))  # the F16 file is gone
    out = subprocess.run(
        [sys.executable, "-c", _LLAMACPP, str(path)], capture_output=True, text=True, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    tokens, _, _ = shapes.vocabulary(SMALL.vocab)
    assert got["vocab"] == SMALL.vocab and got["embd"] == SMALL.embd
    assert got["layers"] == SMALL.layers
    assert got["piece"] == tokens[600].replace("▁", " ")
    import gguf

    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(path).tensors}
    assert types["blk.0.attn_q.weight"] == "Q4_K"  # llama-quantize's Q4_K_M mix
    assert types["blk.0.ffn_down.weight"] in ("Q6_K", "Q4_K")
    assert shapes.build(SMALL, tmp_path) == path  # cached: not written again

    from hearth.plugins.registry import load_installed_model

    loaded = load_installed_model(str(path), num_threads=1)
    try:
        assert loaded.tokenizer.vocab_size == SMALL.vocab
    finally:
        loaded.close()


def test_the_table() -> None:
    for name in ("llama3.2-1b", "llama3.2-3b", "llama3.1-8b", "gemma3-1b", "gemma3-4b"):
        assert name in shapes.SHAPES
    # Parameter counts of the real models (text part), as their model cards give them.
    assert round(shapes.SHAPES["llama3.2-1b"].parameters() / 1e9, 2) == 1.24
    assert round(shapes.SHAPES["llama3.1-8b"].parameters() / 1e9, 2) == 8.03
    assert round(shapes.SHAPES["gemma3-1b"].parameters() / 1e9, 1) == 1.0
    tokens, scores, types = shapes.vocabulary(262144)
    assert len(tokens) == len(set(tokens)) == len(scores) == len(types) == 262144
