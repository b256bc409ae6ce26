"""Architectures by name, as registered by plugins; the contract an architecture fulfils.

An architecture is two classes, registered together in an `ArchitectureSpec`:

* `config`: `Config.from_gguf(meta) -> Config` reads hyperparameters from GGUF metadata
  (a `Metadata` view whose getters take keys without the `<arch>.` prefix).
* `model`: `Model(config, weights)` binds its weights by GGUF name (see `hearth.engine.ml.nn`
  `weight()`/`bind()`); then:
  - `make_cache() -> Cache | None` — the KV cache layout (Causal, sliding window, Wrapper...);
  - `forward(ctx, batch, cache) -> Tensor` builds the graph and returns logits
    `[vocab, batch.n_outputs]` for the batch's output rows only, or, when `batch.hidden` is
    set, the final normed hidden states `[embd, batch.n_outputs]` (for embeddings). Build
    only, never compute; per-batch data must come from `batch` tensors (graphs are reused);
  - optional `shift(ctx, layer, key, delta) -> Tensor`: re-RoPE cached keys by per-cell
    position deltas (absent: the cache cannot shift, prompts are reprocessed instead);
  - optional `encode_multimodal(ctx, data: bytes) -> list[Multimodal]` (builds, never computes)
    and `post_tokenize(inputs) -> inputs` for vision models;
  - optional `validate()` after binding (raise ValueError with a sentence to refuse a file);
  - attributes `default_chat_template: str | None` (Jinja, used when the file has none) and
    `eos_tokens: tuple[str, ...]` (extra token texts that end a turn, e.g. `<end_of_turn>`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pluggy

__all__ = [
    "ArchitectureSpec",
    "ArchitectureRegistry",
    "DuplicateArchitectureError",
    "UnknownArchitectureError",
    "build_registry",
]


@dataclass(frozen=True)
class ArchitectureSpec:
    name: str
    config: Any
    model: Any
    description: str = ""


class DuplicateArchitectureError(ValueError):
    pass


class UnknownArchitectureError(LookupError):
    pass


class ArchitectureRegistry:
    """Name -> ArchitectureSpec, plus which plugin registered each name."""

    def __init__(self) -> None:
        self._specs: dict[str, ArchitectureSpec] = {}
        self._owners: dict[str, str] = {}
        self.plugins: list[str] = []

    def register(self, spec: ArchitectureSpec, plugin: str = "?") -> None:
        if not isinstance(spec, ArchitectureSpec):
            raise TypeError(f"plugin {plugin} registered {spec!r}, not an ArchitectureSpec")
        if spec.name in self._specs:
            raise DuplicateArchitectureError(
                f"architecture '{spec.name}' is registered twice: by plugin "
                f"'{self._owners[spec.name]}' and by plugin '{plugin}'"
            )
        self._specs[spec.name] = spec
        self._owners[spec.name] = plugin

    def get(self, name: str) -> ArchitectureSpec:
        spec = self._specs.get(name)
        if spec is None:
            known = ", ".join(sorted(self._specs)) or "none"
            plugins = ", ".join(self.plugins) or "none"
            what = f"'{name}'" if name else "an unnamed architecture (no general.architecture)"
            raise UnknownArchitectureError(
                f"this model uses {what}, which no installed plugin supports "
                f"(architectures: {known}; plugins: {plugins})"
            )
        return spec

    def owner(self, name: str) -> str:
        return self._owners[name]

    def names(self) -> list[str]:
        return sorted(self._specs)

    def __contains__(self, name: object) -> bool:
        return name in self._specs


def build_registry(pm: pluggy.PluginManager) -> ArchitectureRegistry:
    """Ask every registered plugin for its architectures."""
    registry = ArchitectureRegistry()
    registry.plugins = sorted(n for n, _ in pm.list_name_plugin())
    for impl in pm.hook.register_architectures.get_hookimpls():

        def register(spec: ArchitectureSpec, _plugin: str = impl.plugin_name) -> None:
            registry.register(spec, _plugin)

        impl.function(register=register)
    return registry
