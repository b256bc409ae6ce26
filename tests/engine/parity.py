"""Our engine's side of the llama.cpp comparisons: teacher-forced logits and greedy runs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hearth.engine.runner.forward import ForwardEngine


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
            part,
            np.arange(start, start + m),
            np.full(m, seq),
            np.arange(m),
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
    out = []
    logits = first_logits
    pos = start
    for _ in range(n):
        tok = int(np.argmax(logits))
        out.append(tok)
        logits = engine.forward(np.array([tok]), np.array([pos]), np.array([seq]), np.array([0]))[0]
        pos += 1
    return out


def compare(engine: ForwardEngine, oracle: dict, n_prompts: int, n_greedy: int) -> dict:
    """Run every oracle prompt through `engine`; return agreement figures."""
    agree = total = 0
    max_diff = 0.0
    greedy_equal = 0
    near_ties_missed = []
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
            ours = greedy(engine, tf.last, len(ids), n_greedy)
            greedy_equal += int(ours == [int(t) for t in oracle[f"greedy_{i}"]])
    return {
        "top1": agree / total,
        "positions": total,
        "max_abs_diff": max_diff,
        "greedy_equal": greedy_equal,
        "mismatch_gaps": near_ties_missed,
    }
