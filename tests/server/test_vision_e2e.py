"""Gemma 3 vision end to end, as a new user would try it: a live `hearth serve` (with an API
key), a tiny random Gemma 3 and its llama.cpp projector (`build_tiny_gemma3_vision`, converted
by llama.cpp's own converter), `hearth create -f Modelfile` with two FROM lines, the ollama
client's blob upload, then image questions through the real `ollama` and `openai` clients.

The answers of a random model are gibberish, but deterministic: greedy answers repeat, the
OpenAI route gives the Ollama route's text, and both equal what `hearth.runner.core.Runner`
gives in this process for the prompt the model's own chat template renders.
"""

from __future__ import annotations

import asyncio
import base64
import io
import os
import shutil
from pathlib import Path
from typing import Any

import anthropic
import httpx
import jinja2.sandbox
import ollama
import openai
import pytest
from PIL import Image

from hearth.cli.terminal_chat import projector_beside, resolve_model
from hearth.client import HearthClient
from hearth.engine.gguf import GGUFFile
from hearth.engine.ml.api import OutOfMemoryError
from hearth.plugins.testing import ConverterUnavailableError, sample_images
from hearth.runner.core import Runner, RunnerConfig
from hearth.runner.protocol import (
    CompletionOptions,
    CompletionRequest,
    RunnerOptions,
)
from hearth.server.scheduling.runner_process import RunnerProcess, RunnerStartError
from hearth_gemma3.testing import Gemma3VisionFiles, build_tiny_gemma3_vision

from .fakes import LiveServer, start_server, stop_server
from .vision_live import API_KEY, collect, hearth_cli

pytestmark = pytest.mark.slow

MODEL = "tiny-vision"
QUESTION = "what is this?"
GREEDY = {"temperature": 0, "num_predict": 8}
MAX_IMAGE_BYTES = 1 << 20  # HEARTH_MAX_IMAGE_BYTES for this service
IMAGES = sample_images()
# Two pictures the tiny model answers differently (its answers depend on the image).
FIRST, OTHER = "normal", "tiny"


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vision(tmp_path_factory: pytest.TempPathFactory) -> Gemma3VisionFiles:
    try:
        return build_tiny_gemma3_vision(tmp_path_factory.mktemp("gemma3-vision"))
    except ConverterUnavailableError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory, vision: Gemma3VisionFiles) -> Path:
    """A user's folder: the model, its projector (llama.cpp's names), a Modelfile, pictures."""
    folder = tmp_path_factory.mktemp("user")
    shutil.copyfile(vision.text, folder / "tiny-gemma3.gguf")
    shutil.copyfile(vision.mmproj, folder / "mmproj-tiny-gemma3-f32.gguf")
    (folder / "Modelfile").write_text(
        "# a vision model: the model, then its projector\n"
        "FROM ./tiny-gemma3.gguf\n"
        "FROM ./mmproj-tiny-gemma3-f32.gguf\n"
    )
    (folder / "a.png").write_bytes(IMAGES[FIRST])
    (folder / "b.png").write_bytes(IMAGES[OTHER])
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    home = tmp_path_factory.mktemp("vision-home")
    env = {
        "HEARTH_CONTEXT_LENGTH": "512",
        "HEARTH_API_KEY": API_KEY,
        "HEARTH_MAX_IMAGE_BYTES": str(MAX_IMAGE_BYTES),
    }
    live = start_server(home, None, env)
    yield live
    stop_server(live)


@pytest.fixture(scope="module")
def oc(server: LiveServer) -> ollama.Client:
    return ollama.Client(
        host=server.url, timeout=120, headers={"Authorization": f"Bearer {API_KEY}"}
    )


@pytest.fixture(scope="module")
def oa(server: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, timeout=120)


@pytest.fixture(scope="module")
def api(server: LiveServer) -> Any:
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=120
    ) as client:
        yield client


