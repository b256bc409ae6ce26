"""Real models' sizes without downloading them: GGUF files with random weights at a real
model's shapes and vocabulary size, quantized by llama.cpp's own quantizer, cached on disk.

    python bench/shapes.py --list
    python bench/shapes.py llama3.2-1b gemma3-4b     # write (once) and print the paths

Speed does not depend on the weights' values, only on the shapes and storage types, so a
benchmark on `llama3.1-8b` here measures what it would on the real Llama 3.1 8B Q4_K_M (the
same tensors, the same quantization mix that `llama-quantize Q4_K_M` picks). Every speed
benchmark takes `--shape NAME` (`add_model_arguments` / `model_from_args`).

The vocabulary is synthetic: a SentencePiece-style list (`<unk> <s> </s>`, 256 byte tokens,
then generated word pieces) of the real model's size, which both llama.cpp and Hearth load, so
the embedding and output layers have the real sizes; prompts tokenize into other (more)
tokens than with the real tokenizer, which only changes how text maps to token counts.

Writing: tensors are streamed one at a time as F16 (norms F32) from a pool of random values,
then `llama_model_quantize` (in a process of its own: never beside Hearth's ggml) writes the
Q4_K_M file and the F16 one is deleted. The 8B shape needs about 16 GB of free disk while it
is written and 4.7 GB after. Files live under `$HEARTH_BENCH_CACHE` (default
`~/.cache/hearth-bench/shapes`), named by shape and a hash of its definition.

To add a shape (a new architecture's plugin), `register(Shape(...))` or add it to `SHAPES`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
QUANTIZER = REPO / "app" / "plugins" / "testing" / "llamacpp_quantize.py"
_FORMAT = 1  # bump when the way files are written changes (renames every cached file)


@dataclass(frozen=True)
class Shape:
    """A model's shape as its GGUF file declares it. `quant` None: keep the written F16 file
    (for tiny models whose rows llama.cpp's K-quants cannot take)."""

    name: str
    architecture: str
    model: str  # the real model it stands for, and what differs
    embd: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ff: int
    vocab: int
    context: int = 8192
    rope_base: float = 10000.0
    rms_eps: float = 1e-5
    tied_output: bool = False
    qkv_bias: bool = False
    qk_norm: bool = False
    post_norms: bool = False  # Gemma's post-attention and post-FFN norms
    rope_freqs: bool = False  # Llama 3.1's per-frequency RoPE divisors
    experts: int = 0  # mixture of experts: experts per layer (0: a dense FFN of `ff`)
    experts_used: int = 0
    expert_ff: int = 0
    quant: str | None = "Q4_K_M"
    metadata: dict[str, Any] = field(default_factory=dict)  # more "<arch>.<key>" entries

    def key(self) -> str:
        """A short hash of the definition: a changed shape writes a new file."""
        text = json.dumps([_FORMAT, asdict(self)], sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    def parameters(self) -> int:
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        attn = self.embd * (q + 2 * kv) + q * self.embd
        if self.experts:
            ffn = self.experts * 3 * self.embd * self.expert_ff + self.experts * self.embd
        else:
            ffn = 3 * self.embd * self.ff
        io = self.vocab * self.embd * (1 if self.tied_output else 2)
        return self.layers * (attn + ffn) + io


SHAPES: dict[str, Shape] = {}


def register(shape: Shape) -> Shape:
    SHAPES[shape.name] = shape
    return shape


_LLAMA3 = {"rope_base": 500000.0, "rope_freqs": True, "context": 131072}
for _s in (
    Shape("tiny-llama", "llama", "a 2-layer 128-wide llama (per-token overhead)", embd=128,
          layers=2, heads=4, kv_heads=2, head_dim=32, ff=256, vocab=512, context=4096,
          quant=None),
    Shape("llama3.2-1b", "llama", "Llama 3.2 1B", embd=2048, layers=16, heads=32, kv_heads=8,
          head_dim=64, ff=8192, vocab=128256, tied_output=True, **_LLAMA3),
    Shape("llama3.2-3b", "llama", "Llama 3.2 3B", embd=3072, layers=28, heads=24, kv_heads=8,
          head_dim=128, ff=8192, vocab=128256, tied_output=True, **_LLAMA3),
    Shape("llama3.1-8b", "llama", "Llama 3.1 8B", embd=4096, layers=32, heads=32, kv_heads=8,
          head_dim=128, ff=14336, vocab=128256, **_LLAMA3),
    Shape("gemma3-1b", "gemma3", "Gemma 3 1B", embd=1152, layers=26, heads=4, kv_heads=1,
          head_dim=256, ff=6912, vocab=262144, context=32768, rope_base=1e6, rms_eps=1e-6,
          tied_output=True, qk_norm=True, post_norms=True,
          metadata={"attention.sliding_window": 512}),
    Shape("gemma3-4b", "gemma3", "Gemma 3 4B, the text part", embd=2560, layers=34, heads=8,
          kv_heads=4, head_dim=256, ff=10240, vocab=262208, context=131072, rope_base=1e6,
          rms_eps=1e-6, tied_output=True, qk_norm=True, post_norms=True,
          metadata={"attention.sliding_window": 1024, "rope.scaling.type": "linear",
                    "rope.scaling.factor": 8.0}),
    Shape("qwen2-1.5b", "qwen2", "Qwen2.5 1.5B", embd=1536, layers=28, heads=12, kv_heads=2,
          head_dim=128, ff=8960, vocab=151936, context=32768, rope_base=1e6, rms_eps=1e-6,
          tied_output=True, qkv_bias=True),
    Shape("qwen3-4b", "qwen3", "Qwen3 4B", embd=2560, layers=36, heads=32, kv_heads=8,
          head_dim=128, ff=9728, vocab=151936, context=40960, rope_base=1e6, rms_eps=1e-6,
          tied_output=True, qk_norm=True),
    Shape("qwen3moe-30b-a3b-8l", "qwen3moe", "Qwen3-30B-A3B with 8 of its 48 layers",
          embd=2048, layers=8, heads=32, kv_heads=4, head_dim=128, ff=6144, vocab=151936,
          context=40960, rope_base=1e6, rms_eps=1e-6, qk_norm=True, experts=128,
          experts_used=8, expert_ff=768),
):  # fmt: skip
    register(_s)


def cache_dir() -> Path:
    env = os.environ.get("HEARTH_BENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "hearth-bench" / "shapes"


def shape_path(shape: Shape, folder: Path | None = None) -> Path:
    suffix = shape.quant or "F16"
    return (folder or cache_dir()) / f"{shape.name}-{suffix}-{shape.key()}.gguf"


def vocabulary(n: int) -> tuple[list[str], list[float], list[int]]:
    """`n` tokens: `<unk> <s> </s>`, the 256 byte tokens, then distinct word pieces (a space
    mark and letters) with decreasing scores."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    letters = "abcdefghijklmnopqrstuvwxyz"
    pieces = ["▁", *letters, *(f"▁{c}" for c in letters)]
    i = 0
    while len(tokens) + len(pieces) < n:  # every string of 2+ letters in order, with and without ▁
        k, word = i + 26 + 1, ""
        while k:
            k, r = divmod(k - 1, 26)
            word = letters[r] + word
        pieces += [f"▁{word}", word]
        i += 1
    tokens += pieces[: n - len(tokens)]
    types += [1] * (n - len(types))
    scores = [0.0] * 259 + [-float(j) for j in range(n - 259)]
    return tokens, scores, types


def _tensors(s: Shape) -> list[tuple[str, tuple[int, ...], bool]]:
    """(name, numpy shape, is a matrix) of every tensor, in file order."""
    out: list[tuple[str, tuple[int, ...], bool]] = [("token_embd.weight", (s.vocab, s.embd), True)]
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    for i in range(s.layers):
        p = f"blk.{i}."
        out.append((p + "attn_norm.weight", (s.embd,), False))
        for name, rows in (("attn_q", q), ("attn_k", kv), ("attn_v", kv)):
            out.append((p + name + ".weight", (rows, s.embd), True))
            if s.qkv_bias:
                out.append((p + name + ".bias", (rows,), False))
        if s.qk_norm:
            out += [(p + "attn_q_norm.weight", (s.head_dim,), False),
                    (p + "attn_k_norm.weight", (s.head_dim,), False)]  # fmt: skip
        out.append((p + "attn_output.weight", (s.embd, q), True))
        if s.post_norms:
            out.append((p + "post_attention_norm.weight", (s.embd,), False))
        out.append((p + "ffn_norm.weight", (s.embd,), False))
        if s.experts:
            e, f = s.experts, s.expert_ff
            out += [(p + "ffn_gate_inp.weight", (e, s.embd), False),
                    (p + "ffn_gate_exps.weight", (e, f, s.embd), True),
                    (p + "ffn_up_exps.weight", (e, f, s.embd), True),
                    (p + "ffn_down_exps.weight", (e, s.embd, f), True)]  # fmt: skip
        else:
            out += [(p + "ffn_gate.weight", (s.ff, s.embd), True),
                    (p + "ffn_up.weight", (s.ff, s.embd), True),
                    (p + "ffn_down.weight", (s.embd, s.ff), True)]  # fmt: skip
        if s.post_norms:
            out.append((p + "post_ffw_norm.weight", (s.embd,), False))
    out.append(("output_norm.weight", (s.embd,), False))
    if not s.tied_output:
        out.append(("output.weight", (s.vocab, s.embd), True))
    if s.rope_freqs:
        out.append(("rope_freqs.weight", (s.head_dim // 2,), False))
    return out


def write_f16(shape: Shape, path: Path, seed: int = 0) -> Path:
    """Write `shape` with random weights, matrices F16 and the rest F32, one tensor at a
    time (memory: the largest tensor)."""
    import gguf
    import numpy as np

    from hearth.plugins.testing import add_spm_vocab

    rng = np.random.default_rng(seed)
    # Matrices take windows of one pool of normal values (values do not change speed).
    pool = (rng.standard_normal(1 << 22) * 0.02).astype(np.float16)
    w = gguf.GGUFWriter(str(path), shape.architecture)
    w.add_name(f"random {shape.model}")
    w.add_context_length(shape.context)
    w.add_embedding_length(shape.embd)
    w.add_block_count(shape.layers)
    w.add_feed_forward_length(shape.ff)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_key_length(shape.head_dim)
    w.add_value_length(shape.head_dim)
    w.add_rope_dimension_count(shape.head_dim)
    w.add_rope_freq_base(shape.rope_base)
    w.add_layer_norm_rms_eps(shape.rms_eps)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    if shape.experts:
        w.add_expert_count(shape.experts)
        w.add_expert_used_count(shape.experts_used)
        w.add_expert_feed_forward_length(shape.expert_ff)
    arch = shape.architecture
    for key, value in shape.metadata.items():
        if isinstance(value, bool):
            w.add_bool(f"{arch}.{key}", value)
        elif isinstance(value, int):
            w.add_uint32(f"{arch}.{key}", value)
        elif isinstance(value, float):
            w.add_float32(f"{arch}.{key}", value)
        else:
            w.add_string(f"{arch}.{key}", str(value))
    add_spm_vocab(w, vocabulary(shape.vocab))
    tensors = _tensors(shape)
    for name, dims, matrix in tensors:
        dtype = np.float16 if matrix else np.float32
        n = int(np.prod(dims))
        w.add_tensor_info(name, dims, np.dtype(dtype), n * np.dtype(dtype).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, dims, matrix in tensors:
        n = int(np.prod(dims))
        if matrix:
            start = int(rng.integers(0, len(pool) - 1))
            data = np.resize(pool[start:], n).reshape(dims)
        elif name == "rope_freqs.weight":
            data = np.linspace(1.0, 8.0, n, dtype=np.float32)
        elif name.endswith(".bias") or name.endswith("gate_inp.weight"):
            data = (rng.standard_normal(n) * 0.02).astype(np.float32).reshape(dims)
        else:  # norms
            data = (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)
        w.write_tensor_data(data)
        del data
    w.close()
    return path


def build(shape: Shape, folder: Path | None = None, threads: int | None = None) -> Path:
    """The cached file of `shape`, written (and quantized) first if absent."""
    out = shape_path(shape, folder)
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    if shape.quant is None:
        tmp = out.with_suffix(".part")
        write_f16(shape, tmp)
        tmp.rename(out)
        return out
    f16 = out.with_name(out.stem + ".f16.part")
    part = out.with_suffix(".part")
    try:
        print(f"writing {shape.name} ({shape.parameters() / 1e9:.2f}B parameters) as F16 ...",
              file=sys.stderr)  # fmt: skip
        write_f16(shape, f16)
        print(f"quantizing {shape.name} to {shape.quant} with llama.cpp ...", file=sys.stderr)
        cmd = [sys.executable, str(QUANTIZER), str(f16), str(part), shape.quant,
               str(threads or os.cpu_count() or 1)]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"llama.cpp could not quantize {shape.name}:\n{done.stderr[-3000:]}")
        part.rename(out)
    finally:
        f16.unlink(missing_ok=True)
        part.unlink(missing_ok=True)
    return out


def add_model_arguments(ap: argparse.ArgumentParser) -> None:
    """`--model PATH` and `--shape NAME` (one of SHAPES; exclusive)."""
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--model", default=None, help="a GGUF file (default: the default model)")
    group.add_argument(
        "--shape",
        default=None,
        choices=sorted(SHAPES),
        help="random weights at a real model's shapes (bench/shapes.py), written once",
    )


def model_from_args(args: argparse.Namespace) -> str:
    """The file a benchmark runs: `--model`, the `--shape`'s file (written if absent), or
    the default model."""
    if getattr(args, "shape", None):
        return str(build(SHAPES[args.shape]))
    if args.model:
        return str(args.model)
    sys.path.insert(0, str(REPO))
    from hearth.default_model import default_model_path

    return str(default_model_path())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="shapes to write (default: list them)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--folder", type=Path, default=None, help=f"default {cache_dir()}")
    ap.add_argument("--threads", type=int, default=None, help="for the quantizer")
    args = ap.parse_args()
    if args.list or not args.names:
        for s in SHAPES.values():
            path = shape_path(s, args.folder)
            have = f"{path.stat().st_size / 2**30:.2f} GiB" if path.exists() else "not written"
            print(f"{s.name:22}{s.architecture:10}{s.parameters() / 1e9:7.2f}B  {s.model} "
                  f"({have})")  # fmt: skip
        return
    unknown = [n for n in args.names if n not in SHAPES]
    if unknown:
        raise SystemExit(f"unknown shape(s) {', '.join(unknown)}; known: {', '.join(SHAPES)}")
    for name in args.names:
        print(build(SHAPES[name], args.folder, args.threads))


if __name__ == "__main__":
    main()
