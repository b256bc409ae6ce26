"""The machine a benchmark ran on, printed at the top of its output: figures from an AVX2-only
CPU and from one with AVX-512 differ, and so do ggml builds with and without its SIMD paths."""

from __future__ import annotations

import platform

_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni",
          "avx512_bf16", "amx_int8", "asimd", "sve")  # fmt: skip
_GGML = ("avx2", "avx512", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "neon", "sve")


def cpu_description() -> str:
    """'CPU <model>; SIMD <flags>; ggml built with <features>' in one line."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    model = value.strip()
                elif key.strip() in ("flags", "Features"):
                    flags.update(value.split())
    except OSError:
        pass
    simd = " ".join(f for f in _FLAGS if f in flags) or "unknown"
    try:
        import ggml

        built = " ".join(f for f in _GGML if getattr(ggml, f"ggml_cpu_has_{f}", lambda: 0)())
    except ImportError:
        built = "unknown"
    return f"CPU {model}; SIMD {simd}; ggml built with {built or 'no SIMD extensions'}"
