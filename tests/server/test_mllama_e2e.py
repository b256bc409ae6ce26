"""Llama 3.2 Vision (mllama) end to end, as a new user would try it: a tiny random
`MllamaForConditionalGeneration` saved as a Hugging Face folder with Meta's Llama 3.2 Vision
Instruct chat template, `hearth create NAME -f FOLDER` on a live `hearth serve`, then image
questions through the real `ollama` and `openai` clients.

The oracle is transformers: `MllamaProcessor.apply_chat_template` renders and tokenizes the
same messages (the image item first, as Ollama places it), its image processor tiles the
picture, and the model (patched to Meta's semantics, as tests/plugins/test_mllama.py compares
with) continues greedily. The service's answers must be that continuation, token for token.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import httpx
import ollama
import openai
import pytest
from PIL import Image

from hearth.convert import convert_checkpoint
from hearth.plugins.registry import default_converters, default_registry
from hearth.runner.core import Runner, RunnerConfig
from hearth.server.prompting.prompts import conversation, render
from hearth.server.request_types import ChatMessage
from hearth_mllama.image import CLIP_MEAN, CLIP_STD
from hearth_mllama.testing import (
    TinyMllamaVision,
    meta_cross_attention,
    meta_semantics,
    random_png,
    tiny_mllama,
)
from tests.plugins.mllama_checkpoint import LLAMA32_VISION_TEMPLATE, save_tiny

from .fakes import LiveServer, start_server, stop_server
from .vision_live import API_KEY, collect, hearth_cli

MODEL = "tiny-mllama"
QUESTION = "what is the er on the"
GREEDY = {"temperature": 0, "num_predict": 8, "repeat_penalty": 1.0}  # transformers greedy
SPEC = TinyMllamaVision(vocab=300, text_layers=5, cross_attention_layers=(1, 3))
AUTH = {"Authorization": f"Bearer {API_KEY}"}


WIDE, TALL = random_png(224, 50, 1), random_png(40, 200, 2)  # 1x4 and 4x1 tiles of 56


# -- the model: a Hugging Face folder, and transformers' reference --------------------------


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's download: config.json, model.safetensors, tokenizer files with Meta's
    chat template; and two pictures."""
    path = tmp_path_factory.mktemp("Llama-3.2-tiny-Vision-Instruct")
    save_tiny(tiny_mllama(SPEC), path, LLAMA32_VISION_TEMPLATE)
    (path.parent / "wide.png").write_bytes(WIDE)
    (path.parent / "tall.png").write_bytes(TALL)
    return path


@pytest.fixture(scope="module")
def reference(folder: Path) -> Any:
    """(transformers' model with Meta's semantics, its MllamaProcessor for the folder: the
    Pillow image processor, what `AutoProcessor` gives without torchvision)."""
    from transformers import AutoTokenizer, MllamaProcessor
    from transformers.models.mllama.image_processing_pil_mllama import MllamaImageProcessorPil

    model = tiny_mllama(SPEC)  # the same seed: the folder's weights
    meta_semantics(model.model.vision_model)
    meta_cross_attention(model)
    model.generation_config.eos_token_id = None  # eight tokens, as num_predict 8 takes them
    model.generation_config.pad_token_id = 0
    size = {"height": SPEC.image_size, "width": SPEC.image_size}
    images = MllamaImageProcessorPil(  # Llama 3.2 Vision's preprocessor_config: CLIP's mean/std
        size=size, max_image_tiles=SPEC.max_num_tiles, image_mean=CLIP_MEAN, image_std=CLIP_STD
    )
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return model, MllamaProcessor(images, tokenizer, chat_template=LLAMA32_VISION_TEMPLATE)


def hf_messages(turns: list[tuple[str, str, bytes | None]]) -> list[dict[str, Any]]:
    """(role, text, image) turns as transformers' chat messages: the image item first."""
    out = []
    for role, text, image in turns:
        items = [{"type": "image"}] if image is not None else []
        out.append({"role": role, "content": [*items, {"type": "text", "text": text}]})
    return out


def hearth_messages(turns: list[tuple[str, str, bytes | None]]) -> list[ChatMessage]:
    return [
        ChatMessage.model_validate(
            {"role": role, "content": text, "images": [b64(image)] if image else None}
        )
        for role, text, image in turns
    ]


def transformers_answer(reference: Any, turns: list[tuple[str, str, bytes | None]]) -> Any:
    """(prompt ids, greedy 8 ids, answer text) of transformers for the conversation."""
    import torch

    model, processor = reference
    text = processor.apply_chat_template(hf_messages(turns), add_generation_prompt=True)
    images = [Image.open(io.BytesIO(i)).convert("RGB") for _, _, i in turns if i is not None]
    inputs = processor(
        images=[images] if images else None, text=text, add_special_tokens=False,
        return_tensors="pt",
    )  # fmt: skip
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    prompt = inputs["input_ids"][0].tolist()
    new = out[0, len(prompt) :].tolist()
    return prompt, new, processor.tokenizer.decode(new, skip_special_tokens=True)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# -- the rendered prompt, without a service -------------------------------------------------


