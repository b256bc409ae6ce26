"""A prompt with images as the KV cache will see it: tokens and image placeholders.

The prompt text marks image N of the request with `[img-N]` (the service writes these; a raw
prompt without any marker gets the images first, as Ollama does). Each marker becomes the
model's `image_text` around one multimodal input; the text pieces are tokenized (the first
with BOS), each image is hashed and encoded on first use only (multimodal_store.py), the
plugin's `post_tokenize` rewrites what its architecture needs to, and the images are laid out
as the positions their items declare (`image_positions`). The result is a list of ints where
negative values are image placeholders, plus the SameBatch mark of each input.
"""

from __future__ import annotations

from collections.abc import Callable

from ..engine.architecture import Architecture, MultimodalNotSupportedError
from ..engine.forward import ForwardEngine
from ..engine.input import Input, image_positions
from ..engine.multimodal_store import IMAGE_MARKER, image_hash, placeholder

__all__ = ["IMAGE_MARKER", "build_prompt"]


def build_prompt(
    text: str,
    images: list[bytes],
    model: Architecture,  # type: ignore[type-arg]
    engine: ForwardEngine,
    encode: Callable[[str, bool], list[int]],
) -> tuple[list[int], list[int]]:
    """(inputs, same_batch marks) of `text` with `images`; `encode(text, add_special)`
    tokenizes. Raises ValueError with a sentence for a bad marker or an undecodable image."""
    if not IMAGE_MARKER.search(text):
        text = "".join(f"[img-{i}]" for i in range(len(images))) + text
    before, after = type(model).image_text
    parts = IMAGE_MARKER.split(text)  # text, index, text, index, ..., text
    inputs: list[Input] = [
        Input(token=t) for t in encode(parts[0] + (before if len(parts) > 1 else ""), True)
    ]
    for k in range(1, len(parts), 2):
        n = int(parts[k])
        if n >= len(images):
            raise ValueError(f"the prompt refers to image {n} but the request has {len(images)}")
        digest = image_hash(images[n])
        items = engine.multimodal.recall(digest)
        if items is None:
            ctx = engine.backend.new_context()
            try:
                items = engine.multimodal.add(digest, ctx, model.encode_multimodal(ctx, images[n]))
            except MultimodalNotSupportedError:
                ctx.close()
                raise
            except ValueError as e:
                ctx.close()
                raise ValueError(f"image {n}: {e}") from None
            except BaseException:
                ctx.close()
                raise
        inputs.append(Input(multimodal=items, multimodal_hash=digest))
        tail = after + parts[k + 1] + (before if k + 2 < len(parts) else "")
        inputs.extend(Input(token=t) for t in encode(tail, False))
    return _flatten(image_positions(model.post_tokenize(inputs)), engine)


def _flatten(inputs: list[Input], engine: ForwardEngine) -> tuple[list[int], list[int]]:
    """Laid-out inputs as ints (placeholders for image positions) and marks."""
    ids: list[int] = []
    marks: list[int] = []
    image, row = -1, 0
    current_hash = 0
    for inp in inputs:
        if inp.multimodal is not None:
            current_hash = inp.multimodal_hash
            image, row = engine.multimodal.image_id(current_hash), 0
            ids.append(placeholder(image, 0))
        elif inp.multimodal_hash:
            if inp.multimodal_hash != current_hash:
                raise ValueError("post_tokenize: an image position without its image's items")
            row += 1
            ids.append(placeholder(image, row))
        else:
            ids.append(inp.token)
        marks.append(inp.same_batch)
    return ids, marks
