"""Tiny random mixture-of-experts checkpoints (transformers' Qwen3MoeForCausalLM and
GptOssForCausalLM) converted to GGUF by llama.cpp's own `convert_hf_to_gguf.py`, and the
gpt-oss file with its experts quantized to MXFP4 by llama.cpp's quantizer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from convert.hf_models import randomize, write_bpe_tokenizer

from hearth.plugins.testing import llamacpp_converter, run_llamacpp_converter
from hearth_gpt_oss.model import CHAT_TEMPLATE as HARMONY

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
HARMONY_SPECIALS = (
    "<|startoftext|>",
    "<|return|>",
    "<|start|>",
    "<|end|>",
    "<|message|>",
    "<|channel|>",
    "<|constrain|>",
    "<|call|>",
)


def _randomize_experts(model: object, seed: int, fan_in_axis: int) -> None:
    """randomize(), then the stacked expert matrices `[n_expert, a, b]` scaled by their
    inputs (`fan_in_axis`: Qwen3-MoE multiplies by the transpose, gpt-oss by the matrix), as
    randomize() scales by a whole expert stack's size, which makes them vanish."""
    import torch

    randomize(model, seed)
    gen = torch.Generator().manual_seed(seed + 7)
    with torch.no_grad():
        for _, p in model.named_parameters():  # type: ignore[attr-defined]
            if p.ndim == 3:
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[fan_in_axis] ** 0.5)


def build_tiny_qwen3moe(
    folder: Path, seed: int = 5, width: int = 64, expert_ff: int = 32, experts: int = 8
) -> Path:
    """A `Qwen3MoeForCausalLM` folder: 2 layers, `width` wide (default 64), 4 heads of 16 (2
    KV heads), `experts` experts (8) of `expert_ff` (32), 2 per token, normalised top-k
    weights."""
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    ids = write_bpe_tokenizer(folder, 400, ("<|im_start|>", "<|im_end|>"), CHATML)
    config = Qwen3MoeConfig(
        vocab_size=max(ids.values()) + 1,
        hidden_size=width,
        intermediate_size=96,
        moe_intermediate_size=expert_ff,
        num_experts=experts,
        num_experts_per_tok=2,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=2048,
        rms_norm_eps=1e-6,
        rope_theta=1_000_000.0,
        tie_word_embeddings=False,
        bos_token_id=ids["<|im_start|>"],
        eos_token_id=ids["<|im_end|>"],
    )
    torch.manual_seed(seed)
    model = Qwen3MoeForCausalLM(config).eval()
    _randomize_experts(model, seed + 1, fan_in_axis=2)
    model.save_pretrained(folder)
    return folder


def build_tiny_gpt_oss(folder: Path, seed: int = 9, window: int = 16) -> Path:
    """A `GptOssForCausalLM` folder: 2 layers (sliding, full), 64 wide, 4 heads of 16 (2 KV
    heads), 4 experts of 32, 2 per token, YaRN RoPE (factor 32 over 4096, as released), a
    sliding window of `window`, harmony's special tokens."""
    import torch
    from transformers import GptOssConfig, GptOssForCausalLM

    ids = write_bpe_tokenizer(folder, 400, HARMONY_SPECIALS, HARMONY)
    config = GptOssConfig(
        vocab_size=max(ids.values()) + 1,
        hidden_size=64,
        intermediate_size=32,
        num_local_experts=4,
        num_experts_per_tok=2,
        experts_per_token=2,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        sliding_window=window,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=131072,
        rms_norm_eps=1e-5,
        rope_theta=150000.0,
        rope_scaling={
            "rope_type": "yarn",
            "factor": 32.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
            "original_max_position_embeddings": 4096,
        },
        tie_word_embeddings=False,
        bos_token_id=ids["<|startoftext|>"],
        eos_token_id=ids["<|return|>"],
    )
    torch.manual_seed(seed)
    model = GptOssForCausalLM(config).eval()
    _randomize_experts(model, seed + 1, fan_in_axis=1)
    model.save_pretrained(folder)
    return folder


def tiny_qwen3moe_gguf(work: Path, **sizes: int) -> Path:
    """build_tiny_qwen3moe(`sizes`) converted by llama.cpp's converter."""
    out = work / "tiny-qwen3moe.gguf"
    hf = build_tiny_qwen3moe(work / "hf-qwen3moe", **sizes)
    run_llamacpp_converter(llamacpp_converter(), hf, out, mmproj=False, bpe_pre="qwen2")
    return out


def llamacpp_quantized(src: Path, dst: Path, ftype: str) -> Path:
    """`src` through llama.cpp's quantizer as `ftype` (a llama.cpp file type: Q4_K_M...)."""
    import hearth.plugins.testing as testing

    script = Path(testing.__file__).parent / "llamacpp_quantize.py"
    proc = subprocess.run(
        [sys.executable, str(script), str(src), str(dst), ftype, "2"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dst


def tiny_gpt_oss_gguf(work: Path, window: int = 16) -> Path:
    out = work / "tiny-gpt-oss.gguf"
    hf = build_tiny_gpt_oss(work / "hf-gpt-oss", window=window)
    run_llamacpp_converter(llamacpp_converter(), hf, out, mmproj=False, bpe_pre="gpt-4o")
    return out


def mxfp4_experts(src: Path, dst: Path) -> Path:
    """`src` (an F32 file) with its expert matrices (`ffn_*_exps.weight`) quantized to MXFP4
    by gguf-py and everything else as it was."""
    import gguf

    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(str(dst), arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), field.types[0], sub)
    for t in reader.tensors:
        data = t.data.reshape([int(n) for n in reversed(t.shape)])
        if t.name.endswith("_exps.weight"):
            writer.add_tensor(
                t.name, gguf.quants.quantize(data, gguf.GGMLQuantizationType.MXFP4),
                raw_dtype=gguf.GGMLQuantizationType.MXFP4,
            )  # fmt: skip
        else:
            writer.add_tensor(t.name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


def quantize_mxfp4_moe(src: Path, dst: Path) -> Path:
    """`src` through llama.cpp's quantizer as MXFP4_MOE: experts MXFP4, the rest Q8_0."""
    return llamacpp_quantized(src, dst, "MXFP4_MOE")
