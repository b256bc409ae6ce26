"""Tiny GGUF models with random weights, written by tests with the `gguf` writer.

They are real files llama.cpp can load, so our engine's numbers can be compared with
llama.cpp's on architectures whose real checkpoints are too big for CI. The vocabulary is a
small synthetic SentencePiece one (byte tokens plus a few hundred pieces).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT

__all__ = ["TinyLlama", "write_tiny_llama", "write_tiny_gemma3", "spm_vocab"]


def spm_vocab(n_pieces: int = 300, seed: int = 0) -> tuple[list[str], list[float], list[int]]:
    """<unk> <s> </s>, 256 byte tokens, then word pieces with decreasing scores."""
    rng = np.random.default_rng(seed)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0, 0.0, 0.0] + [0.0] * 256
    letters = "abcdefghijklmnopqrstuvwxyz"
    seen = set(tokens)
    pieces = ["▁"] + list(letters) + [f"▁{c}" for c in letters]
    while len(pieces) < n_pieces:
        n = int(rng.integers(2, 6))
        p = "".join(rng.choice(list(letters), n))
        pieces.append(p if rng.random() < 0.5 else "▁" + p)
    for i, p in enumerate(pieces):
        if p in seen:
            continue
        seen.add(p)
        tokens.append(p)
        types.append(1)
        scores.append(-float(i))
    return tokens, scores, types


@dataclass
class TinyLlama:
    """Shape and storage choices of a tiny llama; defaults exercise GQA and rope_freqs."""

    embd: int = 128
    layers: int = 3
    heads: int = 4
    kv_heads: int = 2
    ff: int = 256
    context: int = 2048
    rope_base: float = 10000.0
    rope_freqs: bool = True
    tied_output: bool = False
    seed: int = 1
    # tensor name suffix -> storage type; everything else is F32
    types: dict[str, QT] = field(
        default_factory=lambda: {
            "attn_q.weight": QT.Q8_0,
            "attn_k.weight": QT.F16,
            "attn_v.weight": QT.Q8_0,
            "attn_output.weight": QT.F16,
            "ffn_gate.weight": QT.Q8_0,
            "ffn_up.weight": QT.F16,
            "ffn_down.weight": QT.Q8_0,
            "token_embd.weight": QT.F16,
            "output.weight": QT.Q8_0,
        }
    )


def _add(w: gguf.GGUFWriter, name: str, data: np.ndarray, qtype: QT) -> None:
    data = data.astype(np.float32)
    if qtype == QT.F32:
        w.add_tensor(name, data)
    elif qtype == QT.F16:
        w.add_tensor(name, data.astype(np.float16))
    else:
        q = gguf.quants.quantize(data, qtype)
        w.add_tensor(name, q, raw_dtype=qtype)


def _vocab(w: gguf.GGUFWriter) -> int:
    tokens, scores, types = spm_vocab()
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    return len(tokens)


def write_tiny_llama(path: str | Path, spec: TinyLlama | None = None) -> Path:
    s = spec or TinyLlama()
    rng = np.random.default_rng(s.seed)
    path = Path(path)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama")
    head_dim = s.embd // s.heads
    w.add_context_length(s.context)
    w.add_embedding_length(s.embd)
    w.add_block_count(s.layers)
    w.add_feed_forward_length(s.ff)
    w.add_head_count(s.heads)
    w.add_head_count_kv(s.kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(s.rope_base)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(1)
    n_vocab = _vocab(w)

    def t(name: str, *shape: int, scale: float = 0.08) -> None:
        # numpy shape is the reverse of ggml's: weights are [out, in] here, [in, out] in ggml.
        data = rng.standard_normal(shape).astype(np.float32) * scale
        _add(
            w,
            name,
            data,
            s.types.get(name.split(".", 2)[-1] if name.startswith("blk.") else name, QT.F32),
        )

    t("token_embd.weight", n_vocab, s.embd, scale=0.5)
    for i in range(s.layers):
        p = f"blk.{i}."
        _add(w, p + "attn_norm.weight", 1 + 0.1 * rng.standard_normal(s.embd), QT.F32)
        t(p + "attn_q.weight", s.heads * head_dim, s.embd)
        t(p + "attn_k.weight", s.kv_heads * head_dim, s.embd)
        t(p + "attn_v.weight", s.kv_heads * head_dim, s.embd)
        t(p + "attn_output.weight", s.embd, s.heads * head_dim)
        _add(w, p + "ffn_norm.weight", 1 + 0.1 * rng.standard_normal(s.embd), QT.F32)
        t(p + "ffn_gate.weight", s.ff, s.embd)
        t(p + "ffn_up.weight", s.ff, s.embd)
        t(p + "ffn_down.weight", s.embd, s.ff)
    _add(w, "output_norm.weight", 1 + 0.1 * rng.standard_normal(s.embd), QT.F32)
    if not s.tied_output:
        t("output.weight", n_vocab, s.embd, scale=0.3)
    if s.rope_freqs:
        # Llama 3.1-style per-frequency divisors: 1 for high frequencies, larger for low ones.
        factors = np.linspace(1.0, 8.0, head_dim // 2).astype(np.float32)
        _add(w, "rope_freqs.weight", factors, QT.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_tiny_gemma3(path: str | Path, layers: int = 6, window: int = 16, seed: int = 2) -> Path:
    """A tiny gemma3 with a short sliding window (to test past-the-window behaviour)."""
    rng = np.random.default_rng(seed)
    path = Path(path)
    embd, heads, kv_heads, head_dim, ff = 64, 2, 1, 32, 128
    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_name("tiny-gemma3")
    w.add_context_length(1024)
    w.add_embedding_length(embd)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(1_000_000.0)
    w.add_sliding_window(window)
    w.add_layer_norm_rms_eps(1e-6)
    n_vocab = _vocab(w)

    def t(name: str, *shape: int, qtype: QT = QT.F16, scale: float = 0.1) -> None:
        _add(w, name, rng.standard_normal(shape) * scale, qtype)

    def norm(name: str, n: int) -> None:
        _add(w, name, 1 + 0.1 * rng.standard_normal(n), QT.F32)

    t("token_embd.weight", n_vocab, embd, qtype=QT.Q8_0, scale=0.3)
    for i in range(layers):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight", embd)
        t(p + "attn_q.weight", heads * head_dim, embd)
        t(p + "attn_k.weight", kv_heads * head_dim, embd, qtype=QT.Q8_0)
        t(p + "attn_v.weight", kv_heads * head_dim, embd)
        norm(p + "attn_q_norm.weight", head_dim)
        norm(p + "attn_k_norm.weight", head_dim)
        t(p + "attn_output.weight", embd, heads * head_dim)
        norm(p + "post_attention_norm.weight", embd)
        norm(p + "ffn_norm.weight", embd)
        t(p + "ffn_gate.weight", ff, embd, qtype=QT.Q8_0)
        t(p + "ffn_up.weight", ff, embd)
        t(p + "ffn_down.weight", embd, ff)
        norm(p + "post_ffw_norm.weight", embd)
    norm("output_norm.weight", embd)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
