"""Test helpers of the Llama 3.2 Vision plugin: a tiny random model (transformers'), GGUF
files of its encoder, and the reference patches the mllama tests compare with.

    model = tiny_mllama(TinyMllamaVision())                 # transformers' model, F32, eval
    tensors = vision_tensors(model.model.vision_model, model.model.multi_modal_projector)
    write_vision_gguf(path, tensors, vision_keys(model.config.vision_config), layout="ollama")

`vision_tensors` and `vision_keys` are the plugin's converter (`hearth_mllama.convert`:
Ollama's names, keys and repacks) applied to the encoder alone. `write_vision_gguf` writes
them with `mllama.vision.*` keys, either as the one-file layout (`layout="ollama"`) or as the
projector file of Ollama's registry layout (`layout="projector"`: `ln1`, `ln2`, `attn_out`,
and fc1 named `ffn_down`, fc2 `ffn_up`, as Ollama's former `llama/mllama.cpp` reads them).
`write_text_gguf` makes that layout's text file from a one-file model: its keys and tensors
without the encoder's.

`meta_semantics` and `meta_cross_attention` patch transformers' model to Meta's reference
(the encoder's intermediate features are layer inputs; text rows before the image get no
cross-attention contribution), the oracle the mllama tests compare with;
`transformers_cross_attention` undoes the second patch within a `with` block.

Importing this module is cheap: torch and transformers are imported by the functions that
need them (they are test dependencies of Hearth, not runtime ones).
"""

from __future__ import annotations

import contextlib
import re
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .convert import MllamaConverter

__all__ = [
    "TinyMllamaVision",
    "meta_cross_attention",
    "meta_semantics",
    "random_png",
    "reference_states",
    "tiny_mllama",
    "transformers_cross_attention",
    "vision_keys",
    "vision_tensors",
    "write_text_gguf",
    "write_vision_gguf",
]


