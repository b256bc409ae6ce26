"""llama.cpp's memory per device, read from its log lines (their formats are llama.cpp's own:
llama-model.cpp, llama-kv-cache.cpp, llama-memory-recurrent.cpp, llama-context.cpp)."""

from __future__ import annotations

from hearth.llamacpp.buffers import device_of_buffer, parse_buffers

MIB = 2**20


def _line(func: str, width: int, name: str, kind: str, mib: float) -> str:
    # LLAMA_LOG_INFO("%s: %10s KV buffer size = %8.2f MiB\n", __func__, name, size)
    return f"{func}: {name:>{width}} {kind} buffer size = {mib:8.2f} MiB"


def test_each_device_gets_its_weights_cache_and_graph():
    lines = [
        "llama_model_loader: - kv  12: general.name str = whatever",
        _line("load_tensors", 12, "CPU_Mapped", "model", 100.0),
        _line("load_tensors", 12, "CUDA0", "model", 1000.5),
        _line("load_tensors", 12, "CUDA1", "model", 900.0),
        _line("llama_kv_cache", 10, "CUDA0", "KV", 64.0),
        _line("llama_kv_cache", 10, "CUDA1", "KV", 32.0),
        _line("llama_memory_recurrent", 10, "CPU", "RS", 2.0),
        f"llama_context: {'CUDA_Host':>10}  output buffer size = {1.0:8.2f} MiB",
        _line("sched_reserve", 10, "CUDA0", "compute", 300.0),
        _line("sched_reserve", 10, "CUDA_Host", "compute", 12.0),
        _line("sched_reserve", 10, "RPC0[10.0.0.2:50052]", "compute", 8.0),
    ]
    got = parse_buffers(lines)
    assert got == {
        "CPU": {"weights": 100 * MIB, "cache": 2 * MIB, "graph": 13 * MIB},
        "CUDA0": {"weights": int(1000.5 * MIB), "cache": 64 * MIB, "graph": 300 * MIB},
        "CUDA1": {"weights": 900 * MIB, "cache": 32 * MIB, "graph": 0},
        "RPC0": {"weights": 0, "cache": 0, "graph": 8 * MIB},
    }


def test_host_buffers_are_the_cpus():
    for name in ("CPU", "CPU_Mapped", "CPU_REPACK", "CUDA_Host", "Vulkan_Host"):
        assert device_of_buffer(name) == "CPU"
    assert device_of_buffer("Vulkan1") == "Vulkan1"
