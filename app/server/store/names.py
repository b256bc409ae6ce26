"""Model names: `[namespace/]model[:tag]`, validated so that no name can escape the store.

Each part is a short run of letters, digits, `.`, `_` and `-` starting with a letter or digit,
so `..`, absolute paths, backslashes and extra `/` separators are all refused. The namespace
defaults to `library` and the tag to `latest`, as in Ollama.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ModelName", "InvalidName", "DEFAULT_NAMESPACE", "DEFAULT_TAG"]

DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"

_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,79}")


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

    @classmethod
    def parse(cls, text: str) -> ModelName:
        if not isinstance(text, str) or not text.strip():
            raise InvalidName("a model name is required")
        full = text.strip()
        if len(full) > 250:
            raise InvalidName("the model name is too long")
        path, _, tag = full.partition(":")
        if _ == ":" and not tag:
            raise InvalidName(f"'{full}' is not a valid model name: the tag after ':' is empty")
        parts = path.split("/")
        if len(parts) > 2:
            raise InvalidName(
                f"'{full}' is not a valid model name: use at most one '/' (namespace/model:tag)"
            )
        namespace = parts[0] if len(parts) == 2 else DEFAULT_NAMESPACE
        return cls(
            _check(namespace, _PART, "namespace", full),
            _check(parts[-1], _PART, "model name", full),
            _check(tag or DEFAULT_TAG, _TAG, "tag", full),
        )

    @property
    def display(self) -> str:
        """What users see: `model:tag`, or `namespace/model:tag` outside the library."""
        base = (
            self.model if self.namespace == DEFAULT_NAMESPACE else f"{self.namespace}/{self.model}"
        )
        return f"{base}:{self.tag}"

    @property
    def parts(self) -> tuple[str, str, str]:
        return self.namespace, self.model, self.tag

    def same_as(self, other: ModelName) -> bool:
        """Names compare case-insensitively, as in Ollama."""
        return self.display.lower() == other.display.lower()

    def __str__(self) -> str:
        return self.display
