"""Comparing with llama.cpp: running it as an oracle in its own process, and our engine's
side of the comparison (teacher-forced logits and greedy runs over the same token ids)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...engine.forward import ForwardEngine
from ...engine.input import PassInput

__all__ = [
    "LLAMACPP_LOGITS",
    "LlamaCppUnknownArchitectureError",
    "TeacherForced",
    "compare",
    "greedy",
    "llamacpp_installed",
    "run_oracle",
    "teacher_forced",
]

LLAMACPP_LOGITS = Path(__file__).with_name("llamacpp_logits.py")
_UNKNOWN_ARCHITECTURE = 3  # llamacpp_logits.py's exit status


class LlamaCppUnknownArchitectureError(RuntimeError):
    """llama.cpp cannot load the file: it does not know its architecture."""


def llamacpp_installed() -> bool:
    """Whether llama-cpp-python is installed (looked up, not imported: it must never be
    imported next to Hearth's ggml)."""
    return importlib.util.find_spec("llama_cpp") is not None


def run_oracle(
    script: str | os.PathLike[str],
    request: dict[str, Any],
    tmp_dir: str | os.PathLike[str],
    timeout: int = 900,
    tiled: bool = False,
) -> dict[str, np.ndarray]:
    """Run a llama.cpp oracle script (`LLAMACPP_LOGITS`, or a script of the same form: it
    reads a JSON request and writes an npz) in a separate process; returns the npz.

    llama.cpp's newer ggml has "tiled" K-quant matmul kernels (on by default for batches of 8+
    rows) that the ggml release pinned for our engine lacks; they round differently. With
    `tiled=False` (GGML_CPU_TILED_MM=0, llama.cpp's own switch) both engines run the same
    kernels, so any difference left is a difference in the model code. The script may import
    `use_plain_layouts` from `llamacpp_logits` (its folder is on the path).
    """
    script, tmp = Path(script), Path(tmp_dir)
    req = tmp / f"{script.stem}.request.json"
    out = tmp / f"{script.stem}.{'tiled' if tiled else 'ref'}.npz"
    req.write_text(json.dumps(request))
    paths = [str(LLAMACPP_LOGITS.parent), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    env = dict(os.environ, GGML_CPU_TILED_MM="1" if tiled else "0")
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    proc = subprocess.run(
        [sys.executable, str(script), str(req), str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if proc.returncode == _UNKNOWN_ARCHITECTURE:
        raise LlamaCppUnknownArchitectureError(proc.stderr.strip())
    if proc.returncode != 0:
        raise RuntimeError(f"oracle {script.name} failed:\n{proc.stderr[-3000:]}")
    with np.load(out) as data:
        return {k: data[k] for k in data.files}


@dataclass
class TeacherForced:
    argmax: np.ndarray  # [n]
    rows: np.ndarray  # [len(rows_idx), vocab]
    last: np.ndarray  # [vocab]


def teacher_forced(
    engine: ForwardEngine, ids: np.ndarray, rows_idx: np.ndarray, chunk: int = 512, seq: int = 0
) -> TeacherForced:
    """Evaluate `ids` from position 0 in chunks, keeping the logits of every position. The
    default chunk equals the oracle's batch size, so both engines run the same kernels."""
    engine.cache.remove(seq, 0)
    n = len(ids)
    argmax = np.empty(n, dtype=np.int32)
    wanted = {int(i): k for k, i in enumerate(rows_idx)}
    rows = np.empty((len(rows_idx), engine.vocab_size), dtype=np.float32)
    last = None
    for start in range(0, n, chunk):
        part = ids[start : start + chunk]
        m = len(part)
        logits = engine.forward(
            PassInput(part, np.arange(start, start + m), np.full(m, seq), np.arange(m)),
        )
        argmax[start : start + m] = logits.argmax(-1)
        for j in range(m):
            k = wanted.get(start + j)
            if k is not None:
                rows[k] = logits[j]
        last = logits[-1]
    assert last is not None
    return TeacherForced(argmax, rows, last.copy())


def greedy(
    engine: ForwardEngine, first_logits: np.ndarray, start: int, n: int, seq: int = 0
) -> list[int]:
    """Continue greedily for n tokens after a prompt of length `start` already in the cache."""
    return greedy_with_rows(engine, first_logits, start, n, seq)[0]


def greedy_with_rows(
    engine: ForwardEngine, first_logits: np.ndarray, start: int, n: int, seq: int = 0
) -> tuple[list[int], list[np.ndarray]]:
    """`greedy`, also returning the logits row each token was chosen from."""
    out: list[int] = []
    rows: list[np.ndarray] = []
    logits = first_logits
    pos = start
    for _ in range(n):
        tok = int(np.argmax(logits))
        out.append(tok)
        rows.append(np.asarray(logits).copy())
        logits = engine.forward(
            PassInput(np.array([tok]), np.array([pos]), np.array([seq]), np.array([0]))
        )[0]
        pos += 1
    return out, rows


# Where two greedy continuations first part, the step is a near-tie when our two candidates'
# logits lie within this share of the row's largest |logit|. Teacher-forced rows are computed
# in batches by both engines (the same kernels: equal to 1e-4), but greedy steps are lone rows,
# where each engine's few-rows kernels differ from its batch ones by up to the conformance
# suite's batch tolerance (2% of the largest |logit|), and which steps tip differs between CPUs
# (measured on an AVX-512 Xeon: partings at 0.1-0.5% of the largest |logit|). A parting within
# that spread is a kernel-level tie, not a disagreement; a wrong model parts at a clear gap.
GREEDY_TIE = 0.02


def diverged_at_tie(
    ours: list[int], theirs: list[int], rows: list[np.ndarray], tie: float = GREEDY_TIE
) -> bool:
    """Whether `ours` and `theirs` first differ at a step whose logits make it a near-tie."""
    for step, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        if a != b:
            row = rows[step]
            scale = float(np.abs(row).max()) or 1.0
            return abs(float(row[a]) - float(row[b])) <= tie * scale
    return False


def compare(
    engine: ForwardEngine,
    oracle: dict[str, np.ndarray],
    n_prompts: int,
    n_greedy: int,
    tie: float = GREEDY_TIE,
) -> dict[str, Any]:
    """Run every oracle prompt through `engine`; return agreement figures: `top1` (share of
    positions with llama.cpp's top token), `positions`, `max_abs_diff` (over the sampled
    full rows), `greedy_equal` (greedy continuations identical, or identical up to the step
    where they part at a near-tie, `GREEDY_TIE`), `greedy_ties` (how many of those parted at a
    near-tie) and `mismatch_gaps` (the top-2 logit gap where the top tokens differ: near-ties
    are expected there)."""
    agree = total = 0
    max_diff = 0.0
    greedy_equal = ties = 0
    near_ties_missed: list[float] = []
    for i in range(n_prompts):
        ids = oracle[f"ids_{i}"]
        tf = teacher_forced(engine, ids, oracle[f"rows_idx_{i}"])
        theirs = oracle[f"argmax_{i}"]
        agree += int((tf.argmax == theirs).sum())
        total += len(ids)
        max_diff = max(max_diff, float(np.abs(tf.rows - oracle[f"rows_{i}"]).max()))
        for p in np.flatnonzero(tf.argmax != theirs):
            vals = oracle[f"topk_vals_{i}"][p]
            near_ties_missed.append(float(vals[0] - vals[1]))
        if n_greedy:
            ours, rows = greedy_with_rows(engine, tf.last, len(ids), n_greedy)
            theirs_greedy = [int(t) for t in oracle[f"greedy_{i}"]]
            parted = diverged_at_tie(ours, theirs_greedy, rows, tie)
            parted_at_tie = ours != theirs_greedy and parted
            greedy_equal += int(ours == theirs_greedy or parted_at_tie)
            ties += int(parted_at_tie)
    return {
        "top1": agree / total,
        "positions": total,
        "max_abs_diff": max_diff,
        "greedy_equal": greedy_equal,
        "greedy_ties": ties,
        "mismatch_gaps": near_ties_missed,
    }
