"""A pull from start to end: the manifest (or the Hugging Face listing), the blobs, the
manifest written last.

`prepare()` does the first request (so a missing model or an offline switch is an error
before any progress is reported); `Pull.run()` downloads and registers. The model is written
to the store only after every blob is in and verified, so a failure or a cancel at any point
leaves no manifest behind (blobs that did arrive whole stay, as in Ollama, and make the next
pull shorter).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from ....engine.gguf import GGUFError, GGUFFile
from ..importer import TEMPLATE_DROPPED, keeps_template
from ..model_store import MEDIA_TYPES, Layer, ModelRecord, ModelStore
from ..names import ModelName
from .download import BlobSource, fetch_blob
from .hf import endpoint, is_hf, plan_hf
from .network import check_online, http_client
from .progress import Emit, pulling, status
from .registry import plan_registry

__all__ = ["Pull", "prepare"]


@dataclass
class Pull:
    """A checked pull: the blobs to fetch (with each one's layer kind) and the name."""

    name: ModelName
    sources: list[tuple[BlobSource, str]]  # (where from, media type)
    client: httpx.Client
    notes: list[str] = field(default_factory=list)

    def close(self) -> None:
        self.client.close()

    def run(
        self,
        store: ModelStore,
        emit: Emit,
        cancel: threading.Event,
        supported: Callable[[str], bool] | None = None,
    ) -> ModelRecord:
        """Download every blob, then write the manifest; emits Ollama's progress lines."""
        try:
            emit(status("pulling manifest"))
            for note in self.notes:
                emit(status(note))
            layers: list[Layer] = []
            for source, media in self.sources:

                def progress(done: int, total: int, d: str = source.digest) -> None:
                    emit(pulling(d, total, done))

                fetch_blob(
                    store,
                    source,
                    self.client,
                    progress,
                    cancel,
                    verifying=lambda: emit(status("verifying sha256 digest")),
                )
                layers.append(Layer(media, source.digest, source.size))
            layers = self._kept(store, layers, emit)
            self._check_architecture(store, layers, emit, supported)
            emit(status("writing manifest"))
            record = store.write_manifest(self.name, layers)
            emit(status("success"))
            return record
        finally:
            self.close()

    @staticmethod
    def _kept(store: ModelStore, layers: list[Layer], emit: Emit) -> list[Layer]:
        out = []
        for layer in layers:
            if layer.kind == "template" and not keeps_template(store.read_text(layer) or ""):
                emit(status(f"note: {TEMPLATE_DROPPED}"))
                continue
            out.append(layer)
        return out

    @staticmethod
    def _check_architecture(
        store: ModelStore, layers: list[Layer], emit: Emit, supported: Callable[[str], bool] | None
    ) -> None:
        model = next(x for x in layers if x.kind == "model")
        try:
            with GGUFFile(store.blob_path(model.digest)) as f:
                arch = f.architecture
        except GGUFError as e:
            emit(status(f"note: the model file cannot be read as GGUF ({e})"))
            return
        if supported is not None and not supported(arch):
            emit(
                status(
                    f"note: no installed Hearth plugin runs the '{arch}' architecture; "
                    "the model is registered and needs the llama.cpp engine to run"
                )
            )


def prepare(text: str, insecure: bool = False) -> Pull:
    """Parse the name and fetch its manifest (or the Hugging Face repository's listing).
    InvalidName, Offline or PullError (with an HTTP status) when it cannot be pulled."""
    name = ModelName.parse(text)
    check_online(f"'{name.display}'")
    client = http_client()
    try:
        if is_hf(name):
            from huggingface_hub.utils import build_hf_headers

            plan = plan_hf(name)
            headers = build_hf_headers()
            sources = plan.sources(endpoint(), headers)
            kinds = ["model", "projector"]
            pairs = [(s, MEDIA_TYPES[k]) for s, k in zip(sources, kinds, strict=False)]
            return Pull(name, pairs, client, [f"using {plan.note}"])
        reg = plan_registry(name, client, insecure)
        pairs = list(zip(reg.sources(), (x.media_type for x in reg.layers), strict=True))
        return Pull(name, pairs, client)
    except BaseException:
        client.close()
        raise
