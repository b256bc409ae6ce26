"""Pulling from an Ollama registry: `NAME[:TAG]` from registry.ollama.ai, or
`HOST[:PORT]/NAMESPACE/MODEL:TAG` from another one.

The protocol is Docker's registry API as Ollama uses it (server/images.go): `GET
/v2/{namespace}/{model}/manifests/{tag}` with `Accept:
application/vnd.docker.distribution.manifest.v2+json` answers `{"config": {...}, "layers":
[{"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:...", "size": N},
...]}`; each layer is then `GET /v2/{namespace}/{model}/blobs/{digest}`, usually redirected
to a CDN. `https` is used unless `insecure` (Ollama's `--insecure`), which allows plain http.

Kept layers: model, projector, template, system, params, license, messages. The config blob
is not needed. A model with an adapter layer is refused, as `hearth import-ollama` does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx

from ..model_store import MEDIA_TYPES, BlobError, Layer, normalize_digest
from ..names import DEFAULT_HOST, ModelName
from .download import BlobSource, http_failure
from .errors import PullError

__all__ = ["MANIFEST_MEDIA_TYPE", "RegistryPlan", "plan_registry"]

MANIFEST_MEDIA_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
_MAX_MANIFEST = 1 << 20
_MAX_LAYERS = 64
_KEPT = {MEDIA_TYPES[k] for k in MEDIA_TYPES if k != "adapter"}


@dataclass(frozen=True)
class RegistryPlan:
    base: str  # https://host/v2/namespace/model
    layers: tuple[Layer, ...]

    def sources(self) -> list[BlobSource]:
        return [BlobSource(f"{self.base}/blobs/{x.digest}", x.digest, x.size) for x in self.layers]


def base_url(name: ModelName, insecure: bool) -> str:
    host = name.host or DEFAULT_HOST
    scheme = "http" if insecure else "https"
    return f"{scheme}://{host}/v2/{name.namespace}/{name.model}"


def parse_manifest(raw: bytes, label: str) -> tuple[Layer, ...]:
    """The layers Hearth keeps, checked (digests, sizes, media types); PullError otherwise."""
    try:
        data = json.loads(raw)
        entries = data["layers"]
        layers = tuple(
            Layer(str(x["mediaType"]), normalize_digest(str(x["digest"])), int(x["size"]))
            for x in entries[:_MAX_LAYERS]
        )
    except (ValueError, KeyError, TypeError, BlobError):
        raise PullError(f"the registry's manifest for {label} cannot be read", 502) from None
    if any(x.size < 0 for x in layers):
        raise PullError(f"the registry's manifest for {label} has a negative size", 502)
    kinds = [x.kind for x in layers]
    if "adapter" in kinds:
        raise PullError(f"{label} has an adapter (LoRA) layer; adapters are not supported yet")
    if kinds.count("model") != 1 or kinds.count("projector") > 1:
        raise PullError(
            f"{label} needs exactly one model layer and at most one projector "
            f"(the registry lists: {', '.join(kinds) or 'nothing'})",
            502,
        )
    return tuple(x for x in layers if x.media_type in _KEPT)


def plan_registry(name: ModelName, client: httpx.Client, insecure: bool) -> RegistryPlan:
    """Fetch and check the manifest of `name`."""
    base = base_url(name, insecure)
    label = name.display
    url = f"{base}/manifests/{name.tag}"
    try:
        with client.stream("GET", url, headers={"Accept": MANIFEST_MEDIA_TYPE}) as r:
            if r.status_code == 404:
                raise PullError(
                    f"model '{label}' was not found in the registry at "
                    f"{name.host or DEFAULT_HOST} (check the name and tag)",
                    404,
                )
            if r.status_code != 200:
                raise http_failure(r, f"the manifest of {label}")
            raw = b""
            for chunk in r.iter_bytes():
                raw += chunk
                if len(raw) > _MAX_MANIFEST:
                    raise PullError(f"the registry's manifest for {label} is too large", 502)
    except httpx.UnsupportedProtocol:
        raise PullError(f"cannot pull from {url}", 400) from None
    except httpx.HTTPError as e:
        hint = "" if insecure else " (a registry on plain http needs --insecure)"
        raise PullError(
            f"could not reach the registry at {name.host or DEFAULT_HOST}: {e}{hint}", 502
        ) from None
    return RegistryPlan(base, parse_manifest(raw, label))
