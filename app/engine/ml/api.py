"""The tensor API that model plugins and the engine core build graphs with.

This module holds its `Context` (one graph: the ops and running it), its `Backend` (devices,
persistent tensors, the scheduler), their options (`CacheConfig`, `RopeOptions`) and
`OutOfMemoryError`; the tensors and element types (`Tensor`, `DType`) are tensor.py's.
Implementations: ggml.py (ggml_context.py, ggml_ops.py) and reference.py.

Conventions (the same as ggml, and as Ollama's `ml` package):

* Shapes are in **ggml order**: dimension 0 is the fastest-varying (contiguous) one. A hidden
  state is `[hidden, tokens]`; per-head projections are `[head_dim, heads, tokens]`. A numpy
  array of the same data has the reversed shape (`Tensor.numpy()` returns it that way).
* A `Context` holds one graph. Ops only *build* nodes; nothing runs until `Context.compute()`.
  Model plugins build, they never compute: the engine decides when to run (and may run the
  same built graph again for a later batch whose shapes are equal, after refilling its inputs).
* Inputs are created with `Context.input()` (optionally with data). Their values are uploaded
  when the graph computes, so a plugin can create them at any point while building.
* Weights and cache tensors are *persistent*: they belong to the backend, live across
  contexts and may be used by any graph.

Threading: a Context is used by one thread at a time. Different contexts may be built on
different threads while another graph computes; `compute()` calls are serialised by the
backend. The native calls release the GIL.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .tensor import DType, Tensor, trim_shape

__all__ = [
    "Context",
    "Backend",
    "CacheConfig",
    "RopeOptions",
    "OutOfMemoryError",
]


class OutOfMemoryError(MemoryError):
    """An allocation failed. `needed` and `available` are bytes where known (else 0)."""

    def __init__(self, message: str, needed: int = 0, available: int = 0) -> None:
        super().__init__(message)
        self.needed = needed
        self.available = available


@dataclass(frozen=True)
class CacheConfig:
    """How the backend wants the KV cache laid out (Ollama's `ml.CacheConfig`).

    padding: the visible cache length is rounded up to a multiple of this.
    permuted_v: store V as `[cells, head_dim, kv_heads]` so `V·softmax` needs no copy.
    mask_dtype: element type of attention masks (F16 is what flash attention wants).
    """

    padding: int = 256
    permuted_v: bool = True
    mask_dtype: DType = DType.F32


@dataclass(frozen=True)
class RopeOptions:
    """Rotary position embedding parameters (ggml_rope_ext)."""

    dims: int
    base: float = 10000.0
    scale: float = 1.0  # frequency scale = 1 / linear scaling factor
    neox: bool = False  # GPT-NeoX layout (rotate halves) instead of interleaved pairs
    original_context: int = 0
    ext_factor: float = 0.0
    attn_factor: float = 1.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0


class Context(abc.ABC):
    """Builds one graph. Every op returns a new Tensor; see the module docstring.

    `row_groups` (set by the engine for each pass): for operands with that many rows, the
    (start, count) runs belonging to one sequence each. Implementations use it to keep a
    sequence's numbers independent of the rest of the batch where kernels would not.
    """

    row_groups: dict[int, list[tuple[int, int]]]

    @property
    @abc.abstractmethod
    def flash_attention_enabled(self) -> bool:
        """Whether attention should use the fused flash-attention op (a backend switch)."""

    # -- creation ---------------------------------------------------------------------------
    # keyed inputs, with the (dtype, shape) first asked for; implementations start it empty
    _keyed: dict[str, tuple[Tensor, tuple[DType, tuple[int, ...]]]]

    def input(
        self,
        dtype: DType,
        shape: Sequence[int],
        data: np.ndarray | None = None,
        key: str | None = None,
    ) -> Tensor:
        """A graph input of `shape` (ggml order); `data` (numpy order) may be given now or
        later with `Tensor.set()`, but before `compute()`.

        With a `key`, asking again for the same key returns the existing input (given the new
        `data`): that is how a graph built for one batch is refilled for the next. A different
        dtype or shape under an existing key raises ValueError."""
        entry = self._keyed.get(key) if key is not None else None
        if entry is not None:
            existing, asked = entry
            # (the same request as before needs no check)
            if asked != (dtype, shape) and (
                existing.dtype != dtype or existing.shape != trim_shape(shape)
            ):
                raise ValueError(
                    f"input '{key}' is {existing.dtype.name}{list(existing.shape)} in this "
                    f"graph, not {DType(dtype).name}{list(trim_shape(shape))}"
                )
            if data is not None:
                self._set_input(existing, data)
            return existing
        t = self._new_input(dtype, shape)
        if data is not None:
            self._set_input(t, data)
        if key is not None:
            self._keyed[key] = (t, (dtype, tuple(shape)))
        return t

    def has_input(self, key: str) -> bool:
        return key in self._keyed

    @abc.abstractmethod
    def _new_input(self, dtype: DType, shape: Sequence[int]) -> Tensor:
        """A new graph input, its values still to be given."""

    @abc.abstractmethod
    def _set_input(self, t: Tensor, values: np.ndarray) -> None:
        """Give an input (of this context) its values, numpy order."""

    def from_numpy(self, data: np.ndarray, dtype: DType | None = None) -> Tensor:
        """An input holding `data`; its ggml shape is `data.shape` reversed."""
        if dtype is None:
            dtype = DType.I32 if np.issubdtype(data.dtype, np.integer) else DType.F32
        return self.input(dtype, tuple(reversed(data.shape)) or (1,), data)

    # -- arithmetic -------------------------------------------------------------------------
    @abc.abstractmethod
    def add(self, a: Tensor, b: Tensor) -> Tensor:
        """a + b; b broadcasts (its dims must divide a's)."""

    @abc.abstractmethod
    def mul(self, a: Tensor, b: Tensor) -> Tensor:
        """a * b elementwise; b broadcasts."""

    @abc.abstractmethod
    def scale(self, a: Tensor, s: float) -> Tensor: ...

    @abc.abstractmethod
    def scale_bias(self, a: Tensor, s: float, b: float) -> Tensor:
        """a * s + b elementwise."""

    @abc.abstractmethod
    def div(self, a: Tensor, b: Tensor) -> Tensor:
        """a / b elementwise; b broadcasts."""

    @abc.abstractmethod
    def mul_mat(self, a: Tensor, b: Tensor, full_precision: bool = False) -> Tensor:
        """ggml_mul_mat: a `[k, m, ...]`, b `[k, n, ...]` -> `[m, n, ...]` (rows of a dotted
        with rows of b). a's dims 2/3 broadcast over b's. `full_precision` asks for f32
        accumulation (for K·Q)."""

    @abc.abstractmethod
    def get_rows(self, a: Tensor, rows: Tensor) -> Tensor:
        """Rows of a `[n, rows...]` picked by the I32 indices `rows`; result is F32."""

    @abc.abstractmethod
    def set_rows(self, dst: Tensor, src: Tensor, rows: Tensor) -> Tensor:
        """Write row i of `src` into row `rows[i]` of `dst` (converting type); returns dst's
        view to depend on."""

    # -- normalisation and activations -------------------------------------------------------
    @abc.abstractmethod
    def rms_norm(self, a: Tensor, eps: float) -> Tensor:
        """Normalise along dimension 0 by the root mean square (no weight)."""

    @abc.abstractmethod
    def norm(self, a: Tensor, eps: float) -> Tensor:
        """Normalise along dimension 0 to zero mean, unit variance (no weight)."""

    @abc.abstractmethod
    def soft_max(
        self,
        a: Tensor,
        mask: Tensor | None = None,
        scale: float = 1.0,
        sinks: Tensor | None = None,
    ) -> Tensor:
        """softmax(a * scale + mask) along dimension 0. The mask is `[n, rows_padded]`.
        `sinks` (F32 `[heads]`, a `[n_kv, tokens, heads]` score tensor): one extra logit per
        head that joins each row's normaliser but has no value (gpt-oss's attention sinks;
        ggml_soft_max_add_sinks)."""

    @abc.abstractmethod
    def gelu(self, a: Tensor) -> Tensor:
        """GELU, tanh approximation."""

    @abc.abstractmethod
    def gelu_erf(self, a: Tensor) -> Tensor:
        """GELU, exact: `0.5 x (1 + erf(x / sqrt(2)))` in F32 (PyTorch's `gelu`, CLIP's)."""

    @abc.abstractmethod
    def silu(self, a: Tensor) -> Tensor: ...

    @abc.abstractmethod
    def tanh(self, a: Tensor) -> Tensor: ...

    @abc.abstractmethod
    def geglu(self, gate: Tensor, up: Tensor) -> Tensor:
        """Fused gelu(gate) * up."""

    @abc.abstractmethod
    def swiglu(self, gate: Tensor, up: Tensor) -> Tensor:
        """Fused silu(gate) * up."""

    @abc.abstractmethod
    def rope(
        self,
        a: Tensor,
        positions: Tensor,
        opts: RopeOptions,
        factors: Tensor | None = None,
    ) -> Tensor:
        """Rotary embedding of a `[head_dim, heads, tokens]` by I32 `positions` `[tokens]`;
        `factors` are per-frequency divisors (Llama 3.1 `rope_freqs`)."""

    @abc.abstractmethod
    def flash_attention(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None,
        scale: float,
        softcap: float = 0.0,
        sinks: Tensor | None = None,
    ) -> Tensor:
        """Fused attention. q `[d, tokens, heads]`, k `[d, n_kv, kv_heads]`, v likewise
        (not permuted), mask `[n_kv, tokens_padded]` F16, `sinks` as in `soft_max`. Returns
        `[d_v, heads, tokens]`."""

    def encoder_attention(self, q: Tensor, k: Tensor, v: Tensor, scale: float) -> Tensor | None:
        """Fused F32 attention without a mask, every query seeing every key: q `[d, heads,
        n_q]`, k `[d, heads, n_kv]`, v `[d_v, heads, n_kv]`; `[d_v, heads, n_q]`, or None
        where the backend has no such kernel for these operands (`nn.full_attention` then
        builds it from products and a softmax)."""
        return None

    # -- routed experts (mixture of experts) ---------------------------------------------------
    # Optional ops: a backend without them raises NotImplementedError naming the op.
    def mul_mat_id(self, experts: Tensor, b: Tensor, ids: Tensor) -> Tensor:
        """ggml_mul_mat_id: each token's product with the experts it chose. experts
        `[k, m, n_expert]` (one `[k, m]` matrix per expert), b `[k, n_b, tokens]` with n_b
        either 1 (every chosen expert reads the same row) or `n_used` (row j for the j-th
        choice), ids I32 `[n_used, tokens]` (expert indices). Returns `[m, n_used, tokens]`."""
        raise NotImplementedError(f"{type(self).__name__} has no mul_mat_id")

    def add_id(self, a: Tensor, b: Tensor, ids: Tensor) -> Tensor:
        """ggml_add_id: a `[m, n_used, tokens]` plus row `ids[j, t]` of b `[m, n_expert]` at
        `[:, j, t]` (per-expert biases)."""
        raise NotImplementedError(f"{type(self).__name__} has no add_id")

    def argsort_top_k(self, a: Tensor, k: int) -> Tensor:
        """I32 `[k, rows...]`: the indices of the k largest values along dimension 0 of a,
        largest first (ggml_argsort_top_k)."""
        raise NotImplementedError(f"{type(self).__name__} has no argsort_top_k")

    def sum_rows(self, a: Tensor) -> Tensor:
        """The sum along dimension 0: `[n, rows...]` -> `[1, rows...]`."""
        raise NotImplementedError(f"{type(self).__name__} has no sum_rows")

    def argmax(self, a: Tensor) -> Tensor:
        """I32 `[rows]`: the index of a largest value along dimension 0 of F32 `[n, rows]`
        (which one among equal values is the backend's choice: ggml_argmax)."""
        raise NotImplementedError(f"{type(self).__name__} has no argmax")

    def step(self, a: Tensor) -> Tensor:
        """1 where a > 0, else 0, elementwise (NaN gives 0)."""
        raise NotImplementedError(f"{type(self).__name__} has no step")

    def sigmoid(self, a: Tensor) -> Tensor:
        """1 / (1 + exp(-a)) elementwise."""
        raise NotImplementedError(f"{type(self).__name__} has no sigmoid")

    def clamp(self, a: Tensor, lo: float, hi: float) -> Tensor:
        """a clamped to [lo, hi] elementwise."""
        raise NotImplementedError(f"{type(self).__name__} has no clamp")

    def swiglu_oai(self, gate: Tensor, up: Tensor, alpha: float, limit: float) -> Tensor:
        """gpt-oss's gated activation, fused (ggml_swiglu_oai): with g = min(gate, limit) and
        u = clamp(up, -limit, limit), `g * sigmoid(alpha * g) * (u + 1)`."""
        raise NotImplementedError(f"{type(self).__name__} has no swiglu_oai")

    @abc.abstractmethod
    def pool_2d(
        self, a: Tensor, kernel: int, stride: int | None = None, mode: str = "avg"
    ) -> Tensor:
        """ggml_pool_2d without padding: `a` `[w, h, channels, n]` pooled over `kernel` x
        `kernel` windows `stride` apart (default: `kernel`, windows side by side), mode "avg"
        (the mean of each window) or "max". Returns F32 `[w', h', channels, n]` with
        `w' = (w - kernel) // stride + 1`, likewise `h'`."""

    # -- layout ------------------------------------------------------------------------------
    @abc.abstractmethod
    def reshape(self, a: Tensor, *shape: int) -> Tensor:
        """Same data, new ggml shape (a must be contiguous)."""

    @abc.abstractmethod
    def view(
        self,
        a: Tensor,
        shape: Sequence[int],
        strides: Sequence[int] = (),
        offset: int = 0,
    ) -> Tensor:
        """A strided view: `shape` (ggml order), `strides` the byte strides of dims 1.. (dim
        0 is always contiguous), `offset` in bytes."""

    @abc.abstractmethod
    def permute(self, a: Tensor, *axes: int) -> Tensor:
        """ggml_permute: axis i of `a` moves to position axes[i]."""

    @abc.abstractmethod
    def cont(self, a: Tensor) -> Tensor:
        """A contiguous copy."""

    @abc.abstractmethod
    def copy(self, src: Tensor, dst: Tensor) -> Tensor:
        """Copy (and convert) src into dst (a view); returns the node to depend on."""

    @abc.abstractmethod
    def cast(self, a: Tensor, dtype: DType) -> Tensor: ...

    @abc.abstractmethod
    def concat(self, a: Tensor, b: Tensor, dim: int) -> Tensor: ...

    # -- running ----------------------------------------------------------------------------
    @abc.abstractmethod
    def forward(self, *tensors: Tensor) -> None:
        """Add `tensors` (and what they depend on) to the graph without marking them as
        outputs: used for side effects such as cache writes."""

    @abc.abstractmethod
    def compute(self, *outputs: Tensor, on_started: Callable[[], None] | None = None) -> None:
        """Run the graph; afterwards `outputs[i].numpy()` holds values. May be called again
        after inputs were given new values: the built graph is re-run without rebuilding
        (cheapest while `is_current`, i.e. no other graph ran in between).

        `on_started` is called once the inputs have been uploaded and computing begins: from
        then on the inputs may be refilled for the next run (pipelining)."""

    @property
    @abc.abstractmethod
    def is_current(self) -> bool: ...

    @abc.abstractmethod
    def reserve(self, *outputs: Tensor) -> None:
        """Plan the graph's memory without running it (raises OutOfMemoryError)."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Backend(abc.ABC):
    """Devices, weights, persistent tensors, and the scheduler graphs compute on."""

    num_threads: int
    flash_attention: bool

    @abc.abstractmethod
    def new_context(self, max_nodes: int | None = None) -> Context: ...

    @abc.abstractmethod
    def persistent(self, dtype: DType, shape: Sequence[int], name: str = "") -> Tensor:
        """A zero-filled tensor that outlives contexts (KV cache storage)."""

    @property
    @abc.abstractmethod
    def cache_config(self) -> CacheConfig: ...

    @abc.abstractmethod
    def close(self) -> None: ...
