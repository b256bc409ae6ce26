"""The multimodal core (runner side): images split from the prompt, encoded once into the
multimodal store, handed to the text graph, kept whole in one batch, and cached by content.

The model is a tiny llama whose "vision encoder" reads token ids out of a picture's pixels and
returns those tokens' embeddings. A prompt with such a picture must then give exactly the
logits of the same prompt written with the tokens, which llama.cpp computes independently.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
import pytest
from PIL import Image

from hearth.engine.input import Input, Multimodal, PassInput, image_positions
from hearth.engine.ml.api import Context, OutOfMemoryError
from hearth.engine.ml.tensor import DType
from hearth.engine.multimodal_store import is_placeholder
from hearth.plugins import ArchitectureSpec
from hearth.plugins.registry import ArchitectureRegistry
from hearth.plugins.testing import LLAMACPP_LOGITS, run_oracle
from hearth.runner.core import RequestError, Runner, RunnerConfig
from hearth.runner.protocol import CompletionDone, CompletionOptions, CompletionRequest
from hearth_llama import Config
from hearth_llama import Model as Llama

from support.runner import collect

PICTURE_TOKENS = [7, 300, 41, 12, 99, 5]


def token_picture(ids: list[int]) -> bytes:
    """A PNG whose first row spells token ids (red * 256 + green)."""
    img = Image.new("RGB", (len(ids), 3), (0, 0, 0))
    for x, t in enumerate(ids):
        img.putpixel((x, 0), (t // 256, t % 256, 0))
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


class PictureLlama(Llama):
    """A llama that "sees" token pictures: their tokens' embeddings, built in the encoder's own
    context. Rows of one picture attend to each other both ways when `both_ways`."""

    both_ways = False
    encodes = 0

    def encode_multimodal(self, ctx: Context, data: bytes) -> list[Multimodal]:
        try:
            img = Image.open(io.BytesIO(data)).convert("RGB")
        except Exception as e:
            raise ValueError(f"not a picture ({e})") from None
        pixels = np.asarray(img)[0].astype(np.int32)
        ids = pixels[:, 0] * 256 + pixels[:, 1]
        if img.width == 2048:  # the core's largest-image probe: pretend a wide encoder
            ids = np.zeros(16, np.int32)
        type(self).encodes += 1
        rows = ctx.input(DType.I32, (len(ids),), ids.astype(np.int32))
        return [Multimodal(ctx.get_rows(self.token_embd, rows), bidirectional=self.both_ways)]


class BothWaysLlama(PictureLlama):
    both_ways = True


def registry(model: type[Llama]) -> ArchitectureRegistry:
    reg = ArchitectureRegistry()
    reg.register(ArchitectureSpec("llama", Config, model), "test")
    return reg


def greedy(**kw: Any) -> CompletionOptions:
    return CompletionOptions(**{"temperature": 0, "repeat_penalty": 1.0, "num_predict": 6, **kw})


@pytest.fixture(scope="module")
def runner(tiny_llama_path):
    r = Runner(
        RunnerConfig(str(tiny_llama_path), num_ctx=256, parallel=2, num_batch=32, threads=2),
        registry=registry(PictureLlama),
    )
    yield r
    r.close()


def complete(
    runner: Runner, prompt: str, images: list[bytes], **options: Any
) -> tuple[str, CompletionDone]:
    req = CompletionRequest(
        prompt=prompt,
        images=[base64.b64encode(i).decode() for i in images],
        options=greedy(**options),
        top_logprobs=5,
    )
    return collect(runner.completion(req))


def test_a_picture_gives_the_logits_of_its_tokens_as_llama_cpp_computes_them(
    runner, tiny_llama_path, tmp_path
):
    engine = runner.engine
    text = runner.encode("hello there", add_special=False)
    ids, marks = runner._prompt_with_images(
        "[img-0]hello there", [base64.b64encode(token_picture(PICTURE_TOKENS)).decode()]
    )
    bos = runner.encode("", add_special=True)
    assert [t for t in ids if not is_placeholder(t)] == bos + text
    assert sum(map(is_placeholder, ids)) == len(PICTURE_TOKENS)
    assert marks[len(bos)] == len(PICTURE_TOKENS) - 1  # the picture stays in one batch
    engine.cache.remove(0, 0)
    ours = engine.forward(
        PassInput(np.array(ids), np.arange(len(ids)), np.zeros(len(ids)), np.arange(len(ids)))
    )
    engine.cache.remove(0, 0)
    request = {
        "model": str(tiny_llama_path),
        "n_ctx": 256,
        "threads": 2,
        "prompts": [{"ids": bos + PICTURE_TOKENS + text}],
        "greedy": 0,
        "sample_rows": len(ids),
        "top_k": 5,
    }
    oracle = run_oracle(LLAMACPP_LOGITS, request, tmp_path)
    rows = oracle["rows_idx_0"]
    diff = np.abs(ours[rows] - oracle["rows_0"]).max()
    assert diff < 1e-3, diff
    assert (ours.argmax(-1) == oracle["argmax_0"]).all()


def test_same_output_as_the_tokens_through_the_runner(runner):
    picture = token_picture(PICTURE_TOKENS)
    text, done = complete(runner, "[img-0] describe", [picture])
    bos = runner.encode("", add_special=True)
    tokens = bos + PICTURE_TOKENS + runner.encode(" describe", add_special=False)
    plain, plain_done = collect(
        runner.completion(CompletionRequest(tokens=tokens, options=greedy(), top_logprobs=5))
    )
    assert text == plain
    assert done.eval_count == plain_done.eval_count


def test_images_go_first_without_markers_and_markers_place_them(runner):
    a, b = token_picture([11, 12, 13]), token_picture([21, 22])
    ids, _ = runner._prompt_with_images("x", [base64.b64encode(i).decode() for i in (a, b)])
    bos = len(runner.encode("", add_special=True))
    assert [is_placeholder(t) for t in ids[bos : bos + 5]] == [True] * 5
    ids, _ = runner._prompt_with_images(
        "x[img-1]y[img-0]", [base64.b64encode(i).decode() for i in (a, b)]
    )
    flags = [is_placeholder(t) for t in ids]
    assert sum(flags) == 5 and flags[-1] and not flags[-4]  # ...y, then image 0 last
    with pytest.raises(RequestError, match="image 2"):
        runner._prompt_with_images("[img-2]", [base64.b64encode(a).decode()])
    with pytest.raises(RequestError, match="not a picture"):
        runner._prompt_with_images("[img-0]", [base64.b64encode(b"not an image").decode()])
    with pytest.raises(RequestError, match="base64"):
        runner._prompt_with_images("[img-0]", ["%%%"])


def test_a_second_turn_about_the_same_image_encodes_nothing_and_reuses_the_cache(runner):
    picture = token_picture([50, 51, 52, 53, 54, 55, 56, 57])
    before = PictureLlama.encodes
    first, done1 = complete(runner, "[img-0] what is it?", [picture])
    assert PictureLlama.encodes == before + 1
    computed = runner.engine.native.multimodal.encoded
    second, done2 = complete(runner, "[img-0] what is it?" + first + " and more?", [picture])
    assert PictureLlama.encodes == before + 1  # recalled from the store: no new encoder graph
    assert runner.engine.native.multimodal.encoded == computed  # and nothing computed again
    new_text = len(runner.encode(first + " and more?", add_special=False))
    assert done2.prompt_eval_count <= new_text + 1  # only the new text was evaluated


def test_a_different_image_with_the_same_text_does_not_reuse_the_cache(runner):
    a = token_picture([60, 61, 62, 63])
    b = token_picture([60, 61, 62, 64])
    complete(runner, "[img-0] same words", [a])
    _, done = complete(runner, "[img-0] same words", [b])
    words = len(runner.encode(" same words", add_special=False))
    # Nothing after BOS matches: the picture's rows and the words are evaluated again.
    assert done.prompt_eval_count >= 4 + words, done


def test_rows_of_one_image_attend_both_ways_when_the_model_says_so(tiny_llama_path):
    picture = base64.b64encode(token_picture(PICTURE_TOKENS)).decode()
    outs = []
    for model in (PictureLlama, BothWaysLlama):
        r = Runner(
            RunnerConfig(str(tiny_llama_path), num_ctx=128, parallel=1, num_batch=32, threads=2),
            registry=registry(model),
        )
        try:
            ids, _ = r._prompt_with_images("[img-0]ok", [picture])
            n = len(ids)
            logits = r.engine.forward(
                PassInput(np.array(ids), np.arange(n), np.zeros(n), np.arange(n))
            )
            outs.append(logits)
        finally:
            r.close()
    causal, both = outs
    bos = 1
    first_row = bos  # the picture's first row sees later picture rows only when both ways
    assert np.abs(causal[first_row] - both[first_row]).max() > 1e-4
    assert np.array_equal(causal[:first_row], both[:first_row])  # text before it is causal


def test_a_text_only_model_refuses_images(tiny_llama_path):
    r = Runner(RunnerConfig(str(tiny_llama_path), num_ctx=64, parallel=1, threads=2))
    try:
        assert r.engine.native.vision is None and not r.engine.sees_images
        with pytest.raises(RequestError, match="cannot see images"):
            r._prompt_with_images("[img-0]", [base64.b64encode(token_picture([1])).decode()])
    finally:
        r.close()


def test_the_largest_image_is_reserved_at_load(tiny_llama_path):
    r = Runner(
        RunnerConfig(str(tiny_llama_path), num_ctx=128, parallel=1, num_batch=8, threads=2),
        registry=registry(PictureLlama),
    )
    try:
        assert r.engine.native.vision == (16, r.engine.loaded.config.embedding_length)
        assert r.engine.num_batch == 16  # raised so that an image fits one batch
    finally:
        r.close()
    with pytest.raises(OutOfMemoryError, match="needs"):
        Runner(
            RunnerConfig(
                str(tiny_llama_path), num_ctx=128, parallel=1, threads=2, memory_limit=1024
            ),
            registry=registry(PictureLlama),
        )


def test_an_image_is_laid_out_as_its_items_declare():
    """One position per row (`positions` 0), or `positions` for an item that comes whole;
    each with the item's token; the items and `same_batch` on the first."""
    rows = Multimodal(None, rows=2, token=5)
    whole = Multimodal(None, rows=40, positions=1, token=9)
    image = Input(multimodal=[rows, whole], multimodal_hash=77)
    out = image_positions([Input(token=1), image, Input(token=2)])
    assert [i.token for i in out] == [1, 5, 5, 9, 2]
    assert [i.same_batch for i in out] == [0, 2, 0, 0, 0]
    assert [i.multimodal_hash for i in out] == [0, 77, 77, 77, 0]
    assert out[1].multimodal is image.multimodal and all(i.multimodal is None for i in out[2:])
    with pytest.raises(ValueError, match="no positions"):
        image_positions([Input(multimodal=[Multimodal(None)], multimodal_hash=3)])
