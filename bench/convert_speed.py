"""Conversion speed and memory: `hearth create -f DIR` (hearth.convert) beside llama.cpp's
`convert_hf_to_gguf.py`, same checkpoint, same run.

    .venv/bin/python bench/convert_speed.py [--hidden 2048] [--layers 16] [--ffn 8192]
                                            [--vocab 32000] [--rounds 3]
                                            [--schemes f16,q8_0,q4_K_M] [--folder DIR]

It writes a random BF16 Llama checkpoint (default: Llama-3.2-1B-shaped but for a 32000-token
vocabulary, 1.1 B parameters, 2.2 GB of safetensors in two shards) to a temporary folder, then
per round converts it with each tool in its own process (alternating which goes first) and
deletes each output once measured; figures are medians over rounds. For q4_K_M, which
llama.cpp's converter cannot write, llama.cpp's side is its F16 conversion followed by
`llama_model_quantize` (what `llama-quantize` runs): both times added, the larger peak kept.
Ratios above 1 mean Hearth is faster. Peak RSS is the child's ru_maxrss; the bound Hearth
aims for is 1.5 x the largest tensor (as F32, the form it is worked in) + 500 MB. Hearth's
run skips the final load check (`registry=None`), which llama.cpp's converter has no
counterpart of. Disk: the checkpoint plus two outputs at most (about 7 GB by default).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "convert"))

MB = 1e6
_HEARTH = """
import sys
from hearth.convert import convert_checkpoint
from hearth.plugins.registry import default_converters
src, out, scheme = sys.argv[1:4]
convert_checkpoint(src, out, converters=default_converters(), quantize=scheme)
"""
_ORACLE = REPO / "app" / "plugins" / "testing" / "llamacpp_quantize.py"
_CPU = (
    "import sys; sys.path.insert(0, 'bench'); from machine import cpu_description as d; print(d())"
)
_CONVERTER = "from hearth.plugins.testing import llamacpp_converter; print(llamacpp_converter())"


@dataclass
class Run:
    seconds: float
    peak_rss: int  # bytes
    out_bytes: int


def _measure(*commands: tuple[list[str], dict[str, str] | None], out: Path) -> Run:
    """Run `commands` one after the other, each in its own process; their added wall times,
    the largest peak RSS and the size of `out`."""
    seconds, peak = 0.0, 0
    for cmd, env in commands:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds += time.perf_counter() - start
        if proc.returncode:
            raise SystemExit(f"{' '.join(cmd[:3])} failed:\n{err.decode(errors='replace')[-3000:]}")
        peak = max(peak, usage.ru_maxrss * 1024)  # KiB on Linux
    return Run(seconds, peak, out.stat().st_size)


def _child_output(args: list[str]) -> str:
    """The last line a Python child prints."""
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=REPO)
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    return proc.stdout.strip().splitlines()[-1]


# -- the checkpoint -------------------------------------------------------------------------


def _shapes(a: argparse.Namespace) -> dict[str, tuple[int, ...]]:
    head = a.hidden // a.heads
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (a.vocab, a.hidden)}
    for i in range(a.layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (a.hidden,),
            p + "self_attn.q_proj.weight": (a.hidden, a.hidden),
            p + "self_attn.k_proj.weight": (a.kv_heads * head, a.hidden),
            p + "self_attn.v_proj.weight": (a.kv_heads * head, a.hidden),
            p + "self_attn.o_proj.weight": (a.hidden, a.hidden),
            p + "post_attention_layernorm.weight": (a.hidden,),
            p + "mlp.gate_proj.weight": (a.ffn, a.hidden),
            p + "mlp.up_proj.weight": (a.ffn, a.hidden),
            p + "mlp.down_proj.weight": (a.hidden, a.ffn),
        }
    return shapes | {"model.norm.weight": (a.hidden,), "lm_head.weight": (a.vocab, a.hidden)}


def build_checkpoint(folder: Path, a: argparse.Namespace) -> tuple[int, int]:
    """A random BF16 `LlamaForCausalLM` folder (shards of about 1 GB, SentencePiece
    tokenizer padded to `a.vocab`); returns (safetensors bytes, largest tensor's elements)."""
    import torch
    from hf_models import LLAMA_TEMPLATE, train_spm
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.model").write_bytes(train_spm(400))
    special = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"add_bos_token": True, "add_eos_token": False, **special,
                    "chat_template": LLAMA_TEMPLATE, "tokenizer_class": "LlamaTokenizer"})
    )  # fmt: skip
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": a.hidden, "intermediate_size": a.ffn, "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
        "vocab_size": a.vocab, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0, "bos_token_id": 1, "eos_token_id": 2,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "hidden_act": "silu",
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    gen = torch.Generator().manual_seed(0)
    shapes = _shapes(a)
    groups: list[list[str]] = [[]]
    size = 0
    for name, shape in shapes.items():
        nbytes = 2 * int(torch.Size(shape).numel())
        if size and size + nbytes > 1 << 30:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += nbytes
    index: dict[str, str] = {}
    for k, names in enumerate(groups):
        shard = {}
        for name in names:
            shape = shapes[name]
            if len(shape) == 1:
                t = 1 + 0.1 * torch.randn(shape, generator=gen)
            else:
                t = torch.randn(shape, generator=gen) * shape[1] ** -0.5
            shard[name] = t.to(torch.bfloat16)
        file = f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors"
        save_file(shard, str(folder / file), metadata={"format": "pt"})
        index |= dict.fromkeys(shard, file)
        del shard
    total = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": index})
    )
    largest = max(int(torch.Size(s).numel()) for s in shapes.values())
    return total, largest


