"""MCP's prompts and resources as Hearth uses them (light to import: no MCP SDK).

`PromptSpec` is a server's prompt as the composer offers it (`/name arg=value`); `prompt_messages`
turns what `prompts/get` gave into Ollama /api/chat messages (text as content, images as
base64 `images`, an embedded resource's text quoted with its address). `ResourceSpec` is a
resource the user can attach; `ResourceContent` one part of what `resources/read` gave (text,
or bytes with their MIME type). `parse_prompt_command` reads the composer's `/name a=1 b="x y"`.
"""

from __future__ import annotations

import base64
import re
import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

__all__ = [
    "PromptArg",
    "PromptSpec",
    "ResourceContent",
    "ResourceSpec",
    "parse_prompt_command",
    "prompt_messages",
    "resource_contents",
    "resource_file_name",
]

# A resource read as a document is given a file name whose suffix says its format to
# hearth.documents (which chooses its reader by suffix).
_SUFFIXES = {
    "text/markdown": ".md",
    "text/html": ".html",
    "text/csv": ".csv",
    "text/tab-separated-values": ".tsv",
    "application/pdf": ".pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
}


@dataclass(frozen=True)
class PromptArg:
    name: str
    description: str = ""
    required: bool = False


@dataclass(frozen=True)
class PromptSpec:
    """One prompt of a server; the composer offers it as `/command`."""

    server: str
    name: str
    title: str = ""
    description: str = ""
    arguments: tuple[PromptArg, ...] = ()

    def missing(self, values: dict[str, str]) -> list[str]:
        """The required arguments `values` lacks."""
        return [a.name for a in self.arguments if a.required and not values.get(a.name)]


@dataclass(frozen=True)
class ResourceSpec:
    """One resource a server lists."""

    server: str
    uri: str
    name: str
    title: str = ""
    description: str = ""
    mime_type: str = ""
    size: int | None = None

    @property
    def label(self) -> str:
        return self.title or self.name or self.uri


@dataclass(frozen=True)
class ResourceContent:
    """One part of a read resource: `text`, or `data` (bytes) of `mime_type`."""

    uri: str
    mime_type: str = ""
    text: str | None = None
    data: bytes | None = None

    @property
    def is_image(self) -> bool:
        return self.data is not None and self.mime_type.startswith("image/")


def _part(content: Any) -> tuple[str, list[str]]:
    """(text, images as base64) of one MCP content block."""
    kind = getattr(content, "type", "")
    if kind == "text":
        return str(content.text), []
    if kind == "image":
        return "", [str(content.data)]
    if kind == "resource":
        res = content.resource
        text = getattr(res, "text", None)
        if text is not None:
            return f"[{res.uri}]\n{text}", []
        mime = str(getattr(res, "mime_type", "") or "")
        if mime.startswith("image/"):
            return "", [str(res.blob)]
        return f"[{res.uri}: {mime or 'binary'} content not shown]", []
    if kind == "resource_link":
        return f"[{content.name}: {content.uri}]", []
    return f"[{kind or 'unknown'} content not shown]", []


def prompt_messages(result: Any) -> list[dict[str, Any]]:
    """The messages of a `GetPromptResult`, in Ollama's /api/chat shape, one per message."""
    out: list[dict[str, Any]] = []
    for m in result.messages:
        text, images = _part(m.content)
        msg: dict[str, Any] = {"role": str(m.role), "content": text}
        if images:
            msg["images"] = images
        out.append(msg)
    return out


def resource_contents(result: Any) -> list[ResourceContent]:
    """The parts of a `ReadResourceResult` (blobs decoded to bytes)."""
    out = []
    for c in result.contents:
        mime = str(getattr(c, "mime_type", "") or "")
        text = getattr(c, "text", None)
        if text is not None:
            out.append(ResourceContent(str(c.uri), mime, text=str(text)))
        else:
            out.append(ResourceContent(str(c.uri), mime, data=base64.b64decode(c.blob)))
    return out


def resource_file_name(name: str, part: ResourceContent, known: frozenset[str]) -> str:
    """The file name a read resource is kept under to be read as a document: `name` made safe,
    with the suffix its MIME type says (the address's own suffix when it is one of `known`,
    else `.txt` for text; "" for bytes no document reader takes)."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "resource"
    path_suffix = PurePosixPath(part.uri.split("?")[0]).suffix.lower()
    suffix = _SUFFIXES.get(part.mime_type.split(";")[0].strip().lower(), "")
    if not suffix and path_suffix in known:
        suffix = path_suffix
    if not suffix and part.text is not None:
        suffix = ".txt"
    if not suffix:
        return ""
    return stem if stem.lower().endswith(suffix) else stem + suffix


@dataclass(frozen=True)
class PromptCommand:
    """What `/name a=1 b="x y"` says: the prompt's name and its arguments."""

    name: str
    arguments: dict[str, str] = field(default_factory=dict)


def parse_prompt_command(text: str) -> PromptCommand | None:
    """`/name key=value ...` (values quoted as in a shell when they hold spaces), or None when
    `text` is not such a command. Raises `ValueError` with a sentence for a word that is not
    `key=value` or unbalanced quotes."""
    text = text.strip()
    if not text.startswith("/") or len(text) < 2 or text[1].isspace():
        return None
    head, _, rest = text[1:].partition(" ")
    try:
        words = shlex.split(rest)
    except ValueError as e:
        raise ValueError(f"the arguments of /{head} do not parse: {e}") from None
    arguments: dict[str, str] = {}
    for w in words:
        key, eq, value = w.partition("=")
        if not eq or not key:
            raise ValueError(f"/{head}: write each argument as name=value (not {w!r})")
        arguments[key] = value
    return PromptCommand(head, arguments)
