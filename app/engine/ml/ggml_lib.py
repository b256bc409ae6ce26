"""Low-level ggml plumbing: binding fixes, log routing, context creation, core counting,
which device a buffer type is on.

ggml's log sink is process-wide, so importing this module routes it to Python logging once.
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
from typing import Any

import ggml as g

from ..cpu import compute_threads
from .api import OutOfMemoryError

__all__ = [
    "address",
    "compute_threads",
    "device_of_buffer_type",
    "load_extension",
    "metadata_context",
]

_c_void_p = ctypes.c_void_p


def _fix_bindings() -> None:
    """ggml-python 0.0.45 declares a few pointer-returning functions with an `int` restype,
    which truncates the pointer to 32 bits; declare them as returning void*."""
    for name in (
        "ggml_backend_cpu_buffer_type",
        "ggml_backend_alloc_buffer",
        "ggml_backend_cpu_buffer_from_ptr",
        "ggml_backend_sched_get_tensor_backend",
    ):
        fn = getattr(g, name, None)
        if fn is not None and hasattr(fn, "restype"):
            fn.restype = _c_void_p


_fix_bindings()

_log = logging.getLogger("hearth.ggml")
_LEVELS = {
    g.GGML_LOG_LEVEL_DEBUG: logging.DEBUG,
    g.GGML_LOG_LEVEL_INFO: logging.DEBUG,  # ggml's info lines (repacking...) are chatter
    g.GGML_LOG_LEVEL_WARN: logging.WARNING,
    g.GGML_LOG_LEVEL_ERROR: logging.ERROR,
}


@g.ggml_log_callback
def _ggml_log(level: int, text: bytes, _user: object) -> None:
    msg = text.decode("utf-8", "replace").rstrip() if text else ""
    if msg:
        _log.log(_LEVELS.get(level, logging.DEBUG), "%s", msg)


# ggml's log sink is process-wide; route it to Python logging (one constant callback).
g.ggml_log_set(_ggml_log, None)


def load_extension(module: str, abi_symbol: str, abi: int, what: str, fallback: str) -> Any:
    """One of Hearth's optional C extensions (`module`, e.g. "hearth.engine.ml._kernels") as a
    `ctypes.CDLL`, or None, logged with `what` ("Hearth's CPU kernels") and `fallback` ("ggml's
    mul_mat is used"), when it is not built, cannot be loaded, or was built from other sources
    (its `abi_symbol` function does not return `abi`)."""
    log = logging.getLogger("hearth.kernels")
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        log.debug("%s: not built; %s", what, fallback)
        return None
    try:
        lib = ctypes.CDLL(spec.origin)
    except OSError as exc:
        log.warning("could not load %s (%s); %s", what, exc, fallback)
        return None
    check = getattr(lib, abi_symbol, None)
    if check is None or check() != abi:
        log.warning(
            "%s: built from other sources (rebuild with `python setup.py build_ext --inplace`); %s",
            what,
            fallback,
        )
        return None
    return lib


def address(p: Any) -> int:
    """The address a ctypes pointer holds (0 for NULL)."""
    return ctypes.cast(p, _c_void_p).value or 0


def metadata_context(n_tensors: int) -> Any:
    """A ggml context holding only tensor descriptions (their memory comes from buffers)."""
    params = g.ggml_init_params(
        mem_size=g.ggml_tensor_overhead() * n_tensors, mem_buffer=None, no_alloc=True
    )
    ctx = g.ggml_init(params)
    if not ctx:
        raise OutOfMemoryError("could not create a ggml context")
    return ctx


def layout_key(p: Any) -> tuple[int, int]:
    """(element type, buffer type address) of a tensor, following views to the tensor that
    owns the memory; the buffer type is 0 while the tensor has none (graph intermediates).
    Weights of one type in one buffer type are multiplied by the same kernels."""
    t = p.contents
    while not t.buffer and t.view_src:
        t = t.view_src.contents
    buft = g.ggml_backend_buffer_get_type(t.buffer) if t.buffer else None
    return int(p.contents.type), address(buft)


def device_of_buffer_type(buft: object) -> str:
    """The name of the device a buffer type's memory is on: "CPU" for every CPU buffer type
    (plain, mapped, the repacked layouts), else ggml's device name ("CUDA0", "RPC1")."""
    dev = g.ggml_backend_buft_get_device(buft)
    if not dev or int(g.ggml_backend_dev_type(dev)) == g.GGML_BACKEND_DEVICE_TYPE_CPU:
        return "CPU"
    return str(g.ggml_backend_dev_name(dev).decode())
