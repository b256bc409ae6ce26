"""The conformance suite (hearth.plugins.testing) on the built-in plugins, and on broken
variants of them, to show that each check catches what it is for."""

from __future__ import annotations

import dataclasses

import pytest
from gguf import GGMLQuantizationType as QT

import hearth.plugins.transformer as kit
import hearth_llama.model as llama
from hearth.plugins import Causal
from hearth.plugins.testing import ConformanceError, run_conformance

from tiny_models import tiny_gemma3, tiny_llama

SPECS = {
    "llama-gqa-rope-freqs": tiny_llama(),
    "llama-tied-mha-f32": tiny_llama(
        heads=4,
        kv_heads=4,
        rope_freqs=False,
        tied_output=True,
        seed=3,
        types={"attn_q.weight": QT.F32, "ffn_down.weight": QT.Q8_0, "token_embd.weight": QT.Q8_0},
    ),
    "gemma3-sliding-window": tiny_gemma3(),
}


@pytest.mark.parametrize("name", SPECS)
def test_the_builtin_plugins_conform(name, tmp_path):
    print(run_conformance(SPECS[name], tmp_path, llama_cpp=True))


def _failures(tmp_path, checks: list[str]) -> str:
    with pytest.raises(ConformanceError) as e:
        run_conformance(tiny_llama(), tmp_path, llama_cpp=True, checks=checks)
    return str(e.value)


def test_parity_catches_a_wrong_rope_layout(tmp_path, monkeypatch):
    neox = dataclasses.replace(llama.DEFAULTS, neox=True)
    monkeypatch.setattr(llama, "DEFAULTS", neox)
    assert "failed  parity: top-1" in _failures(tmp_path, ["parity"])


def test_shift_catches_a_shift_that_forgets_the_rope_factors(tmp_path, monkeypatch):
    def shift(self, ctx, layer, key, delta):  # Llama 3.1's rope_freqs left out
        return ctx.rope(key, delta, self.config.rope)

    monkeypatch.setattr(llama.Model, "shift", shift)
    assert "failed  shift: keys shifted by -37" in _failures(tmp_path, ["shift"])


def test_batch_and_cache_reuse_catch_a_forward_that_ignores_the_layer(tmp_path, monkeypatch):
    def layers(cache, batch, blocks):  # never calls cache.set_layer: all layers share one
        last = len(blocks) - 1
        for i, block in enumerate(blocks):
            yield kit.Layer(i, i == last, batch), block

    monkeypatch.setattr(kit, "layers", layers)
    report = _failures(tmp_path, ["batch", "cache_reuse"])
    assert "failed  batch: one batch vs token by token" in report
    assert "failed  cache_reuse: the reused cache" in report


def test_a_plugin_error_is_reported_with_the_other_checks(tmp_path, monkeypatch):
    def make_cache(self):  # shift is overridden but not handed to the cache
        return Causal()

    monkeypatch.setattr(llama.Model, "make_cache", make_cache)
    report = _failures(tmp_path, ["batch", "shift"])
    assert "passed  batch" in report and "failed  shift: raised ShiftNotSupportedError" in report


def test_sequences_catch_a_model_whose_rows_see_each_other(tmp_path, monkeypatch):
    embed = kit.Transformer.embed

    def normed_across_tokens(self, ctx, batch):  # a norm over the wrong axis mixes the rows
        h = ctx.cont(ctx.permute(embed(self, ctx, batch), 1, 0, 2, 3))  # [tokens, embd]
        return ctx.cont(ctx.permute(ctx.rms_norm(h, 1e-5), 1, 0, 2, 3))  # [embd, tokens]

    monkeypatch.setattr(kit.Transformer, "embed", normed_across_tokens)
    assert "failed  sequences: sequence 0 decoded with two others" in _failures(
        tmp_path, ["sequences"]
    )
