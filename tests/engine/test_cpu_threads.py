"""Default thread counts and runners taking turns on the CPU (issue 33, item 4).

The thread count is checked on fake sysfs and /proc/cpuinfo trees whose answer is known by
construction: a hybrid CPU with 8 hyper-threaded performance cores and 8 efficiency cores
(llama.cpp's `cpu_get_num_math` and Ollama's discovery both answer 8), the same CPU where the
kernel hides the split (every physical core counts), and affinity masks. The turns are checked
against the kernel's own lock: while one process holds the lock file, another's compute waits,
and `flock(LOCK_NB)` from a third process fails.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from hearth.engine import cpu_turns
from hearth.engine.cpu import compute_threads, parse_cpu_list, physical_cores

fcntl = pytest.importorskip("fcntl")


def fake_cpuinfo(path: Path, cores: list[tuple[int, list[int]]]) -> Path:
    """/proc/cpuinfo for (core id, its logical CPUs) pairs, one socket."""
    blocks = []
    for core, cpus in cores:
        for cpu in cpus:
            blocks.append(
                f"processor\t: {cpu}\nvendor_id\t: GenuineIntel\nphysical id\t: 0\n"
                f"siblings\t: 24\ncore id\t\t: {core}\ncpu cores\t: 16\nflags\t\t: fpu avx2\n"
            )
    path.write_text("\n".join(sorted(blocks, key=lambda b: int(b.split()[2]))))
    return path


def hybrid(tmp_path: Path, split_visible: bool = True) -> tuple[Path, Path]:
    """A 13th-gen-like part: P-cores 0-7 with two threads each (CPUs 0-15), E-cores 8-15 with
    one (CPUs 16-23)."""
    cores = [(c, [2 * c, 2 * c + 1]) for c in range(8)] + [(8 + e, [16 + e]) for e in range(8)]
    info = fake_cpuinfo(tmp_path / "cpuinfo", cores)
    sys_root = tmp_path / "sys"
    if split_visible:
        (sys_root / "devices" / "cpu_core").mkdir(parents=True)
        (sys_root / "devices" / "cpu_atom").mkdir(parents=True)
        (sys_root / "devices" / "cpu_core" / "cpus").write_text("0-15\n")
        (sys_root / "devices" / "cpu_atom" / "cpus").write_text("16-23\n")
    else:
        sys_root.mkdir()
    return sys_root, info


ALL = set(range(24))


def test_cpu_lists_parse_as_the_kernel_writes_them():
    assert parse_cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert parse_cpu_list("5") == {5}
    with pytest.raises(ValueError):
        parse_cpu_list("a-b")


def test_a_hybrid_cpu_computes_on_its_performance_cores_only(tmp_path):
    sys_root, info = hybrid(tmp_path)
    assert compute_threads(sys_root, info, ALL) == 8
    # the other place the kernel lists them (the PMU's event source)
    alt = tmp_path / "alt"
    (alt / "bus" / "event_source" / "devices" / "cpu_core").mkdir(parents=True)
    (alt / "bus" / "event_source" / "devices" / "cpu_core" / "cpus").write_text("0-15")
    assert compute_threads(alt, info, ALL) == 8


def test_affinity_limits_the_cores_counted(tmp_path):
    sys_root, info = hybrid(tmp_path)
    assert compute_threads(sys_root, info, {0, 1, 2, 3, 16, 17}) == 2  # two P-cores allowed
    assert compute_threads(sys_root, info, {18, 19, 20}) == 3  # only E-cores: they count


def test_without_the_hybrid_split_every_physical_core_counts(tmp_path):
    sys_root, info = hybrid(tmp_path, split_visible=False)
    assert compute_threads(sys_root, info, ALL) == 16
    assert compute_threads(sys_root, info, {0, 1}) == 1  # two threads of one core


def test_without_cpuinfo_half_the_logical_cpus_above_four(tmp_path):
    missing = tmp_path / "none"
    assert physical_cores(set(range(8)), missing) == 4
    assert physical_cores({0, 1, 2}, missing) == 3
    assert compute_threads(tmp_path, missing, set(range(16))) == 8


def test_this_machine_gets_at_least_one_thread():
    assert 1 <= compute_threads() <= (len(__import__("os").sched_getaffinity(0)))


# ---- turns -------------------------------------------------------------------------------


def held_elsewhere(path: Path) -> bool:
    """Whether another process finds the lock taken (the kernel's answer, not ours)."""
    code = (
        "import fcntl, os, sys\n"
        f"fd = os.open({str(path)!r}, os.O_RDWR)\n"
        "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept OSError:\n"
        "    sys.exit(1)\nsys.exit(0)\n"
    )
    return subprocess.run([sys.executable, "-c", code]).returncode == 1


def test_a_turn_is_the_kernel_s_lock_on_the_shared_file(tmp_path):
    lock = tmp_path / "cpu.lock"
    turns = cpu_turns.turns_from_env({"HEARTH_CPU_SHARE": str(lock)})
    assert turns is not None
    with turns.turn():
        assert held_elsewhere(lock)
    assert not held_elsewhere(lock)
    # one per process and path: a model and its draft model share it
    assert cpu_turns.turns_from_env({"HEARTH_CPU_SHARE": str(lock)}) is turns
    assert cpu_turns.turns_from_env({}) is None
    assert cpu_turns.turns_from_env({"HEARTH_CPU_SHARE": "off"}) is None


def test_the_service_gives_runners_one_lock_unless_told():
    given = cpu_turns.runner_env({})
    assert given == {"HEARTH_CPU_SHARE": str(cpu_turns.default_lock_path())}
    assert cpu_turns.runner_env({"HEARTH_CPU_SHARE": "off"}) == {}
    assert cpu_turns.runner_env({"HEARTH_CPU_SHARE": "/x/y.lock"}) == {}


def test_a_cpu_graph_waits_for_its_turn(tmp_path, monkeypatch):
    """A backend started with turns computes only while no other process holds the lock."""
    from hearth.engine.ml.ggml import GGMLBackend

    lock = tmp_path / "cpu.lock"
    monkeypatch.setenv("HEARTH_CPU_SHARE", str(lock))
    backend = GGMLBackend(num_threads=1)
    try:
        assert backend.cpu_turns is not None
        ctx = backend.new_context()
        x = ctx.from_numpy(np.arange(4, dtype=np.float32))
        y = ctx.add(x, x)
        other = subprocess.Popen(
            [sys.executable, "-c",
             "import fcntl, os, sys, time\n"
             f"fd = os.open({str(lock)!r}, os.O_RDWR | os.O_CREAT)\n"
             "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(1.0)\n"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert other.stdout is not None and other.stdout.readline().strip() == "held"
        done: list[float] = []
        started = time.monotonic()
        worker = threading.Thread(target=lambda: (ctx.compute(y), done.append(time.monotonic())))
        worker.start()
        worker.join(10)
        other.wait(10)
        assert done and done[0] - started >= 0.5  # it waited for the other process's turn
        assert list(y.numpy()) == [0.0, 2.0, 4.0, 6.0]
        ctx.close()
    finally:
        backend.close()