# -- the two sides ---------------------------------------------------------------------------


def hearth(src: Path, out: Path, scheme: str) -> Run:
    return _measure(([sys.executable, "-c", _HEARTH, str(src), str(out), scheme], None), out=out)


def llamacpp(src: Path, out: Path, scheme: str, converter: Path) -> Run:
    env = dict(os.environ, PYTHONPATH=str(converter / "gguf-py"))
    script = str(converter / "convert_hf_to_gguf.py")
    if scheme in ("f16", "q8_0", "f32"):
        cmd = [sys.executable, script, str(src), "--outfile", str(out), "--outtype", scheme]
        return _measure((cmd, env), out=out)
    f16 = out.with_suffix(".f16.gguf")
    convert = [sys.executable, script, str(src), "--outfile", str(f16), "--outtype", "f16"]
    quantize = [sys.executable, str(_ORACLE), str(f16), str(out), scheme.upper()]
    try:
        return _measure((convert, env), (quantize, None), out=out)
    finally:
        f16.unlink(missing_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--ffn", type=int, default=8192)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--schemes", default="f16,q8_0,q4_K_M")
    ap.add_argument("--folder", type=Path, default=None, help="where the temporary files go")
    ap.add_argument("--build-into", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build_into:  # the child that writes the checkpoint
        print(json.dumps(build_checkpoint(args.build_into, args)))
        return
    # This process stays small (no torch, no Hearth): a child's ru_maxrss starts from its
    # parent's resident size at fork, so the checkpoint and the converter's path come from
    # children, and the floor every measurement starts from is printed.
    converter = Path(_child_output(["-c", _CONVERTER]))
    floor = _measure(([sys.executable, "-c", "pass"], None), out=Path(sys.executable))
    work = Path(tempfile.mkdtemp(prefix="hearth-convert-bench-", dir=args.folder))
    try:
        src = work / "checkpoint"
        started = time.perf_counter()
        total, largest = json.loads(
            _child_output([__file__, "--build-into", str(src), *sys.argv[1:]])
        )
        print(_child_output(["-c", _CPU]))
        print(
            f"checkpoint: random BF16 Llama, hidden {args.hidden}, {args.layers} layers, ffn "
            f"{args.ffn}, vocab {args.vocab}: {total / MB:.0f} MB of safetensors "
            f"(built in {time.perf_counter() - started:.0f} s); {os.cpu_count()} CPUs, "
            f"{args.rounds} rounds, medians; ratio = llama.cpp time / Hearth time"
        )
        bound = 1.5 * largest * 4 + 500 * MB
        print(
            f"largest tensor {largest * 2 / MB:.0f} MB as BF16, {largest * 4 / MB:.0f} MB as "
            f"F32; peak RSS bound 1.5 x {largest * 4 / MB:.0f} + 500 = {bound / MB:.0f} MB "
            f"(a child doing nothing peaks at {floor.peak_rss / MB:.0f} MB here)"
        )
        schemes = args.schemes.split(",")
        runs: dict[tuple[str, str], list[Run]] = {}
        for r in range(args.rounds):
            for scheme in schemes:
                for side in ("hearth", "llama.cpp")[:: 1 if r % 2 == 0 else -1]:
                    out = work / f"{side}.{scheme}.gguf"
                    if side == "hearth":
                        run = hearth(src, out, scheme)
                    else:
                        run = llamacpp(src, out, scheme, converter)
                    out.unlink()
                    runs.setdefault((side, scheme), []).append(run)
        head = ("", "Hearth s", "MB/s", "peak MB", "llama.cpp s", "MB/s", "peak MB", "ratio")
        print(
            f"{head[0]:8}{head[1]:>10}{head[2]:>8}{head[3]:>9}{head[4]:>13}{head[5]:>8}"
            f"{head[6]:>9}{head[7]:>7}   Hearth peak vs bound; output MB Hearth/llama.cpp"
        )
        for scheme in schemes:
            ours, theirs = runs["hearth", scheme], runs["llama.cpp", scheme]
            o = statistics.median(x.seconds for x in ours)
            t = statistics.median(x.seconds for x in theirs)
            o_rss = max(x.peak_rss for x in ours)
            t_rss = max(x.peak_rss for x in theirs)
            verdict = "within" if o_rss <= bound else "OVER"
            print(
                f"{scheme:8}{o:10.1f}{total / MB / o:8.0f}{o_rss / MB:9.0f}{t:13.1f}"
                f"{total / MB / t:8.0f}{t_rss / MB:9.0f}{t / o:7.2f}   {verdict} "
                f"({o_rss / bound:.0%}); {ours[0].out_bytes / MB:.0f}/"
                f"{theirs[0].out_bytes / MB:.0f}"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
