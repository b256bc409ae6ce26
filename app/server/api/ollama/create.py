"""Creating models: `HEAD/POST /api/blobs/:digest` and `POST /api/create`, as the `ollama`
client uses them (upload the GGUF as a blob, then create with `files: {name: digest}`), plus
Hearth's shortcut for local files: `from` may be an absolute path to a .gguf on this machine,
copied into the store or, with `"link": true`, hard-linked (symlinked across file systems).

Hugging Face checkpoints are converted to GGUF on the way in (`hearth.convert`): `files`
holding a `config.json` and safetensors weights (as the ollama client uploads a model folder),
or `from` = the absolute path of such a folder; `quantize` picks the output type (f16 by
default, f32, q8_0, q4_K_M). The converted file is written into the blob folder and becomes
the model's blob; a failure leaves nothing behind.

Everything that can be checked is checked before the response starts, so a bad request is a
400; the long part (hashing or copying a large file) streams progress statuses
(`{"status", "total", "completed"}`) and ends with `{"status": "success"}`.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import ValidationError
from starlette.requests import ClientDisconnect

from ....convert import PreparedConversion, prepare_conversion
from ....engine.gguf import GGUFError, GGUFFile
from ....plugins.registry import default_converters
from ...prompting.prompts import check_template
from ...request_types import Options
from ...service import Service
from ...store.engines import llamacpp_installed
from ...store.model_store import BlobError, BlobWriter, Layer, ModelStore, normalize_digest
from ...store.names import ModelName
from ..shared.common import service_of
from ..shared.errors import APIError, validation_message
from ..shared.streams import ndjson_or_last
from .schemas import CreateRequest

__all__ = ["router"]

router = APIRouter(tags=["models"])

_WRITE_CHUNK = 4 << 20


@router.head("/api/blobs/{digest}", summary="Whether a blob is in the store")
async def has_blob(digest: str, request: Request) -> Response:
    exists = service_of(request).store.has_blob(normalize_digest(digest))
    return Response(status_code=200 if exists else 404)


@router.post("/api/blobs/{digest}", status_code=201, summary="Upload a blob (raw body)")
async def upload_blob(digest: str, request: Request) -> Response:
    store = service_of(request).store
    digest = normalize_digest(digest)
    if store.has_blob(digest):
        async for _ in request.stream():  # read the body so the client can finish sending
            pass
        return Response(status_code=200)
    writer = BlobWriter(store, digest)
    buffer = bytearray()
    try:
        async for chunk in request.stream():
            buffer += chunk
            if len(buffer) >= _WRITE_CHUNK:
                await asyncio.to_thread(writer.write, bytes(buffer))
                buffer.clear()
        await asyncio.to_thread(writer.write, bytes(buffer))
        await asyncio.to_thread(writer.commit)
    except (ClientDisconnect, OSError, asyncio.CancelledError):
        writer.abort()
        raise
    except BlobError:
        raise  # commit() already removed the upload
    return Response(status_code=201)


@dataclass
class _Plan:
    """A create request, checked: what to bring in and which layers to write."""

    name: ModelName
    base: list[Layer] = field(default_factory=list)
    local_files: list[tuple[Path, str]] = field(default_factory=list)  # (file, layer kind)
    link: bool = False
    settings: dict[str, bytes] = field(default_factory=dict)  # kind -> blob content
    convert: PreparedConversion | None = None  # a Hugging Face checkpoint to convert
    scratch: Path | None = None  # a folder of links to uploaded blobs, removed at the end


def _check_gguf(path: Path, registry_check: Any) -> str:
    """The file's role, "model" or "projector"; a 400 with a sentence for a damaged or
    unsupported file (an architecture without a Hearth plugin is run by llama.cpp)."""
    try:
        with GGUFFile(path) as f:
            arch = f.architecture
            kind = str(f.metadata.raw("general.type") or "")
            # Ollama's rule: an image encoder without a text model (`<arch>.vision.block_count`
            # and no `<arch>.block_count`), e.g. its registry projector for Llama 3.2 Vision.
            meta = f.metadata
            is_encoder_only = not meta.uint("block_count") and meta.uint("vision.block_count") > 0
    except GGUFError as e:
        raise APIError(400, str(e)) from None
    if arch == "clip" or kind in ("mmproj", "projector") or is_encoder_only:
        return "projector"
    try:
        registry_check(arch)
    except LookupError as e:
        if not llamacpp_installed():  # without a plugin, the llama.cpp engine runs it
            raise APIError(400, f"{path.name}: {e}") from None
    return "model"


def _local_path(text: str) -> Path | None:
    """`from` as a local file path, or None when it is a model name."""
    if not (
        text.startswith(("/", "~", "./", "../")) or text.lower().endswith(".gguf") or "\\" in text
    ):
        return None
    path = Path(text).expanduser()
    if not path.is_absolute():
        raise APIError(400, f"'{text}': give the model file as an absolute path")
    if path.is_dir():
        return path  # a Hugging Face checkpoint folder, converted
    if path.suffix.lower() != ".gguf":
        raise APIError(400, f"{path.name} is not a .gguf file; only GGUF models can be imported")
    if not path.is_file():
        raise APIError(400, f"no model file at {path}")
    return path


def _settings(body: CreateRequest) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    if body.template is not None:
        check_template(body.template)
        out["template"] = body.template.encode()
    if body.system is not None:
        out["system"] = body.system.encode()
    if body.parameters is not None:
        unknown = sorted(set(body.parameters) - set(Options.model_fields))
        if unknown:
            raise APIError(400, f"unknown parameter '{unknown[0]}'")
        try:
            params = Options.model_validate(body.parameters).model_dump(exclude_none=True)
        except ValidationError as e:
            raise APIError(400, validation_message(list(e.errors()))) from None
        out["params"] = json.dumps(params).encode()
    if body.messages is not None:
        out["messages"] = json.dumps(
            [m.model_dump(exclude_none=True) for m in body.messages]
        ).encode()
    if body.license is not None:
        text = "\n".join(body.license) if isinstance(body.license, list) else body.license
        out["license"] = text.encode()
    return out


async def _plan(svc: Service, body: CreateRequest) -> _Plan:
    if body.modelfile:
        raise APIError(
            400,
            "Modelfile text is not supported; send from, files, template, "
            "system and parameters as fields (as the ollama client does)",
        )
    if body.adapters:
        raise APIError(400, "adapters (LoRA) are not supported yet")
    plan = _Plan(ModelName.parse(body.model), link=body.link, settings=_settings(body))
    check = svc.infos.registry.get
    if body.files and "config.json" in body.files:
        plan.scratch = await asyncio.to_thread(_link_uploads, svc.store, body.files)
        plan.convert = await _prepare(plan.scratch, body.quantize, plan)
    elif body.from_ and (local := _local_path(body.from_)) is not None and local.is_dir():
        plan.convert = await _prepare(local, body.quantize, plan)
    elif body.files and any(f.endswith(".safetensors") for f in body.files):
        raise APIError(400, "the uploaded model folder has no config.json")
    elif body.quantize:
        raise APIError(
            400,
            "quantizing is supported when converting a Hugging Face checkpoint; import an "
            "already quantized GGUF",
        )
    elif body.files:
        for filename, digest in body.files.items():
            digest = normalize_digest(digest)
            if not svc.store.has_blob(digest):
                raise APIError(
                    400,
                    f"blob {digest} ({filename}) is not in the store; upload it "
                    "first with POST /api/blobs/<digest>",
                )
            path = svc.store.blob_path(digest)
            kind = await asyncio.to_thread(_check_gguf, path, check)
            plan.base.append(
                Layer(f"application/vnd.ollama.image.{kind}", digest, path.stat().st_size)
            )
    elif body.from_:
        local = _local_path(body.from_)
        if local is not None:
            kind = await asyncio.to_thread(_check_gguf, local, check)
            plan.local_files.append((local, kind))
        else:
            plan.base = list(svc.store.resolve(body.from_).layers)
    else:
        raise APIError(
            400,
            "say what to create from: 'from' (a model name or an absolute "
            "path to a .gguf file) or 'files' (uploaded blobs)",
        )
    if body.projector:
        local = _local_path(body.projector)
        if local is None:
            raise APIError(400, "'projector' must be the absolute path of a .gguf file")
        kind = await asyncio.to_thread(_check_gguf, local, check)
        plan.local_files.append((local, kind))
        plan.base = [x for x in plan.base if x.kind != "projector"]  # the new one replaces it
    kinds = [k for _, k in plan.local_files] + [x.kind for x in plan.base]
    kinds += ["model"] if plan.convert is not None else []
    if kinds.count("model") != 1 or kinds.count("projector") > 1:
        found = ", ".join(kinds) or "nothing"
        raise APIError(
            400, f"a model needs exactly one model file and at most one vision projector ({found})"
        )
    return plan


def _link_uploads(store: ModelStore, files: dict[str, str]) -> Path:
    """A scratch folder holding each uploaded file under its name (links to the blobs), so
    the converter reads the checkpoint as the folder it was."""
    scratch = Path(tempfile.mkdtemp(prefix=".checkpoint-", dir=store.blobs))
    try:
        for filename, digest in files.items():
            rel = Path(filename)
            if rel.is_absolute() or ".." in rel.parts or not rel.parts:
                raise APIError(400, f"'{filename}' is not a file name inside the model folder")
            digest = normalize_digest(digest)
            if not store.has_blob(digest):
                raise APIError(
                    400,
                    f"blob {digest} ({filename}) is not in the store; upload it "
                    "first with POST /api/blobs/<digest>",
                )
            target = scratch / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(store.blob_path(digest).resolve())
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return scratch


async def _prepare(folder: Path, quantize: str | None, plan: _Plan) -> PreparedConversion:
    """Check a checkpoint folder (400 with the converter's sentence when it cannot be done)."""
    try:
        return await asyncio.to_thread(prepare_conversion, folder, default_converters(), quantize)
    except ValueError as e:
        if plan.scratch is not None:
            shutil.rmtree(plan.scratch, ignore_errors=True)
        raise APIError(400, str(e)) from None


async def _convert(svc: Service, plan: _Plan) -> AsyncIterator[dict[str, Any] | Layer]:
    """Convert the checkpoint into a new blob, reporting progress by source bytes; yields the
    model's layer last."""
    assert plan.convert is not None
    store, prepared = svc.store, plan.convert
    name = str(plan.name)
    progress = {"completed": 0, "total": prepared.checkpoint.weight_bytes}

    def report(p: Any) -> None:
        progress.update(completed=p.done, total=p.total_bytes)

    def work() -> Layer:
        tmp = store.temp_blob()
        try:
            prepared.write(tmp, registry=svc.infos.registry, progress=report, name=name)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return store.commit_blob(tmp, "model")

    status = f"converting {prepared.checkpoint.architectures[0]} to {prepared.file_type}"
    task = asyncio.ensure_future(asyncio.to_thread(work))
    last = -1
    while not task.done():
        await asyncio.wait([task], timeout=0.25)
        if progress["completed"] != last:
            last = progress["completed"]
            yield {"status": status, **progress}
    try:
        layer = task.result()
    except ValueError as e:
        yield {"error": f"converting the model failed: {e}"}
        return
    yield {"status": status, "digest": layer.digest, **progress}
    yield layer


async def _bring_in(
    store: ModelStore, source: Path, kind: str, link: bool
) -> AsyncIterator[dict[str, Any] | Layer]:
    """Copy or link a local file into the store, reporting progress; yields its layer last."""
    progress = {"completed": 0, "total": source.stat().st_size}

    def report(done: int, total: int) -> None:
        progress.update(completed=done, total=total)

    verb = "linking" if link else "copying"
    task = asyncio.ensure_future(asyncio.to_thread(store.add_file, source, link, report, kind))
    last = -1
    while not task.done():
        await asyncio.wait([task], timeout=0.25)
        if progress["completed"] != last:
            last = progress["completed"]
            yield {"status": f"{verb} {source.name}", **progress}
    layer = task.result()
    yield {
        "status": f"{verb} {source.name}",
        "digest": layer.digest,
        "total": layer.size,
        "completed": layer.size,
    }
    yield layer


async def _run(svc: Service, plan: _Plan) -> AsyncIterator[dict[str, Any]]:
    try:
        async for event in _run_steps(svc, plan):
            yield event
    finally:
        if plan.scratch is not None:
            shutil.rmtree(plan.scratch, ignore_errors=True)


async def _run_steps(svc: Service, plan: _Plan) -> AsyncIterator[dict[str, Any]]:
    store = svc.store
    if plan.convert is not None:
        yield {"status": "converting Hugging Face checkpoint"}
        async for converted in _convert(svc, plan):
            if isinstance(converted, Layer):
                plan.base.append(converted)
            else:
                yield converted
                if "error" in converted:
                    return
    yield {"status": "parsing GGUF"}
    for source, kind in plan.local_files:
        async for status in _bring_in(store, source, kind, plan.link):
            if isinstance(status, Layer):
                plan.base.append(status)
            else:
                yield status
    layers = [x for x in plan.base if x.kind not in plan.settings]
    for layer in layers:
        yield {"status": f"using existing layer {layer.digest}"}
    for kind, data in plan.settings.items():
        new = store.put_bytes(data, kind)
        yield {"status": f"creating new layer {new.digest}"}
        layers.append(new)
    yield {"status": "writing manifest"}
    await asyncio.to_thread(store.write_manifest, plan.name, layers)
    yield {"status": "success"}


@router.post("/api/create", summary="Create a model from a blob, a model or a local GGUF")
async def create(body: CreateRequest, request: Request) -> Response:
    svc = service_of(request)
    plan = await _plan(svc, body)
    events = _run(svc, plan)
    return await ndjson_or_last(events, body.stream)
