"""Where a model's layers go: the layout, planned by the service from the model file.

The layout is planned, not negotiated with the runner:

1. The service knows the GPUs (`Gpu`: device id, library, free memory) and system memory
   (`SystemMemory`) from discovery, and the placement options (`LayoutOptions`: `num_gpu`,
   `main_gpu` from the request, `tensor_split`, `spread`, HEARTH_GPU_OVERHEAD, whether other
   models are loaded, HEARTH_GPU_CONTEXT: what a runner's CUDA context and cuBLAS workspace take
   on each GPU it uses, else `BACKEND_CONTEXT`'s measured constant per library).
2. It computes from the model file what the model takes (`fit`: weights per layer from the
   GGUF's tensors, KV cache from the cache settings and head sizes, the graph from the
   service's estimate or the last runner's measurement; `placed_report` moves each layer's
   bytes to the device a layout gives it).
3. `plan_from_file` (`planning.py`) plans the layout from that report, re-planning while the
   layout shrinks (a GPU's graph buffer counts only once it holds layers); `plan_layout`
   (`search.py`, pure) has the rules, and `explain` says in one sentence where a layout puts
   the model and why.
4. The runner starts with that layout (`--layout`): its start is the real allocation, every
   buffer on the device the layout names. No fit/alloc/commit exchange happens before, because
   only the runner's real allocation can say whether memory suffices (another program may hold
   what discovery saw free, the graph is an estimate): a start that fails for lack of memory is
   retried on the CPU (`scheduler.py`), and the bytes the runner reports per device replace the
   plan's in /api/ps. The scheduler (`load_layout.py`) refuses a model too large before starting
   a runner (HTTP 507 with the numbers) and logs where the model runs.
5. Refusals: `ModelTooLarge` (a ValueError: the model exceeds GPUs + RAM + swap; the sentence
   gives bytes needed and available per device), `LayoutRequestError` (a ValueError: options
   that cannot be honoured), `LoadRequiresEviction` (other models are loaded and this one does not
   fit fully: the scheduler unloads one and asks again).
"""

from .memory import (
    BACKEND_CONTEXT,
    CPU,
    DeviceId,
    DeviceMemory,
    GiB,
    Gpu,
    GpuLayers,
    Layout,
    MemoryReport,
    MiB,
    SystemMemory,
    human_bytes,
)
from .planning import FilePlan, plan_from_file
from .search import (
    LayoutOptions,
    LayoutRequestError,
    LoadRequiresEviction,
    ModelTooLarge,
    Plan,
    backend_context,
    explain,
    plan_layout,
)

__all__ = [
    "BACKEND_CONTEXT",
    "CPU",
    "DeviceId",
    "DeviceMemory",
    "FilePlan",
    "GiB",
    "Gpu",
    "GpuLayers",
    "Layout",
    "LayoutOptions",
    "LayoutRequestError",
    "LoadRequiresEviction",
    "MemoryReport",
    "MiB",
    "ModelTooLarge",
    "Plan",
    "SystemMemory",
    "backend_context",
    "explain",
    "human_bytes",
    "plan_from_file",
    "plan_layout",
]
