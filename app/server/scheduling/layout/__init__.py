"""Where a model's layers go: the service's side of the load protocol's layout search.

The contract with the runner (the engine's fit/alloc/commit plugs in here):

1. The service knows the GPUs (`Gpu`: device id, library, free memory) and system memory
   (`SystemMemory`) from discovery, and the placement options (`LayoutOptions`: `num_gpu`,
   `main_gpu`, `tensor_split`, HEARTH_GPU_OVERHEAD, whether other models are loaded).
2. It asks the runner, through any object with
   `async def load(operation: LoadOperation, layout: Layout) -> LoadReply`, to
   * FIT a `Layout` (layers per GPU, the projector's device; everything else on the CPU): the
     runner builds the model and reserves its worst-case graphs without allocating, and answers
     a `MemoryReport`: per device, per layer (blocks, then the output layer) the bytes of
     weights and KV cache it would put there, each device's graph buffer, the CPU-only input
     weights, and a vision projector/encoder's weights and compute buffer;
   * ALLOC the layout: allocate every buffer, read no weights; `success=False` with the report
     so far and the device that ran out (`failed_device`) when an allocation fails;
   * COMMIT: read the weights into the buffers allocated for the same layout;
   * CLOSE: free everything (sent when the search gives up).
3. `plan_layout` turns the latest report into the next layout (pure; `search.py` has the rules).
   `negotiate` runs the loop: plan from an empty report, fit, re-plan until the layout stops
   shrinking, then the same with alloc, setting aside 10% more of the failing GPU's free memory
   per failed allocation (giving up once all of it is set aside), and commits the layout it
   converged on. `explain` says in one sentence where a layout puts the model and why.
4. Who answers FIT: the service, from the model file, without a runner (`layout.fit`:
   weights per layer from the GGUF's tensors, KV cache from the cache settings and head sizes,
   the graph from the service's estimate or the last runner's measurement; `placed_report`
   moves each layer's bytes to the device the layout gives it). `fit.FileFitRunner` answers
   ALLOC/COMMIT with the same report. The runner then starts with the committed layout
   (`--layout`): its start is the real allocation and commit, every buffer on the device the
   layout names; a start that fails there is retried on the CPU (`scheduler.py`), and the bytes
   it reports per device replace the plan's in /api/ps. The scheduler (`load_layout.py`) refuses
   a model too large before starting a runner (HTTP 507 with the numbers) and logs where the
   model runs. (Ollama's runner answers FIT itself with the graph it reserved; here the graph
   of a device is the service's estimate until a runner of the file has measured it.)
5. Refusals: `ModelTooLarge` (a ValueError: the model exceeds GPUs + RAM + swap; the sentence
   gives bytes needed and available per device), `LayoutRequestError` (a ValueError: options
   that cannot be honoured), `LoadRequiresEviction` (other models are loaded and this one does not
   fit fully: the scheduler unloads one and asks again), `LayoutError` (allocation kept failing).
"""

from .memory import (
    CPU,
    DeviceId,
    DeviceMemory,
    GiB,
    Gpu,
    GpuLayers,
    Layout,
    LoadOperation,
    LoadReply,
    MemoryReport,
    MiB,
    SystemMemory,
    human_bytes,
)
from .negotiate import LayoutError, LayoutRunner, Negotiated, negotiate
from .search import (
    LayoutOptions,
    LayoutRequestError,
    LoadRequiresEviction,
    ModelTooLarge,
    Plan,
    explain,
    plan_layout,
)

__all__ = [
    "CPU",
    "DeviceId",
    "DeviceMemory",
    "GiB",
    "Gpu",
    "GpuLayers",
    "Layout",
    "LayoutError",
    "LayoutOptions",
    "LayoutRequestError",
    "LayoutRunner",
    "LoadOperation",
    "LoadReply",
    "LoadRequiresEviction",
    "MemoryReport",
    "MiB",
    "ModelTooLarge",
    "Negotiated",
    "Plan",
    "SystemMemory",
    "human_bytes",
    "explain",
    "negotiate",
    "plan_layout",
]
