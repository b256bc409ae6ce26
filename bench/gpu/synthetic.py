"""A stand-in for the default model when its pieces did not travel: a gemma3 file of Gemma 3
270M's layer shapes (18 layers, width 640, 4 query heads and 1 KV head of 256, FFN 2048,
sliding window 512 with every sixth layer global), random weights, Q8_0 matrices, and the
plugin kit's small SentencePiece vocabulary (so the output layer is small: speed figures on it
are not the default model's).

    python bench/gpu/synthetic.py OUT.gguf
"""

from __future__ import annotations

import sys

from gguf import GGMLQuantizationType as QT

from hearth.plugins.testing import TinyTransformer, write_tiny_model


def gemma3_270m_shape() -> TinyTransformer:
    return TinyTransformer(
        "gemma3",
        embd=640,
        layers=18,
        heads=4,
        kv_heads=1,
        head_dim=256,
        ff=2048,
        context=32768,
        rope_base=1_000_000.0,
        rms_eps=1e-6,
        qk_norm=True,
        post_norms=True,
        tied_output=True,
        weight_scale=0.05,
        embedding_scale=0.5,
        default_type=QT.Q8_0,
        types={},
        metadata={"attention.sliding_window": 512},
    )


if __name__ == "__main__":
    write_tiny_model(sys.argv[1], gemma3_270m_shape())
