"""Every model option a request can carry, declared once: its name (Ollama's), type, default,
range, help sentence and `hearth run` flag.

Two records hold them, by what they do:

* `GenerationOptions`: the sampling and length options a completion sends the runner (the
  runner protocol's CompletionOptions, hearth.runner.protocol, has its fields);
* `LoadOptions`: the options that choose, or reload, the runner that serves the model.

Each field is None on the wire and in a request (the default applies); its default, range and
help are the field's metadata (`option()`), read by everything else: the service's request
validation (hearth.server.request_types.Options is generated from these fields), the runner's
sampler (hearth.engine.sampling), the runner's command line defaults (RunnerOptions), the
`hearth run` flags (`run_flags()`) and the desktop app's chat settings dialog (`default()`).

A leaf module: anyone may import it, it imports nothing of Hearth's.
"""

from __future__ import annotations

from dataclasses import Field, dataclass, field, fields
from typing import Any, Literal, NamedTuple

__all__ = [
    "GenerationOptions",
    "LoadOptions",
    "Flag",
    "option",
    "default",
    "DEFAULTS",
    "run_flags",
]

_I64 = 2**63 - 1


def option(
    default: Any = None,
    *,
    help: str,
    low: float | None = None,
    high: float | None = None,
    length: tuple[int, int] | None = None,
    flag: str | None = None,
) -> Any:
    """A field that is None unless given, with its metadata: `default` (what None means; None:
    no fixed default, the help says who decides), `help` (a phrase), the range `low..high`
    of a number, `length` (min, max) of a string, and `flag`, its `hearth run` flag."""
    meta = {"default": default, "help": help, "low": low, "high": high, "length": length}
    return field(default=None, metadata={**meta, "flag": flag})


@dataclass(frozen=True, kw_only=True)
class GenerationOptions:
    """A completion's sampling and length options, with Ollama's names and defaults: everything
    the runner honours per request. None (left out of the JSON) means the default."""

    temperature: float | None = option(
        0.8, help="randomness; 0 = greedy", low=0.0, high=100.0, flag="--temperature"
    )
    top_k: int | None = option(
        40, help="sample among the k likeliest tokens; 0 = all", low=0, high=1 << 20,
        flag="--top-k",
    )  # fmt: skip
    top_p: float | None = option(
        0.9, help="nucleus sampling; 1 = off", low=0.0, high=1.0, flag="--top-p"
    )
    min_p: float | None = option(
        0.0, help="drop tokens below this share of the likeliest", low=0.0, high=1.0,
        flag="--min-p",
    )  # fmt: skip
    seed: int | None = option(
        -1, help="same seed, same text (-1: random)", low=-1, high=_I64, flag="--seed"
    )
    repeat_penalty: float | None = option(
        1.1, help="penalty on repeated tokens; 1 = off", low=0.0, high=100.0,
        flag="--repeat-penalty",
    )  # fmt: skip
    repeat_last_n: int | None = option(
        64, help="tokens the penalties look back over; -1 = the context", low=-1, high=1 << 24
    )
    presence_penalty: float | None = option(
        0.0, help="penalty on tokens present", low=-100.0, high=100.0
    )
    frequency_penalty: float | None = option(
        0.0, help="penalty per occurrence", low=-100.0, high=100.0
    )
    num_predict: int | None = option(
        -1, help="max tokens to generate; -1 = no limit", low=-2, high=1 << 24,
        flag="--num-predict",
    )  # fmt: skip
    num_keep: int | None = option(
        4, help="prompt tokens kept by truncation and shifts; -1 = all", low=-1, high=1 << 24
    )
    # The output ends before any of these (at most 64, of 1000 characters each).
    stop: list[str] = field(
        default_factory=list,
        metadata={"default": [], "help": "stop strings", "length": (0, 1000), "items": 64},
    )
    # Speculative decoding (runner/drafting.py): None or true drafts where the runner can
    # check drafts exactly (`RunnerInfo.speculation`); false never drafts. The output is
    # the same either way; only its speed differs.
    speculate: bool | None = option(True, help="draft tokens (speculative decoding)")

    @classmethod
    def names(cls) -> frozenset[str]:
        """The option names this record carries (Ollama's)."""
        return frozenset(f.name for f in fields(cls))


@dataclass(frozen=True, kw_only=True)
class LoadOptions:
    """The options that choose (or reload) the runner serving a model."""

    num_ctx: int | None = option(4096, help="context length", low=1, high=1 << 24, flag="--num-ctx")
    num_batch: int | None = option(
        512, help="prompt tokens per pass", low=1, high=1 << 16, flag="--num-batch"
    )
    num_thread: int | None = option(
        None, help="CPU threads (default: the physical cores)", low=0, high=1024,
        flag="--threads",
    )  # fmt: skip
    num_gpu: int | None = option(
        -1, help="layers on GPUs; -1 = as many as fit", low=-1, high=1 << 16
    )
    main_gpu: int | None = option(0, help="the GPU used first", low=0, high=1024)
    use_mmap: bool | None = option(None, help="a loading hint (ignored)")
    numa: bool | None = option(None, help="a loading hint (ignored)")
    flash_attention: bool | None = option(
        False, help="use flash attention", flag="--flash-attention"
    )  # Hearth extension
    engine: Literal["auto", "hearth", "llamacpp"] | None = option(
        "auto", help="the forward engine (store/engines.py)"
    )  # Hearth extension
    # Hearth extension (LM Studio's name): a model of the same vocabulary, by name, that
    # drafts tokens for speculative decoding, loaded in the same runner.
    draft_model: str | None = option(
        None, help="a model that drafts tokens (speculative decoding)", length=(1, 500)
    )

    @classmethod
    def names(cls) -> frozenset[str]:
        """The option names this record carries (Ollama's)."""
        return frozenset(f.name for f in fields(cls))


def _fields() -> dict[str, Field[Any]]:
    return {f.name: f for cls in (GenerationOptions, LoadOptions) for f in fields(cls)}


DEFAULTS: dict[str, Any] = {name: f.metadata["default"] for name, f in _fields().items()}


def default(name: str) -> Any:
    """The declared default of option `name` (None: none fixed; KeyError: no such option)."""
    return DEFAULTS[name]


class Flag(NamedTuple):
    """A `hearth run` flag that sets option `name`."""

    name: str  # the option
    flag: str  # "--top-k"
    dest: str  # argparse's attribute ("top_k")
    kind: type  # int, float or bool (a switch)
    help: str


def run_flags() -> list[Flag]:
    """The options `hearth run` takes as flags, with help that shows their defaults."""
    out = []
    hints = {**_types(GenerationOptions), **_types(LoadOptions)}
    for name, f in _fields().items():
        flag = f.metadata.get("flag")
        if not flag:
            continue
        text, value = f.metadata["help"], f.metadata["default"]
        number = isinstance(value, int | float) and not isinstance(value, bool)
        shown = f"{text} (default {value:g})" if number else text
        kind = hints[name]
        out.append(Flag(name, flag, flag[2:].replace("-", "_"), kind, shown))
    return out


def _types(cls: type) -> dict[str, type]:
    """The plain type of each of a record's scalar fields (`float | None` -> float)."""
    found: dict[str, type] = {}
    for f in fields(cls):
        text = str(f.type).replace(" | None", "")
        plain = {"int": int, "float": float, "bool": bool, "str": str}.get(text)
        if plain is not None:
            found[f.name] = plain
    return found