@pytest.fixture(scope="module")
def runner(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Hearth's runner in this process on the folder converted (F32) as `hearth create` does."""
    gguf = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    registry, converters = default_registry(), default_converters()
    convert_checkpoint(folder, gguf, converters=converters, registry=registry, quantize="f32")
    run = Runner(RunnerConfig(str(gguf), num_ctx=512))
    yield run
    run.close()


CHATS = {
    "image": [("user", QUESTION, WIDE)],
    "tall image": [("user", "the", TALL)],
    "follow-up": [
        ("user", QUESTION, WIDE),
        ("assistant", "a the er", None),
        ("user", "and on the athe?", None),
    ],  # fmt: skip
    "text only": [("user", QUESTION, None)],
    "second image": [
        ("user", QUESTION, WIDE),
        ("assistant", "a the er", None),
        ("user", "and on the athe?", TALL),
    ],  # fmt: skip  (rows before the second image attend to the first: a pass of their own)
}


@pytest.mark.parametrize("chat", list(CHATS))
def test_the_rendered_prompt_is_transformers_token_for_token(reference, runner, chat):
    """The service's rendering (`conversation` + `render` with the folder's template, images
    as `[img-N]` before the text) tokenized by the runner equals `MllamaProcessor`'s ids for
    the same messages, the image at transformers' `<|image|>`; and the runner's greedy answer
    is transformers' greedy continuation."""
    turns = CHATS[chat]
    conv, images = conversation(hearth_messages(turns))
    text = render(LLAMA32_VISION_TEMPLATE, conv, "<|begin_of_text|>", "<|end_of_text|>")
    data = [base64.b64decode(i) for i in images]
    ids, _ = runner.engine.prompt(text, data)
    image_id = SPEC.vocab - 1
    ours = [image_id if i < 0 else i for i in ids]
    theirs, greedy, answer = transformers_answer(reference, turns)
    assert ours == theirs
    assert ("Cutting Knowledge Date" in text) == (chat == "text only")  # the system block
    from hearth.runner.protocol import CompletionOptions, CompletionRequest

    request = CompletionRequest(prompt=text, images=images, options=CompletionOptions(**GREEDY))
    got, _, done = collect(runner.completion(request))
    print(f"{chat}: {len(ids)} inputs, transformers {greedy}")
    assert got == answer and done.eval_count == 8


# -- the service ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    env = {"HEARTH_CONTEXT_LENGTH": "512", "HEARTH_API_KEY": API_KEY}
    live = start_server(tmp_path_factory.mktemp("mllama-home"), None, env)
    yield live
    stop_server(live)


@pytest.fixture(scope="module")
def oc(server: LiveServer) -> ollama.Client:
    return ollama.Client(host=server.url, timeout=120, headers=AUTH)


@pytest.fixture(scope="module")
def api(server: LiveServer) -> Any:
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def model(server: LiveServer, folder: Path) -> str:
    """`hearth create tiny-mllama -f FOLDER --quantize f32` (F32: transformers' numbers)."""
    proc = hearth_cli(server, "create", MODEL, "-f", str(folder), "--quantize", "f32")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1] == "success", lines
    converting = [line for line in lines if line.startswith("converting")]
    assert converting and converting[-1].startswith(
        "converting MllamaForConditionalGeneration to F32"
    ), lines
    return MODEL


def test_hearth_create_from_the_folder_makes_a_vision_model(server, oc, api, model):
    listed = {m.model: m for m in oc.list().models}
    assert f"{model}:latest" in listed
    show = oc.show(model)
    assert {"completion", "vision"} <= set(show.capabilities)  # and tools: the template has them
    assert show.details.family == "mllama"
    info = api.post("/api/show", json={"model": model}).json()["model_info"]
    assert info["general.architecture"] == "mllama"
    assert info["mllama.vision.image_size"] == SPEC.image_size
    shown = hearth_cli(server, "show", model)
    assert shown.returncode == 0 and "vision" in shown.stdout.split("Capabilities")[1]


def ask(image: Path | bytes | None, question: str = QUESTION) -> dict[str, Any]:
    return {"role": "user", "content": question, **({"images": [image]} if image else {})}


def test_ollama_client_chat_and_generate_answer_as_transformers(oc, model, folder, reference):
    _, _, wide = transformers_answer(reference, CHATS["image"])
    _, _, tall = transformers_answer(reference, [("user", QUESTION, TALL)])
    assert wide != tall  # the answers depend on the picture
    first = oc.chat(model, messages=[ask(folder.parent / "wide.png")], options=GREEDY)
    assert first.message.content == wide and first.eval_count == 8
    assert oc.chat(model, messages=[ask(TALL)], options=GREEDY).message.content == tall
    gen = oc.generate(model, prompt=QUESTION, images=[folder.parent / "wide.png"], options=GREEDY)
    assert gen.response == wide  # /api/generate renders the same user turn
    streamed = list(oc.chat(model, messages=[ask(WIDE)], options=GREEDY, stream=True))
    assert "".join(p.message.content for p in streamed) == wide


