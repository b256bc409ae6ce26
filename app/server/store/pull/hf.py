"""Pulling from Hugging Face: `hf.co/OWNER/REPO[:QUANT]` (also `huggingface.co/...`).

The repository's files come from the Hugging Face API through `huggingface_hub`
(`HfApi.model_info(files_metadata=True)`: names, sizes and the LFS sha256 of each file), at
`HF_ENDPOINT` when it is set. The quantization is matched case-insensitively against the GGUF
file names (`Q4_K_M` finds `Model-Q4_K_M.gguf`, as a word, not inside `IQ4_K_M`). Without a
tag (or with `latest`) the first of `DEFAULT_QUANTS` that the repository has is taken, as
Ollama and Hugging Face do ("Q4_K_M, else a sensible one"): 4-bit first, then larger, then
smaller ones; a repository with none of those gets its first GGUF file in name order. A
vision repository's projector is the file with `mmproj` in its name (f16 preferred, as
llama.cpp's releases ship it). Files split into shards (`-00001-of-00003.gguf`) are refused:
Hearth loads a model from one file.

The files are downloaded from `{endpoint}/{repo}/resolve/{commit}/{file}` (redirected to the
CDN), pinned to the commit the listing came from.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import httpx

from ..names import ModelName
from .download import BlobSource
from .errors import PullError
from .network import http_client

__all__ = [
    "HF_HOSTS",
    "DEFAULT_QUANTS",
    "HFFile",
    "HFPlan",
    "HFModel",
    "is_hf",
    "plan_hf",
    "search_hf",
    "endpoint",
]

HF_HOSTS = frozenset({"hf.co", "huggingface.co"})

DEFAULT_QUANTS = (
    "Q4_K_M", "Q4_K_S", "Q4_0", "IQ4_XS", "IQ4_NL", "Q5_K_M", "Q5_K_S", "Q5_0", "Q6_K",
    "Q8_0", "Q3_K_L", "Q3_K_M", "BF16", "F16", "Q3_K_S", "Q2_K", "F32",
)  # fmt: skip
_SHARD = re.compile(r"-\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)
_MAX_FILES = 2000  # a listing longer than this is not a model repository we can choose from


@dataclass(frozen=True)
class HFFile:
    path: str  # inside the repository
    size: int
    sha256: str  # hex


@dataclass(frozen=True)
class HFPlan:
    repo: str
    revision: str
    model: HFFile
    projector: HFFile | None
    note: str  # how the file was chosen

    def sources(self, endpoint: str | None, headers: dict[str, str]) -> list[BlobSource]:
        from huggingface_hub import hf_hub_url

        files = [self.model] + ([self.projector] if self.projector else [])
        return [
            BlobSource(
                hf_hub_url(self.repo, f.path, revision=self.revision, endpoint=endpoint),
                "sha256:" + f.sha256,
                f.size,
                headers,
            )
            for f in files
        ]


def is_hf(name: ModelName) -> bool:
    return name.host.lower() in HF_HOSTS


def endpoint() -> str | None:
    """HF_ENDPOINT when set (read at each pull, so a test or a mirror can change it)."""
    return os.environ.get("HF_ENDPOINT") or None


def _ensure_reachable() -> None:
    """A PullError (502) at once when the hub cannot be reached at all: huggingface_hub retries
    a failed connection five times with backoff (about 15 s) before it gives up, which a
    machine without internet would otherwise wait through on every search and pull."""
    base = endpoint() or "https://huggingface.co"
    try:
        with http_client(httpx.Timeout(5.0)) as client:
            client.head(base)  # any answer will do: the host is there
    except httpx.HTTPError as e:
        raise PullError(f"cannot reach {base} ({e}); check the network connection", 502) from None


def _files(repo: str) -> tuple[str, list[HFFile]]:
    """The commit and GGUF files of `repo`, with sentences for the ways it can fail."""
    _ensure_reachable()
    from huggingface_hub import HfApi
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    api = HfApi(endpoint=endpoint())
    where = endpoint() or "huggingface.co"
    try:
        info = api.model_info(repo, files_metadata=True, timeout=30)
    except GatedRepoError:
        raise PullError(
            f"{repo} is gated on Hugging Face: accept its licence on the model's page and set "
            "HF_TOKEN (or run `hf auth login`) before pulling it",
            403,
        ) from None
    except (RepositoryNotFoundError, RevisionNotFoundError):
        raise PullError(f"the Hugging Face repository '{repo}' was not found", 404) from None
    except HfHubHTTPError as e:
        code = e.response.status_code if e.response is not None else 502
        raise PullError(f"{where} answered {code} for the repository {repo}", 502) from None
    except Exception as e:  # the transport's own errors (httpx.HTTPError, OSError)
        raise PullError(f"could not reach {where}: {e}", 502) from None
    siblings = list(info.siblings or [])[:_MAX_FILES]
    out = []
    for s in siblings:
        path = str(s.rfilename)
        if not path.lower().endswith(".gguf") or ".." in path.split("/") or path.startswith("/"):
            continue
        lfs = s.lfs
        sha = str(getattr(lfs, "sha256", "") or "") if lfs is not None else ""
        size = int(getattr(lfs, "size", 0) or s.size or 0)
        if re.fullmatch(r"[0-9a-f]{64}", sha) and size > 0:
            out.append(HFFile(path, size, sha))
    if not out:
        raise PullError(f"the Hugging Face repository '{repo}' has no GGUF files", 404)
    return str(info.sha or "main"), sorted(out, key=lambda f: f.path)


def _has_quant(path: str, quant: str) -> bool:
    base = path.rsplit("/", 1)[-1]
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(quant)}(?![A-Za-z0-9])", base, re.I) is not None


def choose(files: list[HFFile], tag: str, repo: str) -> tuple[HFFile, HFFile | None, str]:
    """The model file for `tag` (or the default), its projector and how it was chosen."""
    projectors = [f for f in files if "mmproj" in f.path.lower()]
    models = [f for f in files if f not in projectors]
    if not models:
        raise PullError(f"the Hugging Face repository '{repo}' has no GGUF model file", 404)
    if tag.lower() not in ("latest", ""):
        found = [f for f in models if _has_quant(f.path, tag)]
        if not found:
            have = sorted({f.path.rsplit("/", 1)[-1] for f in models})
            raise PullError(
                f"{repo} has no GGUF file for '{tag}'; its files are: " + ", ".join(have[:20]),
                404,
            )
        note = f"{found[0].path} (matches {tag})"
    else:
        names = [f.path for f in models]
        quant = next((q for q in DEFAULT_QUANTS if any(_has_quant(n, q) for n in names)), None)
        found = [f for f in models if _has_quant(f.path, quant)] if quant else models
        note = f"{found[0].path} (" + (
            f"{quant}: the first of {', '.join(DEFAULT_QUANTS[:4])}, ... that the repository has)"
            if quant
            else "no known quantization in the file names: the first file)"
        )
    model = found[0]
    if _SHARD.search(model.path):
        raise PullError(
            f"{model.path} is split into several files, which Hearth cannot load yet; "
            "choose a quantization stored as one file",
        )
    order = ("f16", "bf16", "f32", "q8_0")
    projector = next(
        (p for key in order for p in projectors if _has_quant(p.path, key)),
        projectors[0] if projectors else None,
    )
    return model, projector, note


def plan_hf(name: ModelName) -> HFPlan:
    """What to download for `hf.co/OWNER/REPO:TAG`."""
    repo = f"{name.namespace}/{name.model}"
    revision, files = _files(repo)
    model, projector, note = choose(files, name.tag, repo)
    return HFPlan(repo, revision, model, projector, note)


@dataclass(frozen=True)
class HFModel:
    """One search result: a repository with GGUF files."""

    repo: str
    downloads: int
    likes: int
    pipeline: str  # e.g. text-generation, image-text-to-text

    def to_json(self) -> dict[str, object]:
        return {
            "name": f"hf.co/{self.repo}",
            "repo": self.repo,
            "downloads": self.downloads,
            "likes": self.likes,
            "pipeline_tag": self.pipeline,
        }


def search_hf(query: str, limit: int = 20) -> list[HFModel]:
    """Repositories with GGUF files matching `query`, most downloaded first
    (`HfApi.list_models(filter="gguf", search=...)`)."""
    _ensure_reachable()
    from huggingface_hub import HfApi

    where = endpoint() or "huggingface.co"
    try:
        found = HfApi(endpoint=endpoint()).list_models(
            filter="gguf", search=query, sort="downloads", limit=max(1, min(limit, 100))
        )
        return [
            HFModel(str(m.id), int(m.downloads or 0), int(m.likes or 0), str(m.pipeline_tag or ""))
            for m in found
        ]
    except Exception as e:  # the transport's and the hub's errors alike
        raise PullError(f"searching {where} failed: {e}", 502) from None
