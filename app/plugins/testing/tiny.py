"""Tiny GGUF models with random weights, written with the `gguf` writer.

They are real files llama.cpp loads, so a plugin's numbers can be compared with llama.cpp's
on an architecture whose real checkpoints are too big for a test. The vocabulary is a small
synthetic SentencePiece one (byte tokens plus a few hundred pieces).

    spec = TinyTransformer("qwen2", rope_base=1e6, rms_eps=1e-6, qkv_bias=True)
    path = write_tiny_model(tmp_path / "qwen2.gguf", spec)

For an architecture `TinyTransformer` does not describe, write the file yourself with
`gguf.GGUFWriter`, `add_spm_vocab` and `add_tensor`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT

__all__ = ["TinyTransformer", "add_spm_vocab", "add_tensor", "spm_vocab", "write_tiny_model"]


def spm_vocab(n_pieces: int = 300, seed: int = 0) -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types: `<unk> <s> </s>`, 256 byte tokens, then word pieces
    with decreasing scores."""
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


def add_spm_vocab(
    w: gguf.GGUFWriter, vocab: tuple[list[str], list[float], list[int]] | None = None
) -> int:
    """Write `vocab` (tokens, scores, token types; default `spm_vocab()`) as a SentencePiece
    tokenizer (BOS 1, EOS 2, UNK 0, BOS added); returns the vocabulary size."""
    tokens, scores, types = vocab if vocab is not None else spm_vocab()
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


def add_tensor(w: gguf.GGUFWriter, name: str, data: np.ndarray, qtype: QT = QT.F32) -> None:
    """Add `data` (numpy order: a matrix is `[out, in]`, ggml's `[in, out]`) stored as
    `qtype` (F32, F16 or a quantisation gguf can write, e.g. Q8_0)."""
    data = data.astype(np.float32)
    if qtype == QT.F32:
        w.add_tensor(name, data)
    elif qtype == QT.F16:
        w.add_tensor(name, data.astype(np.float16))
    else:
        w.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)


def _default_types() -> dict[str, QT]:
    return {
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


@dataclass
class TinyTransformer:
    """A decoder-only transformer with the GGUF tensor names Llama-like files use.

    Per layer: `attn_norm`, `attn_q/k/v` (+ `.bias` with `qkv_bias`), `attn_q_norm` and
    `attn_k_norm` (with `qk_norm`), `attn_output`, `post_attention_norm` (with `post_norms`),
    `ffn_norm`, `ffn_gate/up/down`, `post_ffw_norm` (with `post_norms`); then `output_norm`,
    `output` (unless `tied_output`) and `rope_freqs` (with `rope_freqs`). The defaults
    exercise GQA and mixed storage types. Norm weights are F32 and near 1.
    """

    architecture: str = "llama"
    embd: int = 128
    layers: int = 3
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 0  # 0: embd // heads
    ff: int = 256
    context: int = 2048
    rope_base: float = 10000.0
    rms_eps: float = 1e-5
    qkv_bias: bool = False
    qk_norm: bool = False
    post_norms: bool = False
    rope_freqs: bool = False
    tied_output: bool = False
    seed: int = 1
    weight_scale: float = 0.08  # standard deviation of matrices and biases
    embedding_scale: float = 0.5
    output_scale: float = 0.3
    default_type: QT = QT.F32
    # tensor name without "blk.N." -> storage type; others get `default_type`
    types: dict[str, QT] = field(default_factory=_default_types)
    # more "<architecture>.<key>" metadata, e.g. {"attention.sliding_window": 16}
    metadata: dict[str, Any] = field(default_factory=dict)
    chat_template: str | None = None  # written as tokenizer.chat_template


def _add_metadata(w: gguf.GGUFWriter, key: str, value: Any) -> None:
    if isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, int):
        w.add_uint32(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, str):
        w.add_string(key, value)
    else:
        w.add_array(key, list(value))


def write_tiny_model(path: str | Path, spec: TinyTransformer | None = None) -> Path:
    """Write `spec` (default: a tiny llama) to `path` with random weights from `spec.seed`."""
    s = spec or TinyTransformer()
    rng = np.random.default_rng(s.seed)
    path = Path(path)
    head_dim = s.head_dim or s.embd // s.heads
    w = gguf.GGUFWriter(str(path), s.architecture)
    w.add_name(f"tiny-{s.architecture}")
    w.add_context_length(s.context)
    w.add_embedding_length(s.embd)
    w.add_block_count(s.layers)
    w.add_feed_forward_length(s.ff)
    w.add_head_count(s.heads)
    w.add_head_count_kv(s.kv_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(s.rope_base)
    w.add_layer_norm_rms_eps(s.rms_eps)
    for key, value in s.metadata.items():
        _add_metadata(w, f"{s.architecture}.{key}", value)
    n_vocab = add_spm_vocab(w)
    if s.chat_template is not None:
        w.add_chat_template(s.chat_template)

    def matrix(name: str, *shape: int, scale: float = s.weight_scale) -> None:
        data = rng.standard_normal(shape).astype(np.float32) * scale
        key = name.split(".", 2)[-1] if name.startswith("blk.") else name
        add_tensor(w, name, data, s.types.get(key, s.default_type))

    def norm(name: str, n: int) -> None:
        add_tensor(w, name, 1 + 0.1 * rng.standard_normal(n))

    matrix("token_embd.weight", n_vocab, s.embd, scale=s.embedding_scale)
    q_dim, kv_dim = s.heads * head_dim, s.kv_heads * head_dim
    for i in range(s.layers):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight", s.embd)
        for name, rows in (("attn_q", q_dim), ("attn_k", kv_dim), ("attn_v", kv_dim)):
            matrix(p + name + ".weight", rows, s.embd)
            if s.qkv_bias:
                matrix(p + name + ".bias", rows)
        if s.qk_norm:
            norm(p + "attn_q_norm.weight", head_dim)
            norm(p + "attn_k_norm.weight", head_dim)
        matrix(p + "attn_output.weight", s.embd, q_dim)
        if s.post_norms:
            norm(p + "post_attention_norm.weight", s.embd)
        norm(p + "ffn_norm.weight", s.embd)
        matrix(p + "ffn_gate.weight", s.ff, s.embd)
        matrix(p + "ffn_up.weight", s.ff, s.embd)
        matrix(p + "ffn_down.weight", s.embd, s.ff)
        if s.post_norms:
            norm(p + "post_ffw_norm.weight", s.embd)
    norm("output_norm.weight", s.embd)
    if not s.tied_output:
        matrix("output.weight", n_vocab, s.embd, scale=s.output_scale)
    if s.rope_freqs:
        # Llama 3.1-style per-frequency divisors: 1 for high frequencies, larger for low ones.
        add_tensor(w, "rope_freqs.weight", np.linspace(1.0, 8.0, head_dim // 2))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
