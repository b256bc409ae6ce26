"""The kit's mixture-of-experts pieces against numpy: the tensor API's expert ops, attention
sinks, the `Experts` block (routing, renormalisation, SwiGLU and gpt-oss's clamped variant),
YaRN RoPE settings as llama.cpp derives them, and the layout planner counting the expert
tensors with their layer."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from hearth.engine.gguf import Metadata
from hearth.engine.ml import DType
from hearth.plugins import Experts, Routing, read_rope, sliding_layers
from hearth.server.scheduling.layout.fit import read_file_layers

rng = np.random.default_rng(1)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def compute(backend, build):
    ctx = backend.new_context()
    try:
        out = build(ctx)
        ctx.compute(out)
        return out.numpy()
    finally:
        ctx.close()


def softmax(x, axis=-1):
    z = np.exp(x - x.max(axis=axis, keepdims=True))
    return z / z.sum(axis=axis, keepdims=True)


def test_mul_mat_id_and_add_id_pick_each_tokens_experts(backend):
    experts = f32(5, 12, 16)  # numpy [n_expert, out, in]
    bias = f32(5, 12)
    x = f32(3, 16)  # 3 tokens
    ids = np.array([[4, 1], [0, 4], [2, 3]], np.int32)  # numpy [tokens, k]

    def build(ctx):
        e, b, i = ctx.from_numpy(experts), ctx.from_numpy(bias), ctx.from_numpy(ids)
        xt = ctx.reshape(ctx.from_numpy(x), 16, 1, 3)
        return ctx.add_id(ctx.mul_mat_id(e, xt, i), b, i)  # [12, 2, 3]

    got = compute(backend, build)
    ref = np.einsum("tjoi,ti->tjo", experts[ids], x) + bias[ids]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_argsort_top_k_gives_the_largest_first(backend):
    a = f32(4, 9)
    got = compute(backend, lambda ctx: ctx.cont(ctx.argsort_top_k(ctx.from_numpy(a), 3)))
    np.testing.assert_array_equal(got, np.argsort(-a, axis=1)[:, :3])


def test_soft_max_with_sinks_adds_a_valueless_logit_per_head(backend):
    scores = f32(3, 2, 7)  # numpy [heads, tokens, n_kv]
    sinks = f32(3)
    got = compute(
        backend,
        lambda ctx: ctx.soft_max(ctx.from_numpy(scores), None, 0.5, ctx.from_numpy(sinks)),
    )
    s = scores * 0.5
    full = np.concatenate([s, np.broadcast_to(sinks[:, None, None], (3, 2, 1))], axis=-1)
    np.testing.assert_allclose(got, softmax(full)[..., :-1], rtol=1e-5, atol=1e-6)


def _experts_reference(x, w, routing, activation):
    """The routed feed-forward in numpy, as the Experts docstring states it."""
    logits = x @ w["ffn_gate_inp"].T + w.get("ffn_gate_inp_bias", 0)  # [n, n_expert]
    if routing.gating == "softmax":
        probs = softmax(logits)
    elif routing.gating == "sigmoid":
        probs = 1 / (1 + np.exp(-logits))
    else:
        probs = logits
    chosen = np.argsort(-probs, axis=1, kind="stable")[:, : routing.used]
    weights = np.take_along_axis(probs, chosen, axis=1)
    if routing.gating == "softmax_weight":
        weights = softmax(weights)
    if routing.normalize:
        weights = weights / weights.sum(axis=1, keepdims=True)
    weights = weights * routing.scale
    out = np.zeros_like(x)
    count = w["ffn_gate_inp"].shape[0]
    zero = np.zeros((count, 1), np.float32)
    for t in range(x.shape[0]):
        for j, e in enumerate(chosen[t]):
            gate = w["ffn_gate_exps"][e] @ x[t] + w.get("ffn_gate_exps_bias", zero)[e]
            up = w["ffn_up_exps"][e] @ x[t] + w.get("ffn_up_exps_bias", zero)[e]
            if activation == "silu":
                h = gate / (1 + np.exp(-gate)) * up
            else:
                g, u = np.minimum(gate, 7.0), np.clip(up, -7.0, 7.0)
                h = g / (1 + np.exp(-1.702 * g)) * (u + 1)
            down = w["ffn_down_exps"][e] @ h + w.get("ffn_down_exps_bias", zero)[e]
            out[t] += weights[t, j] * down
    return out


@pytest.mark.parametrize(
    ("routing", "activation", "biases"),
    [
        (Routing(8, 2, "softmax", normalize=True), "silu", False),  # Qwen3-MoE
        (Routing(8, 3, "softmax", normalize=False), "silu", False),
        (Routing(6, 2, "sigmoid", normalize=True, scale=2.5), "silu", False),
        (Routing(4, 2, "softmax_weight"), "swiglu_oai", True),  # gpt-oss
    ],
)
def test_experts_route_as_the_reference_does(backend, routing, activation, biases):
    n, embd, ff = 5, 16, 8
    w = {
        "ffn_gate_inp": f32(routing.count, embd),
        "ffn_gate_exps": f32(routing.count, ff, embd) / 4,
        "ffn_up_exps": f32(routing.count, ff, embd) / 4,
        "ffn_down_exps": f32(routing.count, embd, ff) / 3,
    }
    if biases:
        w |= {
            "ffn_gate_inp_bias": f32(routing.count),
            "ffn_gate_exps_bias": f32(routing.count, ff),
            "ffn_up_exps_bias": f32(routing.count, ff),
            "ffn_down_exps_bias": f32(routing.count, embd),
        }
    x = f32(n, embd) * 2

    def build(ctx):
        block = Experts(**{k: ctx.from_numpy(v) for k, v in w.items()})
        return block.forward(ctx, ctx.from_numpy(x), routing, activation)

    got = compute(backend, build)
    np.testing.assert_allclose(got, _experts_reference(x, w, routing, activation), atol=2e-4)


def test_experts_take_mxfp4_weights(backend):
    """MXFP4 experts (gpt-oss's released type) multiply as their dequantized values."""
    routing, embd, ff, n = Routing(4, 2, "softmax", normalize=True), 64, 32, 3
    raw = {
        "ffn_gate_exps": f32(4, ff, embd) / 8,
        "ffn_up_exps": f32(4, ff, embd) / 8,
        "ffn_down_exps": f32(4, embd, ff) / 6,
    }
    quant = {k: gguf.quants.quantize(v, QT.MXFP4) for k, v in raw.items()}
    exact = {k: gguf.quants.dequantize(v, QT.MXFP4) for k, v in quant.items()}
    router, x = f32(4, embd), f32(n, embd)

    def build(ctx):
        tensors = {}
        for k, v in quant.items():
            t = ctx.input(DType.MXFP4, tuple(reversed(raw[k].shape)))
            t.set(v.view(np.uint8))
            tensors[k] = t
        block = Experts(ffn_gate_inp=ctx.from_numpy(router), **tensors)
        return block.forward(ctx, ctx.from_numpy(x), routing)

    got = compute(backend, build)
    ref = _experts_reference(x, {"ffn_gate_inp": router, **exact}, routing, "silu")
    # ggml multiplies MXFP4 by activations rounded to Q8_0: a few parts in a thousand
    np.testing.assert_allclose(got, ref, atol=2e-2 * np.abs(ref).max())


def test_routing_reads_the_file_and_refuses_what_it_cannot_do():
    meta = Metadata(
        {
            "general.architecture": "qwen3moe",
            "qwen3moe.expert_count": 128,
            "qwen3moe.expert_used_count": 8,
        }
    )
    assert Routing.read(meta, normalize=True) == Routing(128, 8, "softmax", True, 1.0)
    declared = Metadata(
        {
            **meta,
            "qwen3moe.expert_gating_func": 2,
            "qwen3moe.expert_weights_norm": False,
            "qwen3moe.expert_weights_scale": 2.5,
        }
    )
    assert Routing.read(declared, normalize=True) == Routing(128, 8, "sigmoid", False, 2.5)
    with pytest.raises(ValueError, match="expert_used_count"):
        Routing.read(Metadata({"general.architecture": "qwen3moe", "qwen3moe.expert_count": 4}))
    with pytest.raises(ValueError, match="gating function 4"):
        Routing.read(Metadata({**meta, "qwen3moe.expert_gating_func": 4}))


def test_yarn_rope_is_read_as_llama_cpp_derives_it():
    """gpt-oss's YaRN (factor 32 over 4096): llama_context sets ext_factor 1 and an attention
    factor of mscale / (1 + 0.1 ln 32), in F32, i.e. 1 within an F32 rounding."""
    meta = Metadata(
        {
            "general.architecture": "gpt-oss",
            "gpt-oss.context_length": 131072,
            "gpt-oss.rope.freq_base": 150000.0,
            "gpt-oss.rope.scaling.type": "yarn",
            "gpt-oss.rope.scaling.factor": 32.0,
            "gpt-oss.rope.scaling.original_context_length": 4096,
        }
    )
    rope = read_rope(meta, base=10000.0, neox=True, dims=64)
    assert rope.scale == 1 / 32 and rope.ext_factor == 1.0 and rope.original_context == 4096
    assert abs(rope.attn_factor - 1.0) < 1e-6
    assert (rope.beta_fast, rope.beta_slow) == (32.0, 1.0)


def test_sliding_layers_follow_llama_cpps_pattern():
    meta = Metadata({"general.architecture": "x", "x.attention.sliding_window": 128})
    assert sliding_layers(meta, 4, 2) == (True, False, True, False)  # gpt-oss
    assert sliding_layers(meta, 7, 6) == (True,) * 5 + (False, True)  # gemma3
    off = Metadata({"general.architecture": "x"})
    assert sliding_layers(off, 3, 2) == (False, False, False)


def test_the_layout_planner_counts_expert_tensors_with_their_layer(tmp_path):
    """Per-layer weight bytes include `blk.N.ffn_*_exps` (MXFP4 at 17 bytes per 32 values)
    and their biases; counted independently from the tensor shapes here."""
    path = tmp_path / "moe.gguf"
    w = gguf.GGUFWriter(str(path), "qwen3moe")
    w.add_block_count(2)
    w.add_embedding_length(64)
    w.add_head_count(4)
    expected = [0, 0]
    for i in range(2):
        for name in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"):
            q = gguf.quants.quantize(f32(8, 32, 64), QT.MXFP4)
            w.add_tensor(f"blk.{i}.{name}.weight", q, raw_dtype=QT.MXFP4)
            expected[i] += 8 * 32 * 64 // 32 * 17
        bias = f32(8, 32)
        w.add_tensor(f"blk.{i}.ffn_up_exps.bias", bias)
        expected[i] += bias.nbytes
    w.add_tensor("token_embd.weight", f32(10, 64))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    layers = read_file_layers(path)
    assert list(layers.blocks) == expected
    assert layers.inputs == 10 * 64 * 4