@dataclass(frozen=True)
class TinyMllamaVision:
    """Sizes and seed of the tiny model (image 56 in 14-pixel patches: 17 positions per tile,
    padded to 24; fc1 wider than the hidden size so its orientation is checked)."""

    image_size: int = 56
    patch_size: int = 14
    max_num_tiles: int = 4
    hidden: int = 32
    heads: int = 2
    ffn: int = 48
    layers: int = 4
    global_layers: int = 2
    intermediate: tuple[int, ...] = (0, 2)
    text_hidden: int = 64
    text_layers: int = 4
    cross_attention_layers: tuple[int, ...] = (1, 3)
    vocab: int = 128
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def tiny_mllama(spec: TinyMllamaVision) -> Any:
    """transformers' `MllamaForConditionalGeneration` of `spec`'s sizes, every parameter
    random (fixed seed; gates too, so that each gate's tanh matters), F32, eval."""
    import torch
    from transformers import MllamaConfig, MllamaForConditionalGeneration

    vision = {
        "hidden_size": spec.hidden,
        "attention_heads": spec.heads,
        "intermediate_size": spec.ffn,
        "num_hidden_layers": spec.layers,
        "num_global_layers": spec.global_layers,
        "intermediate_layers_indices": list(spec.intermediate),
        "vision_output_dim": spec.hidden * (len(spec.intermediate) + 1),
        "image_size": spec.image_size,
        "patch_size": spec.patch_size,
        "max_num_tiles": spec.max_num_tiles,
        **spec.extra,
    }
    text = {
        "vocab_size": spec.vocab,
        "hidden_size": spec.text_hidden,
        "intermediate_size": 2 * spec.text_hidden,
        "num_hidden_layers": spec.text_layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "cross_attention_layers": list(spec.cross_attention_layers),
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    config = MllamaConfig(vision_config=vision, text_config=text, image_token_index=spec.vocab - 1)
    torch.manual_seed(spec.seed)
    model: Any = MllamaForConditionalGeneration(config)
    gen = torch.Generator().manual_seed(spec.seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "norm" in name and name.endswith("weight"):  # LayerNorm/RMSNorm weights near 1
                p.copy_(1 + 0.1 * noise)
            elif "gate" in name and p.ndim == 1 and p.numel() == 1:
                p.copy_(0.3 + 0.4 * noise)  # tanh(gate) neither 0 nor 1
            elif p.ndim == 1:
                p.copy_(0.1 * noise)
            else:
                p.copy_(noise / p.shape[-1] ** 0.5)
    return model.eval()


def meta_semantics(vision_model: Any) -> Any:
    """Patch `vision_model` (a `MllamaVisionModel`) so its local encoder returns each layer's
    INPUT as `hidden_states` (Meta's reference, Ollama, vLLM, transformers <= 4.53) instead of
    its output (transformers >= 4.54). Returns the patched model."""
    from transformers.modeling_outputs import BaseModelOutput

    encoder = vision_model.transformer

    def forward(self: Any, hidden_states: Any, attention_mask: Any = None, **_: Any) -> Any:
        inputs = []
        for layer in self.layers:
            inputs.append(hidden_states)
            hidden_states = layer(hidden_states=hidden_states, attention_mask=attention_mask)
        return BaseModelOutput(last_hidden_state=hidden_states, hidden_states=tuple(inputs))

    encoder.forward = types.MethodType(forward, encoder)
    return vision_model


def _meta_forward(
    self: Any,
    hidden_states: Any,
    cross_attention_states: Any,
    cross_attention_mask: Any,
    attention_mask: Any,
    full_text_row_masked_out_mask: Any,
    position_ids: Any = None,
    cache: Any = None,
    use_cache: bool = False,
    position_embeddings: Any = None,
    **kwargs: Any,
) -> Any:
    """transformers' MllamaCrossAttentionDecoderLayer.forward with Meta's masking: the
    attention output, too, is multiplied by full_text_row_masked_out_mask."""
    residual = hidden_states
    a, _ = self.cross_attn(
        hidden_states=self.input_layernorm(hidden_states),
        attention_mask=cross_attention_mask,
        cross_attention_states=cross_attention_states,
        cache=cache,
        **kwargs,
    )
    rows = 1 if full_text_row_masked_out_mask is None else full_text_row_masked_out_mask[:, 0]
    hidden_states = residual + self.cross_attn_attn_gate.tanh() * (rows * a)
    residual = hidden_states
    f = self.mlp(self.post_attention_layernorm(hidden_states))
    return residual + self.cross_attn_mlp_gate.tanh() * (rows * f)


def meta_cross_attention(model: Any) -> Any:
    """Patch every cross-attention decoder layer of `model` (a transformers mllama model) to
    Meta's masking (llama-models' `CrossAttention`): a text row before the image gets no
    cross-attention contribution, attention output and feed-forward both multiplied by
    `full_text_row_masked_out_mask`. transformers masks only the feed-forward, and the fully
    masked mask row it turns into a zero bias lets the attention output (uniform over every
    tile) through. Returns `model`."""
    from transformers.models.mllama.modeling_mllama import MllamaCrossAttentionDecoderLayer

    for layer in model.modules():
        if isinstance(layer, MllamaCrossAttentionDecoderLayer):
            layer.forward = types.MethodType(_meta_forward, layer)
    return model


@contextlib.contextmanager
def transformers_cross_attention(model: Any) -> Iterator[None]:
    """Within: `model`'s cross-attention layers as transformers has them (the
    `meta_cross_attention` patch removed, and put back on exit)."""
    patched = [
        m
        for m in model.modules()
        if getattr(vars(m).get("forward"), "__func__", None) is _meta_forward
    ]
    for m in patched:
        del m.forward
    try:
        yield
    finally:
        for m in patched:
            m.forward = types.MethodType(_meta_forward, m)


def reference_states(model: Any, pixels: np.ndarray, ratio_id: int, num_tiles: int) -> np.ndarray:
    """transformers' projected cross-attention states of one image: `vision_model` then
    `multi_modal_projector`, the real tiles' rows `[num_tiles * num_patches, text_hidden]`."""
    import torch

    tiles = pixels.shape[0]
    mask = np.zeros((1, 1, tiles), dtype=np.int64)
    mask[..., :num_tiles] = 1
    with torch.no_grad():
        out = model.model.vision_model(
            pixel_values=torch.from_numpy(pixels)[None, None],
            aspect_ratio_ids=torch.tensor([[ratio_id]]),
            aspect_ratio_mask=torch.from_numpy(mask),
        ).last_hidden_state  # [1, 1, T, n, features]
        states = model.model.multi_modal_projector(out)[0, 0, :num_tiles]
    return np.ascontiguousarray(states.reshape(-1, states.shape[-1]).numpy(), dtype=np.float32)


def random_png(width: int, height: int, seed: int) -> bytes:
    """A PNG of random pixels (`width` x `height`, RGB; fixed by `seed`)."""
    import io

    from PIL import Image

    rng = np.random.default_rng(seed)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(out, "PNG")
    return out.getvalue()


# -- Ollama's names and repacks: the plugin's converter --------------------------------------

# Ollama's registry projector file names four layer tensors otherwise than its one file.
_PROJECTOR_LAYER = {"attn_norm": "ln1", "ffn_norm": "ln2", "attn_output": "attn_out"}
_PROJECTOR_LAYER |= {"ffn_up": "ffn_down", "ffn_down": "ffn_up"}  # fc1 is "ffn_down" there


def vision_tensors(vision_model: Any, projector: Any) -> dict[str, np.ndarray]:
    """The tensors of a `MllamaVisionModel` and its projector (`multi_modal_projector`, a
    Linear) as numpy (F32) under the names and repacks of the plugin's converter
    (`hearth_mllama.convert.MllamaConverter`, as for `vision_model.*` and
    `multi_modal_projector.*` of a checkpoint)."""
    converter = MllamaConverter({"vision_config": vision_model.config.to_dict()})
    out: dict[str, np.ndarray] = {}
    for prefix, module in (("vision_model", vision_model), ("multi_modal_projector", projector)):
        for name, value in module.state_dict().items():
            array = value.detach().float().numpy()
            for gguf_name in converter.tensor_names(f"{prefix}.{name}"):
                out[gguf_name] = converter.transform(gguf_name, array)
    bad = [k for k in out if not re.fullmatch(r"(v|mm)\.[a-z0-9_.]+", k)]
    if bad:
        raise RuntimeError(f"unmapped tensor names: {bad}")
    return out


def vision_keys(config: Any) -> dict[str, Any]:
    """`mllama.vision.*` keys (without the prefix) of a `MllamaVisionConfig`, as the plugin's
    converter writes them."""
    keys = MllamaConverter({"vision_config": config.to_dict()}).vision_metadata()
    return {k.removeprefix("mllama.vision."): v for k, v in keys.items()}


def _projector_name(name: str) -> str:
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part in _PROJECTOR_LAYER and i >= 2 and parts[i - 2] == "blk":
            parts[i] = _PROJECTOR_LAYER[part]
    return ".".join(parts)


def write_vision_gguf(
    path: Path,
    tensors: Mapping[str, np.ndarray],
    keys: Mapping[str, Any],
    layout: str = "ollama",
    dtype: Any = np.float32,
) -> Path:
    """A GGUF (architecture `mllama`) holding `tensors` (converted to `dtype` where they have
    two or more dimensions; 1-D ones stay F32, as Ollama writes them) and `keys` as
    `mllama.vision.*`. `layout="projector"` renames the layer tensors as Ollama's registry
    projector file names them. Returns `path`."""
    import gguf

    if layout not in ("ollama", "projector"):
        raise ValueError(f"unknown layout {layout!r}")
    w = gguf.GGUFWriter(str(path), "mllama")
    for key, value in keys.items():
        full = f"mllama.vision.{key}"
        if isinstance(value, list):
            w.add_array(full, value)
        elif isinstance(value, float):
            w.add_float32(full, value)
        else:
            w.add_uint32(full, int(value))
    for name, value in tensors.items():
        out = _projector_name(name) if layout == "projector" else name
        data = value.astype(dtype if value.ndim >= 2 else np.float32)
        w.add_tensor(out, np.ascontiguousarray(data))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_text_gguf(source: Path, out: Path, embedding_rows: int | None = None) -> Path:
    """The text file of Ollama's registry layout from the one-file GGUF `source` (as
    Hearth's or Ollama's converter writes it): every key and tensor but the encoder's
    (`mllama.vision.*`, `v.*`, `mm.*`), tensors F32/F16 as stored. `embedding_rows` cuts the
    token embedding to its first rows (the converter writes `vocab_size + 8`). Returns `out`."""
    import gguf

    reader = gguf.GGUFReader(source)
    w = gguf.GGUFWriter(str(out), "mllama")
    for name, kv in reader.fields.items():
        if name.startswith(("GGUF.", "mllama.vision.")) or name == "general.architecture":
            continue
        sub = kv.types[1] if len(kv.types) > 1 else None
        w.add_key_value(name, kv.contents(), kv.types[0], sub)
    for t in reader.tensors:
        if t.name.startswith(("v.", "mm.")):
            continue
        data = np.asarray(t.data)  # F32 and F16 only: their numpy type says it
        if t.name == "token_embd.weight" and embedding_rows is not None:
            data = data[:embedding_rows]
        w.add_tensor(t.name, np.ascontiguousarray(data))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out
