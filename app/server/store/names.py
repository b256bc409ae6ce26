"""Model names: `[[host/]namespace/]model[:tag]`, validated so that no name can escape the store.

Each part is a short run of letters, digits, `.`, `_` and `-` starting with a letter or digit,
so `..`, absolute paths, backslashes and extra `/` separators are all refused. The namespace
defaults to `library` and the tag to `latest`, as in Ollama. A host (`hf.co`,
`registry.example.com:5000`) comes first when a name has three parts, as in Ollama's
`HOST[:PORT]/NAMESPACE/MODEL:TAG`; the default registry (`registry.ollama.ai`) is written as
no host, so `registry.ollama.ai/library/llama3.2` and `llama3.2` are one model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ModelName", "InvalidName", "DEFAULT_NAMESPACE", "DEFAULT_TAG", "DEFAULT_HOST"]

DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"
DEFAULT_HOST = "registry.ollama.ai"

_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,79}")
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,99}(:[0-9]{1,5})?")


def _is_host(text: str) -> bool:
    """A registry's host, as Docker tells one from a namespace: it has a dot or a port, or is
    `localhost`."""
    return bool(_HOST.fullmatch(text)) and ("." in text or ":" in text or text == "localhost")


class InvalidName(ValueError):
    """The text is not a valid model name; the message says why."""


def _check(part: str, pattern: re.Pattern[str], what: str, full: str) -> str:
    if not pattern.fullmatch(part) or ".." in part:
        raise InvalidName(
            f"'{full}' is not a valid model name: the {what} may use letters, digits, '.', '_' "
            "and '-' (up to 80), must start with a letter or digit and cannot contain '..' "
            "(names look like 'model', 'model:tag' or 'namespace/model:tag')"
        )
    return part


@dataclass(frozen=True)
class ModelName:
    namespace: str
    model: str
    tag: str
    host: str = ""  # "" is the default registry (and models made here)

    @classmethod
    def parse(cls, text: str) -> ModelName:
        if not isinstance(text, str) or not text.strip():
            raise InvalidName("a model name is required")
        full = text.strip()
        if len(full) > 250:
            raise InvalidName("the model name is too long")
        colon = full.rfind(":")
        path, tag = (full[:colon], full[colon + 1 :]) if colon > full.rfind("/") else (full, "")
        if colon > full.rfind("/") and not tag:
            raise InvalidName(f"'{full}' is not a valid model name: the tag after ':' is empty")
        parts = path.split("/")
        if len(parts) > 3:
            raise InvalidName(
                f"'{full}' is not a valid model name: use at most two '/' "
                "(host/namespace/model:tag)"
            )
        host = parts[0] if len(parts) == 3 else ""
        if len(parts) == 3 and not _is_host(host):
            raise InvalidName(
                f"'{full}' is not a valid model name: '{host}' is not a host name (a host has "
                "a '.' or a port, as in hf.co or localhost:5000)"
            )
        namespace = parts[-2] if len(parts) >= 2 else DEFAULT_NAMESPACE
        return cls(
            _check(namespace, _PART, "namespace", full),
            _check(parts[-1], _PART, "model name", full),
            _check(tag or DEFAULT_TAG, _TAG, "tag", full),
            "" if host.lower() == DEFAULT_HOST else host,
        )

    @property
    def display(self) -> str:
        """What users see: `model:tag`, `namespace/model:tag` outside the library, and the
        host first for a model from another registry (`hf.co/owner/repo:Q4_K_M`)."""
        base = (
            self.model
            if self.namespace == DEFAULT_NAMESPACE and not self.host
            else f"{self.namespace}/{self.model}"
        )
        return f"{self.host}/{base}:{self.tag}" if self.host else f"{base}:{self.tag}"

    @property
    def parts(self) -> tuple[str, ...]:
        """The manifest's path under `manifests/`: the host (its port after a `+`, so the
        folder name is valid everywhere) only when there is one."""
        base = (self.namespace, self.model, self.tag)
        return (self.host.replace(":", "+"), *base) if self.host else base

    def same_as(self, other: ModelName) -> bool:
        """Names compare case-insensitively, as in Ollama."""
        return self.display.lower() == other.display.lower()

    def __str__(self) -> str:
        return self.display
