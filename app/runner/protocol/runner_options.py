"""How a runner is started: its command-line options (`RunnerOptions`, one field per
`--NAME`, whose metadata gives its help, whether `args()` always writes it and its reload
rule), its forward engines (`EngineKind`) and the environment variable that carries the
service's secret (`TOKEN_ENV`). Part of the runner protocol (see `hearth.runner.protocol`).
"""

from __future__ import annotations

import argparse
import types
from dataclasses import dataclass, field, fields
from enum import Enum, StrEnum
from typing import Any, Union, get_args, get_origin

from ...engine.kvcache.types import KVCacheType
from ...options import default
from .wire import field_types

__all__ = ["ENGINES", "TOKEN_ENV", "EngineKind", "RunnerOptions", "runner_option"]

TOKEN_ENV = "HEARTH_RUNNER_TOKEN"


class EngineKind(StrEnum):
    """The runner's forward engines (`--engine`; the service's engine choice names them)."""

    HEARTH = "hearth"  # Hearth's own, with an architecture plugin
    LLAMACPP = "llamacpp"  # llama.cpp through llama-cpp-python, for every other GGUF


ENGINES = tuple(EngineKind)


def runner_option(
    default: Any, help: str, *, reload: str | None = None, explicit: str = "", always: bool = False
) -> Any:
    """A `hearth runner` option: its default and help (`--NAME`, the field's name with dashes),
    whether `args()` always writes it (`always`; else only when it is not the default), and
    its reload rule, which `reloads()` reads: "same" (a runner started otherwise cannot serve
    the request), "larger" (one started with less cannot), "asked" (one started otherwise
    cannot when the request asks for a value), "explicit" (one started otherwise cannot when
    the request's option `explicit` set it) or None (any runner can)."""
    meta = {"help": help, "reload": reload, "explicit": explicit, "always": always}
    return field(default=default, metadata=meta)


@dataclass(frozen=True, kw_only=True)
class RunnerOptions:
    """How a runner serves its model: the command-line options above, with their defaults.
    The runner's argument parser (`add_arguments`), its command line (`args`) and whether a
    runner can take a request as it is (`reloads`) are read from the fields' metadata."""

    num_ctx: int = runner_option(
        default("num_ctx"), "context per sequence", reload="larger", always=True
    )
    parallel: int = runner_option(1, "sequences at once", always=True)
    num_batch: int = runner_option(
        default("num_batch"), "prompt tokens per pass", reload="explicit",
        explicit="num_batch", always=True,
    )  # fmt: skip
    threads: int | None = runner_option(
        None, "CPU threads (default: the physical cores)", reload="explicit",
        explicit="num_thread",
    )  # fmt: skip
    flash_attention: bool = runner_option(False, "use flash attention", reload="same")
    # q8_0 and q4_0 need flash attention
    kv_type: KVCacheType = runner_option(
        KVCacheType.F16, "the KV cache's type", reload="same", always=True
    )
    memory_limit: int | None = runner_option(
        None, "bytes at most; a model needing more fails at load"
    )
    # a vision projector GGUF beside the model (mmproj-*.gguf)
    projector: str | None = runner_option(None, "vision projector .gguf", reload="asked")
    engine: EngineKind = runner_option(
        EngineKind.HEARTH, "forward engine: hearth or llama.cpp", reload="same"
    )
    # Where layers go: the service's layout as JSON, {"gpus": [{"device": "CUDA0" | "RPC0",
    # "layers": [0, 1, ...]}], "projector": device | null} (layer `blocks` is the output
    # layer); None: everything on the CPU. RPC devices come from HEARTH_RPC_SERVERS. (The
    # scheduler compares the request's placement itself: LoadSpec.layout_options.)
    layout: str | None = runner_option(None, "layers per device (JSON)")
    # A smaller GGUF with the same vocabulary that drafts tokens for speculative decoding
    # (runner/draft_model.py), loaded beside the model on Hearth's engine; None: prompt
    # lookup. A runner without it, or with another, gives the same text, only its speed
    # differs: so only a request that asks for one needs a runner that has it.
    draft_model: str | None = runner_option(
        None, "a .gguf that drafts tokens (speculation)", reload="asked"
    )

    def args(self) -> list[str]:
        """These options as `hearth runner` arguments (those at their default, or unset: None,
        0, false, left out, unless the field says `always`)."""
        out: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            flag = "--" + f.name.replace("_", "-")
            if not f.metadata["always"] and (not value or value == f.default):
                continue
            if isinstance(value, bool):
                out += [flag] if value else []
            else:
                out += [flag, str(value)]
        return out

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """The runner's argument parser's options (`--NAME`; parsed into the field's name)."""
        hints = field_types(cls)
        for f in fields(cls):
            flag, kind = "--" + f.name.replace("_", "-"), _plain(hints[f.name])
            text = f.metadata["help"]
            if kind is bool:
                parser.add_argument(flag, action="store_true", default=f.default, help=text)
            elif isinstance(kind, type) and issubclass(kind, Enum):
                choices = list(kind)
                parser.add_argument(flag, type=kind, default=f.default, choices=choices, help=text)
            else:
                parser.add_argument(flag, type=kind, default=f.default, help=text)

    def reloads(self, want: RunnerOptions, explicit: frozenset[str]) -> str | None:
        """The option that keeps a runner started with these options from serving a request
        that wants `want` (`explicit`: the request options it set), or None when it can."""
        for f in fields(self):
            rule, have, asked = f.metadata["reload"], getattr(self, f.name), getattr(want, f.name)
            if (
                (rule == "same" and asked != have)
                or (rule == "larger" and asked > have)
                or (rule == "asked" and asked is not None and asked != have)
                or (rule == "explicit" and f.metadata["explicit"] in explicit and asked != have)
            ):
                return f.name
        return None


def _plain(hint: Any) -> Any:
    """`X | None` -> X."""
    if get_origin(hint) in (Union, types.UnionType):
        return next(h for h in get_args(hint) if h is not type(None))
    return hint
