"""hearth.convert.quantize against llama.cpp's own quantizer (`llama_model_quantize`, what
`llama-quantize` runs): the same type for every tensor and the same bytes.

Each tiny model is written in F16 (norms F32) with rows of 256 and more, so the K-quants
apply; llama.cpp quantizes the file in its own process (never next to Hearth's ggml). Our
side plans from the names and shapes and quantizes each F16 tensor alone. Then Hearth runs
our quantized file and its logits stay near the F32 model's.
"""

from __future__ import annotations

import importlib
import random
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from hearth.convert.quantize import SCHEMES, TensorInfo, parse_scheme, quantize, quantize_plan
from hearth.engine.forward import ForwardEngine
from hearth.engine.input import PassInput
from hearth.plugins.registry import load_installed_model
from hearth.plugins.testing import (
    LLAMACPP_LOGITS,
    TinyTransformer,
    add_spm_vocab,
    llamacpp_installed,
    run_oracle,
    write_tiny_model,
)

ORACLE = Path(__file__).parents[2] / "app" / "plugins" / "testing" / "llamacpp_quantize.py"

needs_llamacpp = pytest.mark.skipif(not llamacpp_installed(), reason="llama-cpp-python missing")

# name -> (spec, GGUF architecture)
MODELS = {
    # 8 layers: attn_v and ffn_down get Q6_K in layers 0, 3, 6, 7 only
    "llama": TinyTransformer(embd=256, layers=8, heads=4, kv_heads=2, ff=512),
    # tied output (token_embd plays output: Q6_K); ffn_down rows of 352 are not whole
    # K-quant blocks (Q4_K -> Q5_0, Q6_K -> Q8_0)
    "tied": TinyTransformer(embd=256, layers=5, heads=4, kv_heads=2, ff=352, tied_output=True),
    # falcon: output at Q8_0, its own ffn_down ladder; rows of 360 are not Q8_0 blocks (F16)
    "falcon": TinyTransformer(
        "falcon",
        embd=256,
        layers=16,
        heads=4,
        kv_heads=4,
        ff=360,
        metadata={"attention.layer_norm_epsilon": 1e-5},
    ),
    # 80 layers with GQA: llama.cpp's "70B" (attn_v Q5_K outside the more-bits layers)
    "llama80": TinyTransformer(embd=256, layers=80, heads=4, kv_heads=2, ff=256),
}
FTYPES = {"q4_K_M": "Q4_K_M", "q8_0": "Q8_0", "f16": "F16"}


