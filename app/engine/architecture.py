"""The model-architecture contract: what the engine asks of a plugin's model.

The engine defines this contract and depends on nothing else of a plugin; plugins implement it
and reach it through `hearth.plugins`, which re-exports the names here that plugins use (so the
dependency runs one way: plugins -> engine; `Architectures` is the host's side). Shapes are in
ggml order (dimension 0 fastest): hidden states are `[embd, tokens]`, queries and keys
`[head_dim, heads, tokens]`.

An architecture is a config reader and a model class, registered together:

    ArchitectureSpec(name="qwen2", config=Config, model=Model)

* `Config.from_gguf(meta)` reads the hyperparameters from the file's metadata (`ConfigReader`).
* `Model(config, weights)` subclasses `Architecture`: it binds its weights by GGUF name in the
  constructor, and builds graphs in `forward`. Everything optional has a default here.

Threads: the constructor, `validate` and `make_cache` run once, on the thread that loads the
model. `forward` and `shift` run on the runner's batching thread, one call at a time.
`encode_multimodal` and `post_tokenize` run on the thread that prepares a request, possibly
while `forward` builds another batch, so they must not touch the cache or mutable model state.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from .gguf import Metadata
from .input import Batch, Input, Multimodal
from .kvcache import Cache, Causal, ShiftNotSupportedError
from .ml.api import Context
from .ml.tensor import Tensor

__all__ = [
    "Architecture",
    "ArchitectureSpec",
    "Architectures",
    "ConfigReader",
    "Metadata",
    "MultimodalNotSupportedError",
    "Weights",
]

C = TypeVar("C")
C_co = TypeVar("C_co", covariant=True)


class MultimodalNotSupportedError(ValueError):
    """The model (or this file of it) has no encoder for images or other non-text inputs."""

    def __init__(self, message: str = "this model cannot take images") -> None:
        super().__init__(message)


class Weights(Protocol):
    """A model file's tensors by GGUF name (`blk.3.attn_q.weight`), given to the constructor.

    A handle has its shape (ggml order: a `[out, in]` matrix in numpy is `[in, out]` here) but
    no data until the engine loads the weights after the constructor returns, so handles are
    only graph operands. Ask for every tensor in the constructor: asking later raises.
    `hearth.engine.ml.bind` (and `hearth.plugins.bind_parts`) bind dataclass fields this way.
    """

    def has(self, name: str) -> bool:
        """Whether the file has tensor `name`."""
        ...

    def get(self, name: str, alt: str | None = None, matmul: bool | None = None) -> Tensor | None:
        """Tensor `name`, else `alt` (e.g. `token_embd.weight` for a tied output), else None.

        matmul: whether it is the left operand of matrix products (the engine may store it in
        a repacked layout then); None infers it (two or more dimensions, not `token_embd`).
        """
        ...

    def require(self, name: str, alt: str | None = None, matmul: bool | None = None) -> Tensor:
        """As `get`, but a missing tensor raises an error naming the file and the tensor."""
        ...


class ConfigReader(Protocol[C_co]):
    """Reads an architecture's hyperparameters: usually a frozen dataclass's classmethod."""

    def from_gguf(self, meta: Metadata) -> C_co:
        """Build the config from GGUF metadata. `meta`'s getters take keys without the
        `<arch>.` prefix (`meta.uint("block_count")` reads `qwen2.block_count`) and return a
        default when the key is absent. Raise ValueError (or KeyError) with a sentence for a
        file that cannot be run. Called once per load, before any weight is bound."""
        ...


class Architecture(abc.ABC, Generic[C]):
    """Base class of every architecture's model. See the module docstring for threads.

    Class attributes, read without loading the model:

    * `default_chat_template`: a Jinja chat template for files that carry none
      (`tokenizer.chat_template`), or None.
    * `eos_tokens`: texts of tokens that also end a turn (`<end_of_turn>`), on top of the
      file's end-of-sequence ids; those the vocabulary lacks are ignored.
    * `image_text`: text written before and after each image where the prompt marks one
      (`[img-N]`), tokenized with the text around it, as the model's own processor does it
      (Gemma 3: `("\n\n<start_of_image>", "<end_of_image>\n\n")`, so the newlines merge with
      neighbouring text); the image's own positions are what its items declare
      (`Multimodal.positions` and `token`), laid out by the core.
    """

    default_chat_template: ClassVar[str | None] = None
    eos_tokens: ClassVar[tuple[str, ...]] = ()
    image_text: ClassVar[tuple[str, str]] = ("", "")

    def __init__(self, config: C, weights: Weights) -> None:
        """Keep `config` and bind every weight the forward pass needs from `weights` (a
        required tensor the file lacks raises there, naming it). Build no graph here."""
        self.config = config

    def validate(self) -> None:
        """Refuse settings the forward pass cannot honour (e.g. an unsupported variant), after
        the weights are bound and before they are loaded: raise ValueError with a sentence
        for the user. The default accepts everything."""

    def set_context(self, per_sequence: int) -> None:
        """The engine's context per sequence (`num_ctx`), told before it sizes the cache and
        builds any graph: for settings that depend on it, as Phi-3's long-context RoPE
        factors do in llama.cpp. The default ignores it."""

    def make_cache(self) -> Cache:
        """A new, uninitialised KV cache for this model; the engine sizes it (`init`).

        The default is one causal cache for every layer, shiftable when this class overrides
        `shift`. Sliding-window or mixed layouts return `Causal(window=...)` or a `Wrapper`;
        pass `shift=self.shift` to every cache whose keys are RoPEd.
        """
        return Causal(shift=self.shift if self.can_shift() else None)

    @abc.abstractmethod
    def forward(self, ctx: Context, batch: Batch, cache: Cache) -> Tensor:
        """Build (never compute) the graph of one forward pass in `ctx`.

        batch: I32 `tokens` and `positions` `[n]`, `outputs` `[n_outputs]` (row indices
        whose results are wanted), host copies, and `multimodal` (input index, items) pairs
        whose embeddings replace those inputs' token embeddings. Per-batch values must come
        from these tensors (a built graph is run again with new values), never from Python
        constants. Call `cache.set_layer(i)` before layer i's attention reads or writes the
        cache (`hearth.plugins.layers` does).

        Returns logits `[vocab, n_outputs]` for the output rows only (drop the other rows
        before the last layer's feed-forward), or with `batch.hidden` the final normed hidden
        states `[embd, n_outputs]` (embeddings).
        """

    def shift(self, ctx: Context, layer: int, key: Tensor, delta: Tensor) -> Tensor:
        """Re-RoPE cached keys for a context shift: `key` `[head_dim, kv_heads, cells]` of
        `layer`, rotated by the I32 per-cell position deltas `delta` `[cells]` (negative:
        the cells moved down). Returns the new keys (same shape). Built in the cache's own
        graph on the batching thread. The default cannot shift (the runner re-evaluates the
        kept context instead); override it for RoPE models."""
        raise ShiftNotSupportedError()

    @classmethod
    def can_shift(cls) -> bool:
        """Whether this class overrides `shift`."""
        return cls.shift is not Architecture.shift

    def encode_multimodal(self, ctx: Context, data: bytes) -> list[Multimodal]:
        """Decode and preprocess one image (or other non-text item) given as file bytes, and
        build (never compute) its encoder graph in `ctx`, a context of its own that the
        runner computes when a batch first needs the item.

        Returns one or more items (tiles, for instance), each a tensor `[embd, n]` plus
        opaque `data` for `forward`, declaring the input positions it fills: `positions` (0:
        one per row, the rows replacing their token embeddings; N: N positions, the item
        reaching `forward` whole) and their `token`. The core lays the image out from these
        (`hearth.engine.input.image_positions`), all its positions in one batch. Raise
        ValueError for bytes that are not an image. The default raises
        MultimodalNotSupportedError (a text-only model)."""
        raise MultimodalNotSupportedError()

    def post_tokenize(self, inputs: list[Input]) -> list[Input]:
        """Rewrite a prompt's inputs where the architecture needs it, before the core lays the
        images out.

        `inputs` has one entry per token, and one per image: an `Input` whose `multimodal`
        holds `encode_multimodal`'s items and whose `multimodal_hash` identifies the source
        bytes. Only what is the architecture's own belongs here (Gemma 3 adds the markers
        around an image that a prompt lacks); the core then expands each image into the
        positions its items declare, with `same_batch`. Return a new list; do not mutate the
        inputs. The default returns `inputs` unchanged."""
        return inputs

    @classmethod
    def handles_multimodal(cls) -> bool:
        """Whether this class overrides `encode_multimodal` (can take images at all; a file
        may still lack the encoder's weights)."""
        return cls.encode_multimodal is not Architecture.encode_multimodal


@dataclass(frozen=True)
class ArchitectureSpec(Generic[C]):
    """One architecture as a plugin registers it.

    name: matched against a file's `general.architecture` (e.g. `"qwen2"`).
    config: reads a `C` from metadata (`Config`, with a `from_gguf` classmethod).
    model: the `Architecture[C]` subclass, built as `model(config, weights)`.
    description: one line for listings.
    """

    name: str
    config: ConfigReader[C]
    model: type[Architecture[C]]
    description: str = ""


class Architectures(Protocol):
    """Where the engine looks architectures up (`hearth.plugins.registry.ArchitectureRegistry`)."""

    def get(self, name: str) -> ArchitectureSpec[Any]:
        """The spec registered for `name`; raises LookupError with a sentence naming what is
        installed when there is none."""
        ...
