"""Running llama.cpp as an oracle in a separate process (it loads its own libggml): the
shipped logits oracle (`hearth.plugins.testing`) or a test's own script in oracles/."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hearth.plugins.testing import LLAMACPP_LOGITS
from hearth.plugins.testing import run_oracle as run_script

ORACLES = Path(__file__).resolve().parent / "oracles"


def run_oracle(
    script: str, request: dict, tmp_path: Path, timeout: int = 900, tiled: bool = False
) -> dict[str, np.ndarray]:
    """Run oracle `script` ("llamacpp_logits" or one in oracles/); see run_oracle in
    hearth.plugins.testing.parity for `tiled`."""
    path = LLAMACPP_LOGITS if script == LLAMACPP_LOGITS.stem else ORACLES / f"{script}.py"
    return run_script(path, request, tmp_path, timeout, tiled)


def llamacpp_greedy_text(model: Path, prompt: str, n: int, tmp_path: Path) -> str:
    """What llama.cpp generates greedily (raw prompt, BOS per the file, no repeat penalty)
    for up to `n` tokens, stopping at end of generation."""
    oracle = run_oracle(
        "llamacpp_logits",
        {
            "model": str(model),
            "n_ctx": 256,
            "prompts": [{"text": prompt}],
            "greedy": n,
            "stop_at_eog": True,
        },
        tmp_path,
    )
    if not len(oracle["greedy_0"]):
        return ""
    return bytes(oracle["greedy_text_0"]).decode("utf-8", "replace")
