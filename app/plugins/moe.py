"""Routed experts (mixture of experts), once for every plugin: the router and the experts of
one layer, as llama.cpp's `build_moe_ffn` computes them (shapes in ggml order, `n` tokens).

* `Routing.read(meta)`: how a file routes: `expert_count`, `expert_used_count` (k), the gating
  function (`expert_gating_func`: softmax or sigmoid over the router logits, or softmax over
  the k selected logits only), whether the k weights are renormalised to sum to 1
  (`expert_weights_norm`) and a scale on them (`expert_weights_scale`); the architecture gives
  its defaults for absent keys (llama.cpp fixes some per architecture).
* `Experts`: one layer's weights, `ffn_gate_inp` (the router `[embd, n_expert]`) and the
  stacked experts `ffn_gate_exps`/`ffn_up_exps` `[embd, ff, n_expert]`, `ffn_down_exps`
  `[ff, embd, n_expert]` (any type ggml multiplies, MXFP4 included), with the optional biases
  (`ffn_*.bias`, gpt-oss). `forward(ctx, x, routing)`:

      logits = router·x (+ bias)                    [n_expert, n]
      probs  = softmax | sigmoid (logits)           [n_expert, n]
      chosen = top-k(probs)                         [k, n], largest first
      w      = probs[chosen] (softmax over them for "softmax_weight"; / their sum when
               normalised; * scale)                  [1, k, n]
      h      = act(gate_e·x (+b), up_e·x (+b))      per chosen expert e, ggml_mul_mat_id
      out    = sum_j w_j * (down_e·h (+b))          [embd, n]

  The sum over the k experts adds the weighted outputs in choice order (llama.cpp's order, so
  the numbers agree with its bit for bit on the same kernels).

The expert tensors are `blk.N.ffn_*_exps.*`, so the layout planner counts them with block N
(`hearth.server.scheduling.layout.fit`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..engine.architecture import Metadata
from ..engine.ml import Context, Tensor, linear, weight

__all__ = ["Activation", "Experts", "Gating", "Routing"]

Gating = Literal["softmax", "sigmoid", "softmax_weight"]
Activation = Literal["silu", "swiglu_oai"]

# llama.cpp's llama_expert_gating_func_type (the file's `expert_gating_func`)
_GATING_IDS: dict[int, Gating] = {1: "softmax", 2: "sigmoid", 3: "softmax_weight"}
_SWIGLU_OAI = (1.702, 7.0)  # gpt-oss's alpha and limit (llama.cpp: LLM_FFN_SWIGLU_OAI_MOE)
_MIN_SUM = 6.103515625e-5  # the smallest normal F16: llama.cpp's floor on the weights' sum


@dataclass(frozen=True)
class Routing:
    """How a layer picks and weighs its experts (see the module docstring)."""

    count: int  # experts per layer
    used: int  # experts each token uses (k)
    gating: Gating = "softmax"
    normalize: bool = False  # divide the k weights by their sum
    scale: float = 1.0  # multiply the weights (0 or 1: none)

    @classmethod
    def read(
        cls, meta: Metadata, *, gating: Gating = "softmax", normalize: bool = False
    ) -> Routing:
        """`expert_count`, `expert_used_count`, `expert_gating_func`, `expert_weights_norm`
        and `expert_weights_scale`, with `gating` and `normalize` for absent keys. Raises
        ValueError for a file without experts or with a gating function Hearth lacks."""
        count, used = meta.uint("expert_count"), meta.uint("expert_used_count")
        if count <= 0 or used <= 0 or used > count:
            raise ValueError(
                f"{meta.key('expert_count')} ({count}) and {meta.key('expert_used_count')} "
                f"({used}) must be positive, and no more experts used than there are"
            )
        func = meta.uint("expert_gating_func", 0)
        if func and func not in _GATING_IDS:
            raise ValueError(f"expert gating function {func} is not supported (1-3 are)")
        return cls(
            count=count,
            used=used,
            gating=_GATING_IDS.get(func, gating),
            normalize=meta.bool("expert_weights_norm", normalize),
            scale=meta.float("expert_weights_scale", 1.0) or 1.0,
        )

    def weights(self, ctx: Context, logits: Tensor) -> tuple[Tensor, Tensor]:
        """Router logits `[n_expert, n]` -> (chosen experts I32 `[k, n]`, their weights
        `[1, k, n]`)."""
        n = logits.dim(1)
        if self.gating == "softmax":
            probs = ctx.soft_max(logits)
        elif self.gating == "sigmoid":
            probs = ctx.sigmoid(logits)
        else:  # softmax_weight: the softmax comes after the choice, over the chosen
            probs = logits
        chosen = ctx.argsort_top_k(probs, self.used)  # [k, n]
        w = ctx.get_rows(ctx.reshape(probs, 1, self.count, n), chosen)  # [1, k, n]
        if self.gating == "softmax_weight":
            w = ctx.reshape(ctx.soft_max(ctx.reshape(w, self.used, n)), 1, self.used, n)
        if self.normalize:
            w2 = ctx.reshape(w, self.used, n)
            total = ctx.clamp(ctx.sum_rows(w2), _MIN_SUM, float("inf"))  # [1, n]
            w = ctx.reshape(ctx.div(w2, total), 1, self.used, n)
        if self.scale != 1.0:
            w = ctx.scale(w, self.scale)
        return chosen, w


@dataclass
class Experts:
    """One layer's router and routed experts (`blk.N.ffn_gate_inp`, `blk.N.ffn_*_exps`)."""

    ffn_gate_inp: Tensor = weight()
    ffn_gate_exps: Tensor = weight()
    ffn_up_exps: Tensor = weight()
    ffn_down_exps: Tensor = weight()
    ffn_gate_inp_bias: Tensor | None = weight("ffn_gate_inp.bias", optional=True, matmul=False)
    ffn_gate_exps_bias: Tensor | None = weight("ffn_gate_exps.bias", optional=True, matmul=False)
    ffn_up_exps_bias: Tensor | None = weight("ffn_up_exps.bias", optional=True, matmul=False)
    ffn_down_exps_bias: Tensor | None = weight("ffn_down_exps.bias", optional=True, matmul=False)

    def forward(
        self, ctx: Context, x: Tensor, routing: Routing, activation: Activation = "silu"
    ) -> Tensor:
        """x `[embd, n]` -> `[embd, n]`: the weighted sum of the chosen experts' outputs.
        `activation`: "silu" (SwiGLU: Qwen3-MoE, Mixtral) or "swiglu_oai" (gpt-oss: gate
        clamped above at 7, up to [-7, 7], `g * sigmoid(1.702 g) * (u + 1)`)."""
        embd, n = x.dim(0), x.dim(1)
        logits = linear(ctx, x, self.ffn_gate_inp, self.ffn_gate_inp_bias)  # [n_expert, n]
        chosen, w = routing.weights(ctx, logits)  # [k, n], [1, k, n]
        x3 = ctx.reshape(x, embd, 1, n)  # every chosen expert reads the token's row
        up = self._product(ctx, self.ffn_up_exps, x3, chosen, self.ffn_up_exps_bias)
        gate = self._product(ctx, self.ffn_gate_exps, x3, chosen, self.ffn_gate_exps_bias)
        if activation == "silu":
            h = ctx.swiglu(gate, up)  # [ff, k, n]
        else:
            h = ctx.swiglu_oai(gate, up, *_SWIGLU_OAI)
        out = self._product(ctx, self.ffn_down_exps, h, chosen, self.ffn_down_exps_bias)
        out = ctx.mul(out, w)  # [embd, k, n]
        total = None
        for j in range(routing.used):  # in choice order, as llama.cpp adds them
            part = ctx.view(out, (embd, n), (out.strides[2],), j * out.strides[1])
            total = part if total is None else ctx.add(total, part)
        assert total is not None
        return total if routing.used > 1 else ctx.cont(total)

    @staticmethod
    def _product(
        ctx: Context, experts: Tensor, x: Tensor, chosen: Tensor, bias: Tensor | None
    ) -> Tensor:
        y = ctx.mul_mat_id(experts, x, chosen)  # [out, k, n]
        return ctx.add_id(y, bias, chosen) if bias is not None else y
