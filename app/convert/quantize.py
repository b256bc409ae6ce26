"""Which GGML type each tensor gets when `hearth create --quantize` writes a model, and the
quantizer that turns one tensor into those bytes.

The policy is llama.cpp's (`llama_tensor_get_type` in `src/llama-quant.cpp`, llama-cpp-python
0.3.36's copy), for the schemes Hearth offers: the same type for every tensor that
`llama_model_quantize` picks when it quantizes an F16 file converted by llama.cpp's
`convert_hf_to_gguf.py`. Q4_K_M in short: 2-D `*.weight` tensors go to Q4_K, except the
output matrix (and the token embeddings when the model ties them to it) at Q6_K, `attn_v`
and `ffn_down` at Q6_K in the "more bits" layers (the first and last eighth, and every third
in between), and any matrix whose rows are not a whole number of blocks falls back (Q4_K ->
Q5_0, Q6_K -> Q8_0, then F16). 1-D tensors, norms and a few small tables stay as they are
(F32 or F16).

One difference, deliberate: a vision tower or projector in the same file (`v.*`, `mm.*`)
stays F16 (its 1-D tensors F32) and is left out of the layer counts. llama.cpp never sees
them there: it keeps the projector in its own mmproj file, which `llama-quantize` does not
touch.

The plan needs only names and shapes, and `quantize` takes one tensor at a time, so a
converter can stream a checkpoint tensor by tensor. K-quants come from ggml's own reference
quantizer (`ggml_quantize_chunk`, through the ggml library Hearth runs on), so the bytes are
llama.cpp's; so do Q8_0 and the other block types (the `gguf` package's numpy quantizer gives
the same Q8_0 bytes but at about a third of the speed).
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import ggml as g
import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QT

__all__ = ["SCHEMES", "TensorInfo", "parse_scheme", "quantize", "quantize_plan"]

SCHEMES = ("q8_0", "q4_K_M", "f16", "f32")

# The type llama.cpp's ftype quantizes to before the per-tensor policy.
_DEFAULT_TYPE = {"q8_0": QT.Q8_0, "q4_K_M": QT.Q4_K, "f16": QT.F16, "f32": QT.F32}

# Kept at F32 by convert_hf_to_gguf.py whatever the output type (1-D tensors and norms
# too); the GGUF names as substrings.
_ALWAYS_F32 = (
    "ffn_gate_inp.",
    "ffn_gate_inp_shexp.",
    "position_embd.",
    "token_types.",
    "ssm_conv1d.",
    "shortconv.conv.",
)

# Never quantized by llama_model_quantize (`tensor_allows_quantization`), as substrings.
_NOT_QUANTIZED = (
    "ffn_gate_inp.weight",
    "ffn_gate_tid2eid.weight",
    "altup",
    "laurel",
    "per_layer_model_proj",
    "ssm_conv1d",
    "shortconv.conv.weight",
    "indexer.k_proj.weight",
    "indexer.q_proj.weight",
    "time_mix_first.weight",
    "time_mix_w0.weight",
    "time_mix_w1.weight",
    "time_mix_w2.weight",
    "time_mix_v0.weight",
    "time_mix_v1.weight",
    "time_mix_v2.weight",
    "time_mix_a0.weight",
    "time_mix_a1.weight",
    "time_mix_a2.weight",
    "time_mix_g1.weight",
    "time_mix_g2.weight",
    "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight",
    "attn_rel_b.weight",
    ".position_embd",
    "sam.pos_embd",
    "sam.neck.",
    "sam.net_",
    ".rel_pos",
    ".patch_embd",
    ".patch_merger",
    "a.rvq.codebook",
    "mm.a.code_embd",
)

_VISION_PREFIXES = ("v.", "mm.")
# Architectures whose loader calls a model of this many layers LLM_TYPE_70B (the attn_v rule
# reads it); llama only with grouped-query attention and without 8 experts.
_70B_LAYERS = {"llama": 80, "qwen2": 80, "olmo": 80, "deci": 80, "jais2": 68}
_BLOCK = re.compile(r"blk\.(\d+)\.")


@dataclass(frozen=True)
class TensorInfo:
    """A tensor as the plan sees it: its GGUF name and shape in numpy order (a matrix is
    `[rows, row length]`; ggml's `ne` reversed)."""

    name: str
    shape: tuple[int, ...]


def parse_scheme(text: str) -> str:
    """The scheme named by `text` (any case: `Q4_K_M`, `q4_k_m`), spelled as in SCHEMES."""
    for scheme in SCHEMES:
        if text.strip().lower() == scheme.lower():
            return scheme
    raise ValueError(
        f"unknown quantization {text!r}; Hearth can write {', '.join(SCHEMES)} "
        "(upper or lower case)"
    )


# -- the plan -------------------------------------------------------------------------------


def _layer(name: str) -> int:
    """The block number of a `blk.N.` tensor (-1 for the others)."""
    m = _BLOCK.match(name)
    return int(m.group(1)) if m else -1


def _category(name: str) -> str:
    """llama.cpp's `tensor_get_category`: broad roles by name."""
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    for key, cat in (
        # the fused and MLA value projections are attn_v to the policy (llama.cpp's
        # `category_is_attn_v`; its own ATTENTION_QKV branch is never reached)
        ("attn_qkv.weight", "attn_v"),
        ("attn_kv_b.weight", "attn_v"),
        ("attn_v.weight", "attn_v"),
        ("attn_k.weight", "attn_k"),
        ("attn_q.weight", "attn_q"),
        ("attn_output.weight", "attn_output"),
        ("ffn_up", "ffn_up"),
        ("ffn_gate", "ffn_gate"),
        ("ffn_down", "ffn_down"),
    ):
        if key in name:
            return cat
    return "other"


def _is_vision(name: str) -> bool:
    return name.startswith(_VISION_PREFIXES)


def _float_type(t: TensorInfo, scheme: str) -> QT:
    """What convert_hf_to_gguf.py writes for `t` at F16 (F32 for `f32`): what a quantized
    scheme keeps where it does not quantize."""
    if scheme == "f32" or len(t.shape) <= 1 or t.name.endswith("_norm.weight"):
        return QT.F32
    if any(key in t.name for key in _ALWAYS_F32) or not t.name.endswith(".weight"):
        return QT.F32
    return QT.F16


def _allows_quantization(t: TensorInfo) -> bool:
    """llama.cpp's `tensor_allows_quantization` (default parameters)."""
    name = t.name
    if len(t.shape) < 2 or not name.endswith("weight") or "_norm.weight" in name:
        return False
    if name in ("position_embd.weight", "token_types.weight"):
        return False
    return not any(key in name for key in _NOT_QUANTIZED)


def _more_bits(i_layer: int, n_layers: int) -> bool:
    return (
        i_layer < n_layers // 8
        or i_layer >= 7 * n_layers // 8
        or (i_layer - n_layers // 8) % 3 == 2
    )


def _fallback(t: TensorInfo, qtype: QT) -> QT:
    """llama.cpp's `tensor_type_fallback`: a type whose blocks divide the rows."""
    ncols = t.shape[-1]
    if ncols % GGML_QUANT_SIZES[qtype][0] == 0:
        return qtype
    smaller = {QT.Q4_K: QT.Q5_0, QT.Q5_K: QT.Q5_1, QT.Q6_K: QT.Q8_0}.get(qtype, qtype)
    return smaller if ncols % GGML_QUANT_SIZES[smaller][0] == 0 else QT.F16


@dataclass
class _Model:
    """What llama.cpp's policy reads of the model besides names: its counters and hparams."""

    arch: str
    n_layer: int
    n_expert: int
    tied: bool  # no output.weight: the token embeddings double as the output matrix
    is_70b: bool
    n_attention_wv: int
    i_attention_wv: int = 0
    i_ffn_down: int = 0


def _model(tensors: Sequence[TensorInfo], arch: str) -> _Model:
    """`tensors` without vision ones."""
    names = {t.name: t for t in tensors}
    n_layer = 1 + max((_layer(t.name) for t in tensors), default=-1)
    n_expert = max(
        (t.shape[0] for t in tensors if len(t.shape) == 3 and "_exps." in t.name), default=0
    )
    q, k = names.get("blk.0.attn_q.weight"), names.get("blk.0.attn_k.weight")
    gqa = q is not None and k is not None and k.shape[0] < q.shape[0]
    return _Model(
        arch=arch,
        n_layer=n_layer,
        n_expert=n_expert,
        tied="output.weight" not in names,
        is_70b=n_layer == _70B_LAYERS.get(arch) and (arch != "llama" or gqa and n_expert != 8),
        n_attention_wv=sum(_category(t.name) == "attn_v" for t in tensors),
    )


def _policy_type(t: TensorInfo, qtype: QT, scheme: str, m: _Model) -> QT:
    """llama.cpp's `llama_tensor_get_type_impl` for the Q8_0 and Q4_K_M file types."""
    cat = _category(t.name)
    q4km = scheme == "q4_K_M"
    if cat == "output" or (m.tied and cat == "token_embd"):
        if m.arch == "falcon" or t.shape[-1] % GGML_QUANT_SIZES[qtype][0] != 0:
            return QT.Q8_0
        return qtype if qtype == QT.Q8_0 else QT.Q6_K
    if cat == "attn_v":
        if q4km and _more_bits(m.i_attention_wv, m.n_attention_wv):
            qtype = QT.Q6_K
        if m.is_70b and qtype in (QT.Q3_K, QT.Q4_K):
            qtype = QT.Q5_K
        if m.n_expert == 8:
            qtype = QT.Q8_0
        m.i_attention_wv += 1
    elif cat == "attn_k" and m.n_expert == 8:
        qtype = QT.Q8_0
    elif cat == "ffn_down":
        i_layer = _layer(t.name) if m.n_expert > 1 else m.i_ffn_down
        if q4km and m.arch == "falcon":
            qtype = (
                QT.Q6_K
                if i_layer < m.n_layer // 16
                else QT.Q5_K
                if _more_bits(i_layer, m.n_layer)
                else QT.Q4_K
            )
        elif q4km and _more_bits(i_layer, m.n_layer):
            qtype = QT.Q6_K
        m.i_ffn_down += 1
    elif cat == "attn_output" and q4km and m.arch != "falcon" and m.n_expert == 8:
        qtype = QT.Q5_K
    return qtype


def quantize_plan(scheme: str, tensors: Sequence[TensorInfo], arch: str) -> dict[str, QT]:
    """The GGML type of every tensor of a model written as `scheme` (`arch` is the GGUF
    architecture name: llama.cpp treats `falcon` and 70B-sized models apart). The plan
    reads names and shapes only; layer counters follow llama.cpp's tensor order (by block
    number, then name), whatever the order of `tensors`."""
    scheme = parse_scheme(scheme)
    plan = {t.name: _float_type(t, scheme) for t in tensors}
    if len(plan) != len(tensors):
        raise ValueError("the tensor list names a tensor twice")
    if scheme in ("f16", "f32"):
        return plan
    text = sorted(
        (t for t in tensors if not _is_vision(t.name)), key=lambda t: (_layer(t.name), t.name)
    )
    model = _model(text, arch)
    default = _DEFAULT_TYPE[scheme]
    for t in text:
        if _allows_quantization(t):
            plan[t.name] = _fallback(t, _policy_type(t, default, scheme, model))
    return plan


# -- the quantizer --------------------------------------------------------------------------

_SLAB = 1 << 21  # elements converted to F32 and quantized at once (8 MiB of floats)
_FLOAT_INPUTS = (np.float32, np.float16, np.float64)


def _threads(threads: int | None) -> int:
    return max(1, threads if threads is not None else (os.cpu_count() or 1))


def quantize(array: np.ndarray, qtype: QT, *, threads: int | None = None) -> np.ndarray:
    """`array` (F32, F16 or F64 values, numpy order) stored as `qtype`, as the `gguf`
    writer takes it: float arrays for F32/F16, else uint8 `[..., bytes per row]` (pass
    `raw_dtype=qtype`). Block types come from ggml's reference quantizers, `threads` slabs
    of rows at a time (default: every core); at most a few slabs are held as F32 beside
    the input and the result. ValueError when the rows are not whole blocks, the type needs
    an importance matrix, or the values are not floats."""
    if array.dtype.type not in _FLOAT_INPUTS:
        raise ValueError(f"cannot quantize {array.dtype} values; give F32 or F16 ones")
    if array.ndim == 0:
        raise ValueError("cannot quantize a scalar; give at least one row")
    if qtype == QT.F32:
        return np.ascontiguousarray(array, dtype=np.float32)
    if qtype == QT.F16:
        return np.ascontiguousarray(array, dtype=np.float16)
    if qtype not in GGML_QUANT_SIZES or qtype == QT.BF16:
        raise ValueError(f"Hearth does not write {qtype.name} tensors")
    block, _ = GGML_QUANT_SIZES[qtype]
    n = array.shape[-1]
    if n % block:
        raise ValueError(
            f"rows of {n} values are not a whole number of {qtype.name} blocks of {block}"
        )
    if g.ggml_quantize_requires_imatrix(int(qtype)):
        raise ValueError(f"{qtype.name} needs an importance matrix, which Hearth does not make")
    g.ggml_quantize_init(int(qtype))
    rows = array.reshape(-1, n)
    row_bytes = int(g.ggml_row_size(int(qtype), n))
    out = np.empty((rows.shape[0], row_bytes), dtype=np.uint8)
    step = max(1, _SLAB // n)

    def slab(start: int) -> None:
        src = np.ascontiguousarray(rows[start : start + step], dtype=np.float32)
        dst = out[start : start + len(src)]
        done = g.ggml_quantize_chunk(
            int(qtype), src.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
            dst.ctypes.data, 0, len(src), n, None,
        )  # fmt: skip
        if done != dst.nbytes:
            raise RuntimeError(f"ggml wrote {done} bytes of {qtype.name} for {dst.nbytes}")

    starts = range(0, rows.shape[0], step)
    workers = min(_threads(threads), len(starts))
    if workers == 1:
        for start in starts:
            slab(start)
    else:  # ctypes lets go of the GIL while ggml quantizes
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(slab, starts))
    return out.reshape(*array.shape[:-1], row_bytes)
