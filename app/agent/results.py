"""A tool's MCP result (`mcp.types.CallToolResult`) as what a chat can carry: text, images
and structured content, capped in size with the cut said in the text.

What each MCP content block becomes:
* `TextContent`: its text (blocks joined by newlines).
* `ImageContent` (base64 `data`, `mimeType`): the image's bytes, for a vision model; a format
  the service does not read (see `IMAGE_TYPES`) becomes a note in the text instead.
* `EmbeddedResource`: a text resource's text under its URI; a blob that is an image as an
  image; any other blob a note (its URI, type and size).
* `ResourceLink`, `AudioContent`: a note naming them (models get no audio or links' contents).
* `structuredContent`: kept as `structured`; it is also the text when the result has no text
  (servers written with the SDK send both).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import mcp.types as mcp_types

from .specs import ToolResult

__all__ = [
    "IMAGE_TYPES",
    "MAX_IMAGES",
    "MAX_IMAGE_BYTES",
    "tool_result",
]

# The image types Hearth's service decodes (server/prompting/images.py: PNG, JPEG, WebP, GIF,
# BMP, TIFF); other types would make the whole chat request fail.
IMAGE_TYPES = frozenset(
    ("image/png", "image/jpeg", "image/jpg", "image/webp", "image/gif", "image/bmp", "image/tiff")
)
MAX_IMAGES = 8  # per result; the service takes at most 16 images per message
MAX_IMAGE_BYTES = 20 * 1024 * 1024  # all images of one result together


def _image(data: str, mime: str, images: list[bytes], notes: list[str], what: str) -> None:
    if mime.lower() not in IMAGE_TYPES:
        notes.append(f"[{what} of type {mime} omitted: the model reads PNG, JPEG, WebP or GIF]")
        return
    try:
        images.append(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        notes.append(f"[{what} omitted: its data is not valid base64]")


def _blocks(content: list[Any]) -> tuple[list[str], list[bytes]]:
    texts: list[str] = []
    images: list[bytes] = []
    for block in content:
        if isinstance(block, mcp_types.TextContent):
            texts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent):
            _image(block.data, block.mime_type, images, texts, "an image")
        elif isinstance(block, mcp_types.EmbeddedResource):
            res = block.resource
            if isinstance(res, mcp_types.TextResourceContents):
                texts.append(f"[resource {res.uri}]\n{res.text}")
            elif (res.mime_type or "").startswith("image/"):
                _image(res.blob, res.mime_type or "", images, texts, f"the image {res.uri}")
            else:
                size = len(res.blob) * 3 // 4
                texts.append(
                    f"[resource {res.uri} ({res.mime_type or 'binary'}, ~{size} bytes) omitted]"
                )
        elif isinstance(block, mcp_types.ResourceLink):
            texts.append(f"[resource link: {block.name} {block.uri}]")
        elif isinstance(block, mcp_types.AudioContent):
            texts.append(f"[audio ({block.mime_type}) omitted: Hearth gives models no audio]")
        else:
            texts.append(f"[a {getattr(block, 'type', 'content')} block Hearth does not read]")
    return texts, images


def tool_result(result: mcp_types.CallToolResult, limit: int) -> ToolResult:
    """`result` as a `ToolResult` whose text is at most `limit` characters plus the note that
    says the cut, whose structured content is dropped (and said) when its JSON is over
    `limit`, and whose images are at most `MAX_IMAGES` and `MAX_IMAGE_BYTES` together."""
    texts, images = _blocks(list(result.content))
    structured = result.structured_content
    text = "\n".join(texts)
    notes: list[str] = []
    truncated = False
    if structured is not None:
        dumped = json.dumps(structured, ensure_ascii=False)
        if not text:
            text = dumped
        if len(dumped) > limit:
            structured, truncated = None, True
            notes.append(
                f"[Hearth dropped the structured content: {len(dumped)} characters, "
                f"over the {limit} limit]"
            )
    kept: list[bytes] = []
    for img in images:
        if len(kept) < MAX_IMAGES and sum(map(len, kept)) + len(img) <= MAX_IMAGE_BYTES:
            kept.append(img)
    if len(kept) < len(images):
        truncated = True
        notes.append(
            f"[Hearth dropped {len(images) - len(kept)} of {len(images)} images: at most "
            f"{MAX_IMAGES} and {MAX_IMAGE_BYTES // (1024 * 1024)} MiB per result]"
        )
    if len(text) > limit:
        notes.insert(
            0, f"[Hearth cut this result: the first {limit} of {len(text)} characters are shown]"
        )
        text, truncated = text[:limit], True
    if notes:
        text = "\n".join([text, *notes]) if text else "\n".join(notes)
    return ToolResult(text, kept, structured, bool(result.is_error), truncated)
