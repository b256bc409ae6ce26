"""Running llama.cpp as an oracle in a separate process (it loads its own libggml)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ORACLES = Path(__file__).resolve().parent / "oracles"


def run_oracle(
    script: str, request: dict, tmp_path: Path, timeout: int = 900, tiled: bool = False
) -> dict:
    """Run a llama.cpp oracle script in a separate process; returns its npz as a dict.

    llama.cpp's newer ggml has "tiled" K-quant matmul kernels (on by default for batches of 8+
    rows) that the ggml release pinned for our engine lacks; they round differently. With
    `tiled=False` (GGML_CPU_TILED_MM=0, llama.cpp's own switch) both engines run the same
    kernels, so any difference left is a difference in the model code.
    """
    req = tmp_path / f"{script}.request.json"
    out = tmp_path / f"{script}.{'tiled' if tiled else 'ref'}.npz"
    req.write_text(json.dumps(request))
    env = dict(os.environ, GGML_CPU_TILED_MM="1" if tiled else "0")
    proc = subprocess.run(
        [sys.executable, str(ORACLES / f"{script}.py"), str(req), str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"oracle {script} failed:\n{proc.stderr[-3000:]}")
    with np.load(out) as data:
        return {k: data[k] for k in data.files}
