"""CPU facts that need no ggml (for the llama.cpp engine's process, which must not load
Hearth's ggml; see hearth.llamacpp).

`compute_threads()` is the default compute thread count of every engine: one thread per
physical performance core this process may run on. As llama.cpp's `cpu_get_num_math` and
Ollama's discovery do, a hybrid CPU's efficiency cores are left out (a ggml graph waits at
every op for its slowest thread, so an E-core thread slows the whole pool) and hyper-threads
are not counted (two threads on one core share its vector units). Linux names a hybrid Intel
CPU's performance cores in `/sys/devices/cpu_core/cpus` (the `cpu_core` PMU; `cpu_atom` holds
the efficiency cores); llama.cpp asks CPUID leaf 0x1A per CPU instead, which needs pinning a
thread to each. Elsewhere (no such file: not hybrid, not Linux, a VM that hides it) every
physical core counts, from /proc/cpuinfo's (physical id, core id) pairs; without those, half
the logical CPUs above four.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["compute_threads", "parse_cpu_list", "performance_cpus", "physical_cores"]

_HYBRID_LISTS = ("devices/cpu_core/cpus", "bus/event_source/devices/cpu_core/cpus")


def parse_cpu_list(text: str) -> set[int]:
    """A kernel CPU list ("0-7,16,18-19") as a set of CPU numbers (ValueError when malformed)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def _allowed() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return None


def performance_cpus(sys_root: str | Path = "/sys") -> set[int] | None:
    """The logical CPUs of a hybrid CPU's performance cores, or None when the kernel names
    none (not a hybrid CPU, or not Linux)."""
    for name in _HYBRID_LISTS:
        try:
            cpus = parse_cpu_list((Path(sys_root) / name).read_text())
        except (OSError, ValueError):
            continue
        if cpus:
            return cpus
    return None


def _cores_by_cpu(cpuinfo: str | Path) -> dict[int, tuple[str, str]]:
    """Logical CPU number -> (physical id, core id), from /proc/cpuinfo (empty without)."""
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as f:
            blocks = f.read().split("\n\n")
    except OSError:
        return {}
    cores: dict[int, tuple[str, str]] = {}
    for block in blocks:
        fields = {
            k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in block.splitlines())
        }
        if "core id" in fields and fields.get("processor", "").isdigit():
            cores[int(fields["processor"])] = (fields.get("physical id", ""), fields["core id"])
    return cores


def physical_cores(
    cpus: set[int] | None = None, cpuinfo: str | Path = "/proc/cpuinfo", logical: int = 0
) -> int:
    """Physical cores among the logical `cpus` (None: all), hyper-threads not counted: distinct
    (physical id, core id) pairs in `cpuinfo`; without them, half of `logical` (default: the
    CPUs given, else os.cpu_count()) above four."""
    cores = _cores_by_cpu(cpuinfo)
    found = {core for cpu, core in cores.items() if cpus is None or cpu in cpus}
    if found:
        return len(found)
    logical = logical or (len(cpus) if cpus else os.cpu_count() or 1)
    return max(1, logical // 2 if logical > 4 else logical)


def compute_threads(
    sys_root: str | Path = "/sys",
    cpuinfo: str | Path = "/proc/cpuinfo",
    allowed: set[int] | None = None,
) -> int:
    """The default compute thread count: physical performance cores among the CPUs this
    process may run on (`allowed`, default its affinity; see the module docstring)."""
    allowed = _allowed() if allowed is None else allowed
    usable = allowed
    fast = performance_cpus(sys_root)
    if fast is not None:
        usable = fast & allowed if allowed is not None else fast
        if not usable:  # pinned to efficiency cores only: they are what there is
            usable = allowed
    return physical_cores(usable, cpuinfo)