@pytest.fixture(scope="module")
def model(server: LiveServer, work: Path) -> str:
    """`hearth create tiny-vision -f Modelfile` (relative FROM paths), run from elsewhere."""
    proc = hearth_cli(server, "create", MODEL, "-f", str(work / "Modelfile"), cwd=Path("/"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "success"
    return MODEL


def ask(image: Path | bytes, question: str = QUESTION) -> dict[str, Any]:
    return {"role": "user", "content": question, "images": [image]}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def raw_chat(api: httpx.Client, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """/api/chat as the ollama client sends it (images as base64), keeping Hearth's extras."""
    sent = [
        {**m, "images": [b64(Path(i).read_bytes()) for i in m["images"]]} if "images" in m else m
        for m in messages
    ]
    body = {"model": MODEL, "messages": sent, "stream": False, "options": GREEDY, **extra}
    resp = api.post("/api/chat", json=body)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


# -- creating the model ---------------------------------------------------------------------


def test_hearth_create_with_two_from_lines_makes_a_vision_model(server, oc, api, model, work):
    show = oc.show(model)
    assert show.capabilities == ["completion", "vision"]
    assert show.details.family == "gemma3"
    raw = api.post("/api/show", json={"model": model}).json()
    projector = raw["projector_info"]
    assert projector["general.architecture"] == "clip"
    assert projector["clip.projector_type"] == "gemma3"
    assert projector["clip.vision.image_size"] == 64 and projector["clip.vision.patch_size"] == 8
    assert raw["model_info"]["general.architecture"] == "gemma3"
    # The projector's weights count in the memory estimate.
    assert raw["hearth"]["memory"]["weights"] > (work / "tiny-gemma3.gguf").stat().st_size
    listed = {m.model: m for m in oc.list().models}
    assert listed[f"{model}:latest"].size > 1_000_000  # both files
    shown = hearth_cli(server, "show", model)
    assert shown.returncode == 0 and "vision" in shown.stdout.split("Capabilities")[1]


def test_a_modelfile_from_the_vision_model_keeps_its_projector(server, oc, model, tmp_path):
    """`hearth show --modelfile`'s advice: build on the model with FROM <name>."""
    (tmp_path / "Modelfile").write_text(f"FROM {model}\nPARAMETER temperature 0\n")
    proc = hearth_cli(server, "create", "tiny-vision-custom", "-f", str(tmp_path / "Modelfile"))
    assert proc.returncode == 0, proc.stderr
    assert "vision" in oc.show("tiny-vision-custom").capabilities
    assert oc.delete("tiny-vision-custom").status == "success"


def test_ollama_client_create_from_two_uploaded_blobs(oc, api, model, work, vision):
    model_digest = oc.create_blob(work / "tiny-gemma3.gguf")
    projector_digest = oc.create_blob(work / "mmproj-tiny-gemma3-f32.gguf")
    assert api.head(f"/api/blobs/{projector_digest}").status_code == 200
    files = {"tiny-gemma3.gguf": model_digest, "mmproj-tiny-gemma3-f32.gguf": projector_digest}
    statuses = [p.status for p in oc.create("tiny-vision-blobs", files=files, stream=True)]
    assert statuses[-1] == "success"
    show = oc.show("tiny-vision-blobs")
    assert "vision" in show.capabilities
    # The same two files: the same answer as the model `hearth create` made.
    image = work / "a.png"
    ours = oc.chat("tiny-vision-blobs", messages=[ask(image)], options=GREEDY)
    theirs = oc.chat(model, messages=[ask(image)], options=GREEDY)
    assert ours.message.content == theirs.message.content
    # Two models, or two projectors, are refused with a sentence.
    with pytest.raises(ollama.ResponseError) as err:
        oc.create("two-projectors", files={"a.gguf": projector_digest, "b.gguf": projector_digest})
    assert err.value.status_code == 400 and "exactly one model file" in err.value.error
    assert oc.delete("tiny-vision-blobs").status == "success"


def test_a_projector_beside_the_model_file_is_found(tmp_path):
    (tmp_path / "gemma-3-4b-it-Q4_K_M.gguf").write_bytes(b"")
    model = tmp_path / "gemma-3-4b-it-Q4_K_M.gguf"
    assert projector_beside(model) is None
    (tmp_path / "mmproj-model-f16.gguf").write_bytes(b"")
    assert projector_beside(model) == tmp_path / "mmproj-model-f16.gguf"  # the only one
    (tmp_path / "mmproj-qwen2-vl-f16.gguf").write_bytes(b"")
    assert projector_beside(model) is None  # two, and neither names the model
    (tmp_path / "mmproj-gemma-3-4b-f16.gguf").write_bytes(b"")
    assert projector_beside(model) == tmp_path / "mmproj-gemma-3-4b-f16.gguf"


def test_hearth_run_with_a_model_file_brings_the_projector_beside_it(server, oc, work):
    """What `hearth run ./tiny-gemma3.gguf` does first: register the file and its projector."""
    with HearthClient(server.url, API_KEY, timeout=120) as client:
        name = resolve_model(client, str(work / "tiny-gemma3.gguf"))
    assert name == "local/tiny-gemma3:latest"
    assert "vision" in oc.show(name).capabilities
    reply = oc.chat(name, messages=[ask(work / "a.png")], options=GREEDY)
    assert reply.message.content
    assert oc.delete(name).status == "success"


# -- a model that cannot see ----------------------------------------------------------------


def test_a_text_only_model_refuses_images_with_a_sentence(oc, oa, api, tiny_llama_path, work):
    made = api.post("/api/create", json={"model": "tiny-text", "from": str(tiny_llama_path),
                                         "stream": False})  # fmt: skip
    assert made.status_code == 200 and made.json()["status"] == "success"
    assert "vision" not in oc.show("tiny-text").capabilities
    with pytest.raises(ollama.ResponseError) as err:
        oc.chat("tiny-text", messages=[ask(work / "a.png")], options=GREEDY)
    assert err.value.status_code == 400
    assert err.value.error == "tiny-text:latest does not support images"
    with pytest.raises(ollama.ResponseError) as err:
        oc.generate("tiny-text", prompt=QUESTION, images=[work / "a.png"], options=GREEDY)
    assert err.value.status_code == 400 and "does not support images" in err.value.error
    with pytest.raises(openai.BadRequestError) as oerr:
        oa.chat.completions.create(model="tiny-text", messages=[openai_ask(IMAGES[FIRST])],
                                   max_tokens=4)  # fmt: skip
    assert "does not support images" in str(oerr.value)
    # Text alone still works.
    assert oc.generate("tiny-text", prompt="hello", options={"num_predict": 2}).eval_count == 2


# -- asking about images --------------------------------------------------------------------


def test_ollama_client_chat_and_generate_with_an_image(oc, model, work):
    image = work / "a.png"
    first = oc.chat(model, messages=[ask(image)], options=GREEDY)
    assert first.done and first.done_reason == "length" and first.eval_count == 8
    assert first.message.role == "assistant" and first.message.content
    again = oc.chat(model, messages=[ask(image)], options=GREEDY)
    assert again.message.content == first.message.content  # greedy
    assert again.prompt_eval_count <= 2  # the image and the text came from the cache

    gen = oc.generate(model, prompt=QUESTION, images=[image], options=GREEDY)
    assert gen.done and gen.done_reason == "length" and gen.response
    # /api/generate renders the same user turn as /api/chat: the same prompt, the same answer.
    assert gen.response == first.message.content
    assert oc.generate(model, prompt=QUESTION, images=[image], options=GREEDY).response == (
        gen.response
    )
    streamed = list(oc.chat(model, messages=[ask(image)], options=GREEDY, stream=True))
    assert "".join(p.message.content for p in streamed) == first.message.content
    assert streamed[-1].done and streamed[-1].done_reason == "length"


def test_a_follow_up_turn_does_not_evaluate_the_image_again(oc, api, model, work):
    image = work / "a.png"
    turn1 = [ask(image)]
    reply = oc.chat(model, messages=turn1, options=GREEDY)
    turn2 = [*turn1, {"role": "assistant", "content": reply.message.content},
             {"role": "user", "content": "and what colour is it?"}]  # fmt: skip
    follow = oc.chat(model, messages=turn2, options=GREEDY)
    assert follow.message.content and follow.done_reason
    # Prompt sizes (independent of the cache) from Hearth's extras of the same requests.
    size1 = raw_chat(api, turn1)["hearth"]["prompt_tokens"]
    size2 = raw_chat(api, turn2)["hearth"]["prompt_tokens"]
    tokens_per_image = 16
    assert size1 > tokens_per_image
    new_text = size2 - size1  # the reply, the follow-up and the turn markers
    assert 0 < follow.prompt_eval_count <= new_text
    # The same follow-up again: all but the last tokens come from the cache.
    again = raw_chat(api, turn2)
    assert again["message"]["content"] == follow.message.content
    assert again["prompt_eval_count"] <= 2 and again["hearth"]["prompt_cached"] >= size2 - 2


def test_another_image_with_the_same_text_is_evaluated_and_answered_apart(oc, model, work):
    first = oc.chat(model, messages=[ask(work / "a.png")], options=GREEDY)
    warm = oc.chat(model, messages=[ask(work / "a.png")], options=GREEDY)
    assert warm.prompt_eval_count <= 2  # the image came from the cache
    other = oc.chat(model, messages=[ask(work / "b.png")], options=GREEDY)
    # The cache matches up to the image, not past it: the new image and the text after it.
    assert other.prompt_eval_count > 16
    assert other.message.content != first.message.content
    # Sent as bytes instead of a path: the same picture, the same answer, from the cache.
    again = oc.chat(model, messages=[ask(IMAGES[OTHER])], options=GREEDY)
    assert again.message.content == other.message.content and again.prompt_eval_count <= 2


def openai_ask(data: bytes, question: str = QUESTION) -> dict[str, Any]:
    url = "data:image/png;base64," + b64(data)
    return {
        "role": "user",
        "content": [{"type": "text", "text": question},
                    {"type": "image_url", "image_url": {"url": url}}],
    }  # fmt: skip


def test_openai_client_gives_the_ollama_clients_answer(oa, oc, api, model, work):
    for name, path in ((FIRST, work / "a.png"), (OTHER, work / "b.png")):
        chat = oa.chat.completions.create(
            model=model, messages=[openai_ask(IMAGES[name])], temperature=0, max_tokens=8
        )
        choice = chat.choices[0]
        assert choice.finish_reason == "length" and choice.message.content
        assert chat.usage.completion_tokens == 8
        native = oc.chat(model, messages=[ask(path)], options=GREEDY)
        assert choice.message.content == native.message.content
        assert chat.usage.prompt_tokens == raw_chat(api, [ask(path)])["hearth"]["prompt_tokens"]
        stream = oa.chat.completions.create(
            model=model, messages=[openai_ask(IMAGES[name])], temperature=0, max_tokens=8,
            stream=True,
        )  # fmt: skip
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text == native.message.content


def test_anthropic_client_image_block_gives_the_ollama_clients_answer(server, oc, model, work):
    ac = anthropic.Anthropic(base_url=server.url, api_key=API_KEY, timeout=120, max_retries=0)
    for name, path in ((FIRST, work / "a.png"), (OTHER, work / "b.png")):
        source = {"type": "base64", "media_type": "image/png", "data": b64(IMAGES[name])}
        content = [{"type": "image", "source": source}, {"type": "text", "text": QUESTION}]
        msg = ac.messages.create(
            model=model, max_tokens=8, messages=[{"role": "user", "content": content}],
            extra_body={"temperature": 0},
        )  # fmt: skip
        native = oc.chat(model, messages=[ask(path)], options=GREEDY)
        assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 8
        assert msg.content[0].text == native.message.content


def test_the_service_answers_as_the_runner_does_in_process(oc, api, model, vision, work):
    """The same prompt (rendered here by the GGUF's own chat template with plain Jinja) given
    to `hearth.runner.core.Runner` in this process: the same tokens, the same log-probs."""
    with GGUFFile(vision.text) as f:
        template = str(f.metadata.raw("tokenizer.chat_template"))
    env = jinja2.sandbox.ImmutableSandboxedEnvironment()
    runner = Runner(RunnerConfig(str(vision.text), projector=str(vision.mmproj), num_ctx=512))
    try:
        for name, path in ((FIRST, work / "a.png"), (OTHER, work / "b.png")):
            prompt = env.from_string(template).render(
                messages=[{"role": "user", "content": "[img-0]" + QUESTION}],
                bos_token="<bos>",
                add_generation_prompt=True,
            )
            request = CompletionRequest(
                prompt=prompt,
                images=[b64(IMAGES[name])],
                options=CompletionOptions(**GREEDY),
                logprobs=True,
            )
            text, logprobs, done = collect(runner.completion(request))
            served = raw_chat(api, [ask(path)], logprobs=True)
            assert served["message"]["content"] == text
            assert [x["token"] for x in served["logprobs"]] == [x["token"] for x in logprobs]
            for a, b in zip(served["logprobs"], logprobs, strict=True):
                assert a["logprob"] == pytest.approx(b["logprob"], abs=1e-3)
            assert served["hearth"]["prompt_tokens"] == done.prompt_eval_count + done.prompt_cached
    finally:
        runner.close()


# -- bad images -----------------------------------------------------------------------------


def png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def test_bad_images_are_refused_with_a_sentence_and_the_service_goes_on(
    oc, oa, api, server, model, work
):
    oc.chat(model, messages=[ask(work / "a.png")], options=GREEDY)  # loaded
    pids = server.runner_pids()

    def refused(image: bytes) -> ollama.ResponseError:
        with pytest.raises(ollama.ResponseError) as err:
            oc.chat(model, messages=[ask(image)], options=GREEDY)
        return err.value

    err = refused(b"these bytes are no picture at all")
    assert err.status_code == 400 and err.error == "image 0 is not an image Hearth can read"
    # A PNG whose header reads but whose pixels are cut off: found when the runner decodes it.
    err = refused(IMAGES[FIRST][:300])
    assert err.status_code == 400 and "image 0" in err.error and "truncated" in err.error
    err = refused(png(Image.new("RGB", (4, 4))).replace(b"IHDR", b"IHDX"))
    assert err.status_code == 400 and "image 0" in err.error
    # Bigger than HEARTH_MAX_IMAGE_BYTES (checked before anything decodes it).
    big = IMAGES[FIRST] + os.urandom(MAX_IMAGE_BYTES)
    err = refused(big)
    assert err.status_code == 413
    assert err.error == f"image 0 is larger than the {MAX_IMAGE_BYTES} byte limit"
    # More pixels than HEARTH_MAX_IMAGE_PIXELS (50 million by default): a small file.
    wide = png(Image.new("1", (10_000, 6_000)))
    assert len(wide) < MAX_IMAGE_BYTES
    err = refused(wide)
    assert err.status_code == 413
    assert err.error == "image 0 is 10000x6000 pixels, more than the 50000000 pixel limit"
    bomb = png(Image.new("1", (20_000, 10_000)))  # beyond Pillow's decompression-bomb guard
    err = refused(bomb)
    assert err.status_code == 413 and err.error == "image 0 has more pixels than the limit"
    # The second image of a conversation is named as such.
    with pytest.raises(ollama.ResponseError) as e2:
        oc.chat(model, messages=[ask(work / "a.png"), ask(b"nope")], options=GREEDY)
    assert e2.value.status_code == 400 and e2.value.error.startswith("image 1 ")
    # Not base64 at all (the ollama client would refuse to send it; a hand-made request).
    body = {"model": model, "prompt": QUESTION, "images": ["%%%"], "stream": False}
    resp = api.post("/api/generate", json=body)
    assert resp.status_code == 400 and resp.json()["error"] == "image 0 is not valid base64"

    # The OpenAI route: the same checks, and remote URLs are not fetched.
    with pytest.raises(openai.BadRequestError) as oerr:
        oa.chat.completions.create(model=model, messages=[openai_ask(b"not a picture")],
                                   max_tokens=4)  # fmt: skip
    assert "image 0 is not an image Hearth can read" in str(oerr.value)
    remote = {"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}  # fmt: skip
    with pytest.raises(openai.BadRequestError) as oerr:
        oa.chat.completions.create(model=model, messages=[remote], max_tokens=4)
    assert "image URLs are not fetched" in str(oerr.value)
    with pytest.raises(openai.APIStatusError) as oerr:
        oa.chat.completions.create(model=model, messages=[openai_ask(wide)], max_tokens=4)
    assert oerr.value.status_code == 413 and "pixel limit" in str(oerr.value)

    # Nothing crashed: the same runner answers the next question.
    reply = oc.chat(model, messages=[ask(work / "a.png")], options=GREEDY)
    assert reply.message.content and reply.done_reason == "length"
    assert server.runner_pids() == pids


# -- one runner per model file, a projector or not ------------------------------------------


def test_the_same_file_without_its_projector_then_with_it(oc, api, model, work):
    """A text-only model made from the vision model's file shares its runner key (the file);
    when the text-only runner is loaded, a request with images must not be sent to it."""
    made = api.post("/api/create", json={"model": "tiny-gemma3-text", "stream": False,
                                         "from": str(work / "tiny-gemma3.gguf")})  # fmt: skip
    assert made.status_code == 200, made.text
    assert "vision" not in oc.show("tiny-gemma3-text").capabilities
    for name in (model, "tiny-gemma3-text"):
        oc.generate(name, keep_alive=0)  # unload
    assert oc.generate("tiny-gemma3-text", prompt="hello", options=GREEDY).response
    reply = oc.chat(model, messages=[ask(work / "a.png")], options=GREEDY)
    assert reply.message.content
    # And back: the vision runner serves the text-only model's text.
    assert oc.generate("tiny-gemma3-text", prompt="hello", options=GREEDY).response
    assert oc.chat(model, messages=[ask(work / "a.png")], options=GREEDY).message.content
    assert oc.delete("tiny-gemma3-text").status == "success"


# -- memory ---------------------------------------------------------------------------------


def test_a_vision_model_over_its_memory_limit_fails_at_load_with_a_sentence(vision):
    """The service passes no memory limit to its runners (it evicts idle models instead), so
    the limit is tried where it lives: the runner, in process and as `hearth runner`."""
    text = Runner(RunnerConfig(str(vision.text), num_ctx=512))
    text_total = text.info().memory.total
    text.close()
    both = Runner(RunnerConfig(str(vision.text), projector=str(vision.mmproj), num_ctx=512))
    memory = both.info().memory
    both.close()
    assert memory.total > text_total + vision.mmproj.stat().st_size // 2  # the projector counts
    limit = (memory.total + text_total) // 2  # the text model fits, the vision model not
    fits = Runner(RunnerConfig(str(vision.text), num_ctx=512, memory_limit=limit))
    fits.close()
    config = RunnerConfig(
        str(vision.text), projector=str(vision.mmproj), num_ctx=512, memory_limit=limit
    )
    with pytest.raises(OutOfMemoryError) as err:
        Runner(config)
    assert err.value.needed == memory.total and err.value.available == limit
    message = str(err.value)
    assert message.startswith("this model needs ") and "weights" in message
    assert "try a smaller context length" in message

    options = RunnerOptions(num_ctx=512, projector=str(vision.mmproj), memory_limit=limit)

    async def start() -> None:
        runner = await RunnerProcess.start(str(vision.text), options, timeout=120)
        await runner.stop()

    with pytest.raises(RunnerStartError) as start_err:
        asyncio.run(start())
    assert str(start_err.value) == message