def test_openai_client_with_a_data_url(server, oc, model):
    """The OpenAI route has the service's default repeat penalty: its answer is the ollama
    client's with the same options (whose answer without the penalty is transformers')."""
    native = oc.chat(model, messages=[ask(WIDE)], options={"temperature": 0, "num_predict": 8})
    oa = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, timeout=120)
    content = [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + b64(WIDE)}},
               {"type": "text", "text": QUESTION}]  # fmt: skip
    chat = oa.chat.completions.create(
        model=model, messages=[{"role": "user", "content": content}], temperature=0, max_tokens=8
    )
    assert chat.choices[0].message.content == native.message.content
    assert chat.usage.completion_tokens == 8


def test_a_raw_prompt_places_the_image_with_its_marker(oc, model, reference):
    _, _, wide = transformers_answer(reference, CHATS["image"])
    processor = reference[1]
    text = processor.apply_chat_template(hf_messages(CHATS["image"]), add_generation_prompt=True)
    raw = text.replace("<|image|>", "[img-0]")
    gen = oc.generate(model, prompt=raw, images=[WIDE], raw=True, options=GREEDY)
    assert gen.response == wide


def test_a_follow_up_turn_does_not_encode_the_image_again(oc, api, model, reference):
    turn1 = [ask(WIDE)]
    first = oc.chat(model, messages=turn1, options=GREEDY)
    turns = [*CHATS["image"], ("assistant", first.message.content, None),
             ("user", "and on the athe?", None)]  # fmt: skip
    prompt_ids, _, answer = transformers_answer(reference, turns)
    turn2 = [*turn1, {"role": "assistant", "content": first.message.content},
             {"role": "user", "content": "and on the athe?"}]  # fmt: skip
    follow = oc.chat(model, messages=turn2, options=GREEDY)
    assert follow.message.content == answer
    # Only the inputs after turn 1's prompt are evaluated: the reply, the question, markers.
    size1 = len(transformers_answer(reference, CHATS["image"])[0])
    assert 0 < follow.prompt_eval_count <= len(prompt_ids) - size1
    again = api.post("/api/chat", json={"model": model, "stream": False, "options": GREEDY,
                     "messages": [{**m, "images": [b64(WIDE)]} if "images" in m else m
                                  for m in turn2]}).json()  # fmt: skip
    assert again["message"]["content"] == answer and again["prompt_eval_count"] <= 2


def test_text_only_chat_skips_cross_attention(oc, model, reference):
    _, _, answer = transformers_answer(reference, CHATS["text only"])
    reply = oc.chat(model, messages=[ask(None)], options=GREEDY)
    assert reply.message.content == answer


def test_a_bad_image_is_refused_and_the_service_goes_on(oc, server, model, reference):
    oc.chat(model, messages=[ask(WIDE)], options=GREEDY)  # loaded
    pids = server.runner_pids()
    with pytest.raises(ollama.ResponseError) as err:
        oc.chat(model, messages=[ask(b"these bytes are no picture at all")], options=GREEDY)
    assert err.value.status_code == 400
    assert err.value.error == "image 0 is not an image Hearth can read"
    with pytest.raises(ollama.ResponseError) as err:
        oc.chat(model, messages=[ask(WIDE[:300])], options=GREEDY)  # cut off: runner decodes
    assert err.value.status_code == 400 and "image 0" in err.value.error
    _, _, wide = transformers_answer(reference, CHATS["image"])
    assert oc.chat(model, messages=[ask(WIDE)], options=GREEDY).message.content == wide
    assert server.runner_pids() == pids


def test_the_default_f16_conversion_answers_too(server, oc, folder):
    """Without --quantize, as a new user types it: F16 matrices (llama.cpp's default)."""
    proc = hearth_cli(server, "create", "tiny-mllama-f16", "-f", str(folder))
    assert proc.returncode == 0, proc.stderr
    assert any(line.startswith("converting MllamaForConditionalGeneration to F16")
               for line in proc.stderr.splitlines())  # fmt: skip
    assert "vision" in oc.show("tiny-mllama-f16").capabilities
    reply = oc.chat("tiny-mllama-f16", messages=[ask(WIDE)], options=GREEDY)
    assert reply.eval_count == 8 and reply.done_reason == "length"
    assert oc.delete("tiny-mllama-f16").status == "success"


def test_an_image_with_a_system_message_is_refused_with_the_templates_sentence(oc, model):
    """Meta's template refuses the pair (transformers raises the same); a 400, not a crash."""
    messages = [{"role": "system", "content": "be brief"}, ask(WIDE)]
    with pytest.raises(ollama.ResponseError) as err:
        oc.chat(model, messages=messages, options=GREEDY)
    assert err.value.status_code == 400
    assert "Prompting with images is incompatible with system messages." in err.value.error
    assert oc.chat(model, messages=messages[:1] + [ask(None)], options=GREEDY).eval_count == 8
