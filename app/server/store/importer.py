"""`hearth import-ollama`: bring an Ollama installation's models into Hearth's store.

Ollama keeps `manifests/<host>/<namespace>/<model>/<tag>` (JSON listing layers) and
`blobs/sha256-<hex>`, much like Hearth. Blobs are hard-linked (symlinked across file
systems, or copied with `copy=True`), so importing costs no disk space. Ollama's templates are
Go templates, which Hearth does not run: they are dropped and the GGUF's own
`tokenizer.chat_template` is used instead. Models with adapters, or whose architecture no
installed plugin supports (unless `include_unsupported`), are skipped with the reason.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ...engine.gguf import GGUFError, GGUFFile
from ...plugins.registry import ArchitectureRegistry
from ..prompting.prompts import check_template
from ..prompting.templates import TemplateError
from .model_store import MEDIA_TYPES, BlobError, Layer, ModelNotFound, ModelStore, normalize_digest
from .names import DEFAULT_NAMESPACE, InvalidName, ModelName

__all__ = [
    "ImportResult",
    "find_ollama_models",
    "import_ollama",
    "keeps_template",
    "TEMPLATE_DROPPED",
]

_OLLAMA_REGISTRY = "registry.ollama.ai"


@dataclass(frozen=True)
class ImportResult:
    name: str
    imported: bool
    note: str = ""


def find_ollama_models() -> Path | None:
    """Ollama's model folder: OLLAMA_MODELS, ~/.ollama/models, or the Linux service's."""
    candidates = [os.environ.get("OLLAMA_MODELS", "")]
    candidates += [str(Path.home() / ".ollama" / "models"), "/usr/share/ollama/.ollama/models"]
    for c in candidates:
        if c and (Path(c) / "manifests").is_dir():
            return Path(c)
    return None


def _hearth_name(parts: tuple[str, ...]) -> ModelName:
    host, namespace, model, tag = parts[-4:] if len(parts) >= 4 else ("", *parts[-3:])
    if host == _OLLAMA_REGISTRY and namespace == "library":
        namespace = DEFAULT_NAMESPACE
    return ModelName.parse(f"{namespace}/{model}:{tag}")


TEMPLATE_DROPPED = "its Go template was replaced by the file's chat template"


def keeps_template(text: str) -> bool:
    """Whether an Ollama template layer is kept: Ollama's templates are Go templates, which
    Hearth does not run, so one that is not also a valid Jinja template is dropped (the
    GGUF's own `tokenizer.chat_template` is used instead)."""
    try:
        check_template(text)
    except TemplateError:
        return False
    return True


def _import_one(
    source: Path,
    manifest: Path,
    store: ModelStore,
    registry: ArchitectureRegistry,
    copy: bool,
    include_unsupported: bool,
    force: bool,
) -> ImportResult:
    rel = manifest.relative_to(source / "manifests").parts
    label = "/".join(rel)
    try:
        name = _hearth_name(rel)
    except InvalidName as e:
        return ImportResult(label, False, str(e))
    try:
        store.resolve(name)
        if not force:
            return ImportResult(name.display, False, "already in Hearth")
    except ModelNotFound:
        pass
    try:
        data = json.loads(manifest.read_text())
        layers = [(str(x["mediaType"]), normalize_digest(x["digest"])) for x in data["layers"]]
    except (OSError, ValueError, KeyError, TypeError, BlobError):
        return ImportResult(name.display, False, "its manifest cannot be read")
    kinds = [m.removeprefix("application/vnd.ollama.image.") for m, _ in layers]
    if "adapter" in kinds:
        return ImportResult(name.display, False, "adapters (LoRA) are not supported yet")
    if "model" not in kinds:
        return ImportResult(name.display, False, "it has no model file")
    blob = {d: source / "blobs" / d.replace(":", "-") for _, d in layers}
    missing = [d for d in blob.values() if not d.is_file()]
    if missing:
        return ImportResult(name.display, False, f"blob {missing[0].name} is missing")
    model_digest = next(d for (_, d), k in zip(layers, kinds, strict=True) if k == "model")
    try:
        with GGUFFile(blob[model_digest]) as f:
            arch = f.architecture
    except GGUFError as e:
        return ImportResult(name.display, False, str(e))
    if arch not in registry and not include_unsupported:
        return ImportResult(name.display, False, f"architecture '{arch}' is not supported")
    out: list[Layer] = []
    note = ""
    for (media, digest), kind in zip(layers, kinds, strict=True):
        if kind == "template" and not keeps_template(blob[digest].read_text(errors="replace")):
            note = TEMPLATE_DROPPED
            continue
        if kind not in MEDIA_TYPES:
            continue  # e.g. Ollama's config blob
        size = store.adopt(blob[digest], digest, copy=copy)
        out.append(Layer(media, digest, size))
    store.write_manifest(name, out)
    return ImportResult(name.display, True, note)


def import_ollama(
    store: ModelStore,
    registry: ArchitectureRegistry,
    source: Path | None = None,
    copy: bool = False,
    include_unsupported: bool = False,
    force: bool = False,
) -> list[ImportResult]:
    """Import every model under `source` (default: `find_ollama_models()`)."""
    source = source or find_ollama_models()
    if source is None or not (source / "manifests").is_dir():
        where = source or "OLLAMA_MODELS, ~/.ollama/models or /usr/share/ollama/.ollama/models"
        raise FileNotFoundError(f"no Ollama models found (looked in {where})")
    results = []
    for manifest in sorted(p for p in (source / "manifests").rglob("*") if p.is_file()):
        results.append(
            _import_one(source, manifest, store, registry, copy, include_unsupported, force)
        )
    return results
