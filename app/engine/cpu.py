"""CPU facts that need no ggml (for the llama.cpp engine's process, which must not load
Hearth's ggml; see hearth.engine.llamacpp)."""

from __future__ import annotations

import os

__all__ = ["physical_cores"]


def physical_cores() -> int:
    """Physical cores (hyper-threads not counted): (physical id, core id) pairs in
    /proc/cpuinfo; without it, half the logical CPUs above four."""
    cores: set[tuple[str, str]] = set()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            blocks = f.read().split("\n\n")
    except OSError:
        blocks = []
    for block in blocks:
        fields = dict(
            (k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in block.splitlines())
        )
        if "core id" in fields:
            cores.add((fields.get("physical id", ""), fields["core id"]))
    if cores:
        return len(cores)
    logical = os.cpu_count() or 1
    return max(1, logical // 2 if logical > 4 else logical)
