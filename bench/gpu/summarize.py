"""The figures of a GPU check report, as lines for the README or a closing note.

python bench/gpu/summarize.py bench/results/gpu-<card>-<date>.json
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _rate(row: dict[str, Any] | None) -> str:
    if not row:
        return "-"
    return f"prompt {row['prompt_tok_s']:.0f} tok/s, generation {row['gen_tok_s']:.0f} tok/s"


def _mib(n: object) -> str:
    return f"{int(n) / (1 << 20):.0f} MiB" if isinstance(n, int | float) else "-"


def summarize(r: dict[str, Any]) -> list[str]:
    out = [f"card: {r.get('card')}; model: {r.get('model')}; errors: {r.get('errors') or 'none'}"]
    parity = r.get("parity") or {}
    for name, c in (parity.get("compare") or {}).items():
        layout = parity["runs"][name]["layout"]
        out.append(
            f"parity {name} ({layout}): same text {c['all_same_text']}, largest logprob "
            f"difference {c['max_logprob_diff']:.4f} (tolerance {r['tolerance_logprob']})"
        )
    for name, run in (parity.get("runs") or {}).items():
        inv = run.get("batch_invariance") or {}
        out.append(f"batch invariance {name}: {inv.get('summary')}")
    speed = r.get("speed") or {}
    lc = speed.get("llamacpp") or {}
    for name in ("cpu", "full", "half"):
        if name in speed:
            out.append(
                f"speed {name}: Hearth {_rate(speed[name])}; llama.cpp {_rate(lc.get(name))}"
            )
    for k, v in (speed.get("ratios") or {}).items():
        out.append(f"ratio {k}: {v:.2f}")
    for name, m in (r.get("memory") or {}).items():
        if isinstance(m, dict) and "layout" in m:
            est = m.get("estimate_before_load") or {}
            got = m.get("runner_measured") or {}
            out.append(
                f"memory {name} ({m['layout']}): estimate on the GPU "
                f"{_mib(sum(est.get(k, 0) for k in ('weights', 'cache', 'graph')))}, runner "
                f"{_mib(sum(got.get(k, 0) for k in ('weights', 'cache', 'graph')))}, nvidia-smi "
                f"delta {_mib(m.get('nvidia_smi_used_delta'))}, process "
                f"{_mib(m.get('nvidia_smi_process'))}"
            )
    refusal = r.get("refusal") or {}
    if refusal:
        out.append(f"refusal: HTTP {refusal['refused']['status']}: {refusal['refused']['message']}")
    vision = r.get("vision") or {}
    if "answers" in vision:
        out.append(
            f"vision: same answer {vision['same_answer']}, projector on the GPU in "
            f"{vision.get('projector_on_gpu')}"
        )
    return out


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print("\n".join(summarize(json.load(f))))