def write_tiny_moe(path: Path, layers: int = 4, embd: int = 256, ff: int = 256) -> Path:
    """A Mixtral-like llama file with 8 experts (F16 matrices, F32 norms and router):
    llama.cpp's policy has its own branches for 8-expert models."""
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(str(path), "llama")
    for key, value in (("context_length", 256), ("embedding_length", embd),
                       ("block_count", layers), ("feed_forward_length", ff),
                       ("attention.head_count", 4), ("attention.head_count_kv", 2),
                       ("expert_count", 8), ("expert_used_count", 2)):  # fmt: skip
        w.add_uint32(f"llama.{key}", value)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    vocab = add_spm_vocab(w)

    def add(name: str, *shape: int, qtype: QT = QT.F16) -> None:
        data = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        w.add_tensor(name, data if qtype == QT.F32 else data.astype(np.float16))

    add("token_embd.weight", vocab, embd)
    for i in range(layers):
        p = f"blk.{i}."
        add(p + "attn_norm.weight", embd, qtype=QT.F32)
        add(p + "attn_q.weight", embd, embd)
        add(p + "attn_k.weight", embd // 2, embd)
        add(p + "attn_v.weight", embd // 2, embd)
        add(p + "attn_output.weight", embd, embd)
        add(p + "ffn_norm.weight", embd, qtype=QT.F32)
        add(p + "ffn_gate_inp.weight", 8, embd, qtype=QT.F32)
        add(p + "ffn_gate_exps.weight", 8, ff, embd)
        add(p + "ffn_up_exps.weight", 8, ff, embd)
        add(p + "ffn_down_exps.weight", 8, embd, ff)
    add("output_norm.weight", embd, qtype=QT.F32)
    add("output.weight", vocab, embd)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _f16(spec: TinyTransformer) -> TinyTransformer:
    return TinyTransformer(**{**vars(spec), "default_type": QT.F16, "types": {}})


def _llamacpp_quantize(src: Path, dst: Path, ftype: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(ORACLE), str(src), str(dst), ftype, "2"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory):
    """(model, scheme) -> (our source F16 file, llama.cpp's quantized file), built on use."""
    root = tmp_path_factory.mktemp("quantize")
    built: dict[tuple[str, str], tuple[Path, Path]] = {}

    def get(model: str, scheme: str) -> tuple[Path, Path]:
        if (model, scheme) not in built:
            src = root / f"{model}.source-f16.gguf"
            if not src.exists() and model == "moe":
                write_tiny_moe(src)
            elif not src.exists():
                write_tiny_model(src, _f16(MODELS[model]))
            dst = root / f"{model}.{scheme}.gguf"
            _llamacpp_quantize(src, dst, FTYPES[scheme])
            built[model, scheme] = src, dst
        return built[model, scheme]

    return get


def _infos(reader: gguf.GGUFReader) -> list[TensorInfo]:
    return [TensorInfo(t.name, tuple(int(n) for n in reversed(t.shape))) for t in reader.tensors]


def _arch(reader: gguf.GGUFReader) -> str:
    return str(reader.fields["general.architecture"].contents())


@needs_llamacpp
@pytest.mark.parametrize("scheme", FTYPES)
@pytest.mark.parametrize("model", ["llama", "tied", "falcon", "moe"])
def test_plan_and_bytes_equal_llamacpps(files, model, scheme):
    _check_plan_and_bytes(*files(model, scheme), scheme)


@needs_llamacpp
@pytest.mark.slow
def test_plan_and_bytes_equal_llamacpps_on_a_70b_shaped_model(files):
    src, ref = files("llama80", "q4_K_M")
    _check_plan_and_bytes(src, ref, "q4_K_M")
    types = {t.name: QT(t.tensor_type) for t in gguf.GGUFReader(ref).tensors}
    assert types["blk.13.attn_v.weight"] == QT.Q5_K and types["blk.12.attn_v.weight"] == QT.Q6_K


def _check_plan_and_bytes(src_path: Path, ref_path: Path, scheme: str) -> None:
    src, ref = gguf.GGUFReader(src_path), gguf.GGUFReader(ref_path)
    plan = quantize_plan(scheme, _infos(src), _arch(src))
    theirs = {t.name: QT(t.tensor_type) for t in ref.tensors}
    assert plan == theirs
    if scheme != "f16":  # the policy's branches are really taken
        assert {QT.F32, QT.F16, QT.Q8_0, QT.Q4_K, QT.Q6_K} & set(plan.values()) > {QT.F32}
    expected = {t.name: t for t in ref.tensors}
    for t in src.tensors:
        ours = quantize(np.asarray(t.data), plan[t.name])
        assert ours.tobytes() == expected[t.name].data.tobytes(), t.name


@needs_llamacpp
def test_the_fallbacks_and_ladders_are_exercised(files):
    """The oracle cases cover what they claim (so the equality above means something)."""
    llama = gguf.GGUFReader(files("llama", "q4_K_M")[1])
    types = {t.name: QT(t.tensor_type) for t in llama.tensors}
    assert [types[f"blk.{i}.attn_v.weight"] for i in range(8)] == [
        QT.Q6_K if i in (0, 3, 6, 7) else QT.Q4_K for i in range(8)
    ]
    assert types["output.weight"] == QT.Q6_K and types["token_embd.weight"] == QT.Q4_K
    tied = {t.name: QT(t.tensor_type) for t in gguf.GGUFReader(files("tied", "q4_K_M")[1]).tensors}
    assert tied["token_embd.weight"] == QT.Q6_K
    assert {tied[f"blk.{i}.ffn_down.weight"] for i in range(5)} == {QT.Q5_0, QT.Q8_0}
    falcon = {
        t.name: QT(t.tensor_type) for t in gguf.GGUFReader(files("falcon", "q4_K_M")[1]).tensors
    }
    assert falcon["output.weight"] == QT.Q8_0
    assert falcon["blk.0.ffn_down.weight"] == QT.F16  # rows of 360
    moe = {t.name: QT(t.tensor_type) for t in gguf.GGUFReader(files("moe", "q4_K_M")[1]).tensors}
    assert moe["blk.1.attn_v.weight"] == moe["blk.1.attn_k.weight"] == QT.Q8_0
    assert moe["blk.1.attn_output.weight"] == QT.Q5_K
    assert moe["blk.1.ffn_gate_inp.weight"] == QT.F32
    assert moe["blk.1.ffn_down_exps.weight"] == QT.Q4_K  # of 4 layers, 2 and 3 get more bits
    assert moe["blk.2.ffn_down_exps.weight"] == QT.Q6_K
    falcon_q8 = gguf.GGUFReader(files("falcon", "q8_0")[1])
    assert {QT(t.tensor_type) for t in falcon_q8.tensors} == {QT.F32, QT.F16, QT.Q8_0}


def _write(reader: gguf.GGUFReader, plan: dict[str, QT], path: Path) -> Path:
    """`reader`'s file with its tensors quantized by `plan`, one tensor at a time."""
    w = gguf.GGUFWriter(str(path), _arch(reader))
    for field in reader.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    for t in reader.tensors:
        qtype = plan[t.name]
        data = quantize(np.asarray(t.data), qtype)
        w.add_tensor(t.name, data, raw_dtype=None if qtype in (QT.F32, QT.F16) else qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _hearth_logits(path: Path, ids: np.ndarray) -> np.ndarray:
    """Hearth's logits at every position of `ids`."""
    loaded = load_installed_model(path, num_threads=2)
    engine = ForwardEngine(loaded, num_ctx=128, num_batch=64)
    try:
        n = len(ids)
        return engine.forward(PassInput(ids, np.arange(n), np.zeros(n, int), np.arange(n)))
    finally:
        engine.close()
        loaded.close()


@needs_llamacpp
@pytest.mark.parametrize(("scheme", "bound"), [("q8_0", 0.15), ("q4_K_M", 0.7)])
def test_hearth_runs_the_quantized_file_as_llamacpp_runs_its_own(files, tmp_path, scheme, bound):
    """Hearth on our file against llama.cpp on its file (the same bytes: only the kernels
    differ), and loosely against the F32 model (this random model amplifies rounding: 6% and
    47% of the largest logit at the last position for Q8_0 and Q4_K_M, F16 0.3%)."""
    src, theirs = files("llama", scheme)
    reader = gguf.GGUFReader(src)
    ours = _write(reader, quantize_plan(scheme, _infos(reader), "llama"), tmp_path / "q.gguf")
    ids = np.random.default_rng(3).integers(3, 500, 40)
    request = {"model": str(theirs), "n_ctx": 128, "threads": 2, "sample_rows": 40, "top_k": 5}
    oracle = run_oracle(LLAMACPP_LOGITS, {**request, "prompts": [{"ids": ids.tolist()}]}, tmp_path)
    logits = _hearth_logits(ours, ids)
    assert oracle["rows_idx_0"].tolist() == list(range(40))
    np.testing.assert_allclose(logits, oracle["rows_0"], atol=2e-3 * np.abs(logits).max())
    assert (logits.argmax(-1) == oracle["argmax_0"]).all()

    spec = TinyTransformer(**{**vars(MODELS["llama"]), "types": {}})
    f32 = _hearth_logits(write_tiny_model(tmp_path / "f32.gguf", spec), ids)[-1]
    err = float(np.abs(logits[-1] - f32).max() / np.abs(f32).max())
    assert 0 < err < bound, err
    assert np.corrcoef(logits[-1], f32)[0, 1] > 1 - bound / 2


# -- the plan and the quantizer without llama.cpp --------------------------------------------


def _llama_infos(layers: int = 4, vocab: int = 512, embd: int = 256) -> list[TensorInfo]:
    out = [
        TensorInfo("token_embd.weight", (vocab, embd)),
        TensorInfo("output_norm.weight", (embd,)),
    ]
    for i in range(layers):
        p = f"blk.{i}."
        out += [
            TensorInfo(p + "attn_norm.weight", (embd,)),
            TensorInfo(p + "attn_q.weight", (embd, embd)),
            TensorInfo(p + "attn_k.weight", (embd // 2, embd)),
            TensorInfo(p + "attn_v.weight", (embd // 2, embd)),
            TensorInfo(p + "attn_output.weight", (embd, embd)),
            TensorInfo(p + "ffn_down.weight", (embd, 512)),
        ]
    return out + [TensorInfo("output.weight", (vocab, embd))]


def test_the_plan_does_not_depend_on_the_order_of_tensors():
    infos = _llama_infos(layers=12)  # blk.10 sorts before blk.2 as text, not by number
    shuffled = infos[:]
    random.Random(0).shuffle(shuffled)
    plan = quantize_plan("q4_K_M", infos, "llama")
    assert quantize_plan("Q4_K_M", shuffled, "llama") == plan
    more_bits = [i for i in range(12) if plan[f"blk.{i}.attn_v.weight"] == QT.Q6_K]
    assert more_bits == [0, 3, 6, 9, 10, 11]  # first and last eighth, every third between


def test_vision_tensors_stay_f16_and_do_not_shift_the_layer_ladder():
    text = _llama_infos(layers=8)
    vision = [
        TensorInfo("v.patch_embd.weight", (256, 3, 14, 14)),
        TensorInfo("v.blk.0.attn_v.weight", (256, 256)),
        TensorInfo("v.blk.0.ln1.weight", (256,)),
        TensorInfo("mm.input_projection.weight", (256, 256)),
    ]
    plan = quantize_plan("q4_K_M", vision + text, "gemma3")
    assert plan == {**quantize_plan("q4_K_M", text, "gemma3"), **{
        "v.patch_embd.weight": QT.F16,
        "v.blk.0.attn_v.weight": QT.F16,
        "v.blk.0.ln1.weight": QT.F32,
        "mm.input_projection.weight": QT.F16,
    }}  # fmt: skip


def test_80_layer_gqa_llama_takes_llamacpps_70b_branch():
    """attn_v outside the more-bits layers: Q5_K on a 70B (n_head != n_head_kv), else Q4_K."""
    plan = quantize_plan("q4_K_M", _llama_infos(layers=80), "llama")
    assert plan["blk.13.attn_v.weight"] == QT.Q5_K and plan["blk.12.attn_v.weight"] == QT.Q6_K
    assert (
        quantize_plan("q4_K_M", _llama_infos(layers=79), "llama")["blk.13.attn_v.weight"] == QT.Q4_K
    )


def test_f16_and_f32_plans_keep_1d_tensors_f32():
    infos = _llama_infos(layers=1)
    assert set(quantize_plan("f32", infos, "llama").values()) == {QT.F32}
    f16 = quantize_plan("F16", infos, "llama")
    assert f16["blk.0.attn_norm.weight"] == QT.F32 and f16["blk.0.attn_q.weight"] == QT.F16


def test_parse_scheme_names_the_supported_ones():
    assert [parse_scheme(s.upper()) for s in SCHEMES] == list(SCHEMES)
    with pytest.raises(ValueError, match="q8_0, q4_K_M, f16, f32"):
        parse_scheme("q3_K_S")
    with pytest.raises(ValueError, match="twice"):
        quantize_plan("q8_0", [TensorInfo("a.weight", (32, 32))] * 2, "llama")


def test_quantize_refuses_what_it_cannot_write():
    with pytest.raises(ValueError, match="whole number of Q4_K blocks of 256"):
        quantize(np.zeros((4, 96), np.float32), QT.Q4_K)
    with pytest.raises(ValueError, match="int32"):
        quantize(np.zeros((4, 256), np.int32), QT.Q8_0)
    with pytest.raises(ValueError, match="importance matrix"):
        quantize(np.zeros((4, 256), np.float32), QT.IQ2_XXS)


def test_quantize_is_the_same_in_slabs_and_threads_and_agrees_with_gguf_for_q8_0(monkeypatch):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 40, 512)).astype(np.float16)
    one = quantize(a, QT.Q4_K, threads=1)
    module = importlib.import_module("hearth.convert.quantize")  # the package exports a function
    monkeypatch.setattr(module, "_SLAB", 1024)  # two rows a slab: many slabs over 3 threads
    assert one.shape == (3, 40, 2 * 144)
    assert quantize(a, QT.Q4_K, threads=3).tobytes() == one.tobytes()
    # gguf's numpy Q8_0 is an independent implementation of the same reference
    ref = gguf.quants.quantize(a.astype(np.float32), QT.Q8_0)
    assert quantize(a, QT.Q8_0, threads=3).tobytes() == ref.tobytes()
    err = np.abs(gguf.quants.dequantize(one, QT.Q4_K) - a).max()
    assert 0 < err < 0.1 * np.abs(a).max()
