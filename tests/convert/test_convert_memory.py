"""Conversion streams: converting a checkpoint whose largest tensor is 200 MB peaks (the
converting process's maximum resident memory) below 1.5x that tensor + 500 MB, whatever the
total size: each tensor is read through a memory map, converted and written before the next."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from .hf_models import train_spm

pytest.importorskip("sentencepiece")
if not Path("/proc/self/status").is_file():
    pytest.skip("peak memory is read from /proc (Linux)", allow_module_level=True)

EMBD, VOCAB = 1024, 51200  # token_embd: 51200 x 1024 F32 = 200 MiB
LAYERS, FFN = 2, 4096  # each 16 MiB projection, 8 blocks of 4 ...


def _checkpoint(folder: Path) -> int:
    from safetensors.numpy import save_file

    folder.mkdir()
    (folder / "tokenizer.model").write_bytes(train_spm(400))
    config = {
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": VOCAB,
        "hidden_size": EMBD,
        "intermediate_size": FFN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 256,
        "tie_word_embeddings": False,
    }
    (folder / "config.json").write_text(json.dumps(config))
    rng = np.random.default_rng(0)
    shapes = {"model.embed_tokens.weight": (VOCAB, EMBD), "model.norm.weight": (EMBD,)}
    shapes["lm_head.weight"] = (VOCAB, EMBD)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (EMBD,),
            p + "post_attention_layernorm.weight": (EMBD,),
        }
        for n in ("q", "k", "v", "o"):
            shapes[f"{p}self_attn.{n}_proj.weight"] = (EMBD, EMBD)
        shapes |= {p + "mlp.gate_proj.weight": (FFN, EMBD), p + "mlp.up_proj.weight": (FFN, EMBD)}
        shapes[p + "mlp.down_proj.weight"] = (EMBD, FFN)
    names = sorted(shapes)
    for k, part in enumerate((names[: len(names) // 2], names[len(names) // 2 :])):
        arrays = {n: rng.standard_normal(shapes[n], dtype=np.float32) * 0.02 for n in part}
        save_file(arrays, str(folder / f"model-0000{k + 1}-of-00002.safetensors"))
        del arrays
    return max(int(np.prod(s)) * 4 for s in shapes.values())


@pytest.mark.slow
def test_peak_memory_is_about_one_tensor(tmp_path):
    largest = _checkpoint(tmp_path / "hf")
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from hearth.convert import convert_checkpoint
        from hearth.plugins.registry import default_converters, default_registry
        convert_checkpoint({str(tmp_path / "hf")!r}, {str(tmp_path / "out.gguf")!r},
                           converters=default_converters(), registry=default_registry())
        status = Path("/proc/self/status").read_text()
        print([line.split()[1] for line in status.splitlines() if line.startswith("VmHWM")][0])
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)
    # VmHWM: this process's own peak resident size in KiB (ru_maxrss would include the
    # forking test process's size on Linux).
    peak = int(proc.stdout.split()[-1]) * 1024
    total = sum(p.stat().st_size for p in (tmp_path / "hf").glob("*.safetensors"))
    limit = 1.5 * largest + 500 * 2**20
    print(
        f"checkpoint {total / 2**20:.0f} MiB, largest tensor {largest / 2**20:.0f} MiB: "
        f"peak RSS {peak / 2**20:.0f} MiB (limit {limit / 2**20:.0f} MiB)"
    )
    assert peak < limit
    assert (tmp_path / "out.gguf").stat().st_size > total // 2 - 2**20  # F16: half the bytes
