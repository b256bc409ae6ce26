"""A live `hearth serve` (free port, default model, real runner) driven by the real `ollama`
and `openai` Python clients, as third-party tools would use it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import httpx
import ollama
import openai
import pytest

pytestmark = pytest.mark.slow

MODEL = "gemma3:270m"
FAST = {"num_predict": 8, "temperature": 0, "num_ctx": 1024}


@pytest.fixture(scope="module")
def oc(live_server):
    return ollama.Client(host=live_server.url, timeout=120)


@pytest.fixture(scope="module")
def oa(live_server):
    return openai.OpenAI(base_url=live_server.url + "/v1", api_key="unused", timeout=120)


def test_ollama_client_list_show_chat_generate_embed_ps(live_server, oc):
    names = [m.model for m in oc.list().models]
    assert MODEL in names
    show = oc.show(MODEL)
    assert "completion" in show.capabilities
    assert show.details.family == "gemma3" and show.details.quantization_level == "Q4_K_M"
    assert show.modelinfo["gemma3.context_length"] == 32768
    assert "<start_of_turn>" in show.template  # the plugin's default template
    extras = httpx.post(live_server.url + "/api/show", json={"model": MODEL}).json()["hearth"]
    assert extras["estimated_memory"] > 200_000_000  # (the ollama client drops extra keys)

    reply = oc.chat(MODEL, messages=[{"role": "user", "content": "Hi!"}], options=FAST)
    assert reply.done and reply.message.role == "assistant" and reply.message.content
    assert reply.eval_count == 8 and reply.done_reason == "length"
    assert reply.prompt_eval_count > 0 and reply.eval_duration > 0 and reply.total_duration > 0

    parts = list(oc.chat(MODEL, messages=[{"role": "user", "content": "Hi!"}], options=FAST,
                         stream=True))  # fmt: skip
    assert parts[-1].done and "".join(p.message.content for p in parts)
    assert parts[-1].prompt_eval_count < reply.prompt_eval_count  # the prompt came from cache

    gen = oc.generate(MODEL, prompt="The capital of France is", raw=True, logprobs=True,
                      top_logprobs=3, options=FAST)  # fmt: skip
    assert gen.response and len(gen.logprobs) == 8
    first = gen.logprobs[0]
    assert first.logprob <= 0 and len(first.top_logprobs) == 3
    assert first.top_logprobs[0].logprob >= first.top_logprobs[1].logprob

    emb = oc.embed(MODEL, input=["the sky", "the sea"], options={"num_ctx": 1024})
    assert len(emb.embeddings) == 2 and len(emb.embeddings[0]) == 640
    assert abs(sum(x * x for x in emb.embeddings[0]) - 1) < 1e-3

    loaded = oc.ps().models
    assert [m.model for m in loaded] == [MODEL]
    assert loaded[0].context_length == 1024 and loaded[0].size > 200_000_000
    assert loaded[0].expires_at is not None

    # What the runner's load-time probes found is reported, loaded or in /api/show.
    ps = httpx.get(live_server.url + "/api/ps").json()["models"][0]["hearth"]["batch_invariance"]
    assert isinstance(ps["holds"], bool) and ps["summary"]
    assert {"Q4_K (CPU)", "Q5_0 (CPU)", "Q6_K (CPU)", "Q8_0 (CPU)"} <= set(ps["products"])
    assert ps["kv_padding"] in (32, 64, 128, 256)
    show = httpx.post(live_server.url + "/api/show", json={"model": MODEL}).json()["hearth"]
    assert show["batch_invariance"] == ps


def test_ollama_client_create_from_blob_copy_delete(live_server, oc, tiny_llama_path):
    digest = oc.create_blob(tiny_llama_path)
    statuses = [p.status for p in oc.create("tiny-up", files={"tiny.gguf": digest}, stream=True,
                                            parameters={"temperature": 0})]  # fmt: skip
    assert statuses[-1] == "success"
    assert oc.show("tiny-up").details.family == "llama"
    out = oc.generate("tiny-up", prompt="hello", options={"num_predict": 4})  # a second model
    assert out.eval_count == 4
    long = {"model": "tiny-up", "prompt": "word " * 3000, "stream": False,
            "options": {"num_predict": 2}}  # fmt: skip
    final = httpx.post(live_server.url + "/api/generate", json=long, timeout=120).json()
    assert final["hearth"]["truncated"] and final["prompt_eval_count"] <= 1024  # num_ctx 1024
    assert oc.copy("tiny-up", "tiny-copy:v1").status == "success"
    names = {m.model for m in oc.list().models}
    assert {"tiny-up:latest", "tiny-copy:v1"} <= names
    assert oc.delete("tiny-copy:v1").status == "success"
    assert oc.delete("tiny-up").status == "success"
    with pytest.raises(ollama.ResponseError) as err:
        oc.show("tiny-up")
    assert err.value.status_code == 404 and "not found" in err.value.error


def test_openai_client(oa):
    assert MODEL in [m.id for m in oa.models.list().data]
    assert oa.models.retrieve(MODEL).owned_by == "library"
    extra = {"options": {"num_ctx": 1024}}
    chat = oa.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello"}], max_tokens=6,
        temperature=0, logprobs=True, top_logprobs=2, extra_body=extra,
    )  # fmt: skip
    choice = chat.choices[0]
    assert choice.message.content and choice.finish_reason in ("length", "stop")
    assert len(choice.logprobs.content) == chat.usage.completion_tokens
    assert len(choice.logprobs.content[0].top_logprobs) == 2
    stream = oa.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello"}], max_tokens=6,
        temperature=0, stream=True, stream_options={"include_usage": True}, extra_body=extra,
    )  # fmt: skip
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert chunks[-1].usage.completion_tokens == 6
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens > 0

    comp = oa.completions.create(model=MODEL, prompt="One, two, three,", max_tokens=5,
                                 temperature=0, logprobs=2, extra_body=extra)  # fmt: skip
    assert comp.choices[0].text and len(comp.choices[0].logprobs.tokens) == 5

    emb = oa.embeddings.create(model=MODEL, input="hello")
    assert len(emb.data[0].embedding) == 640 and emb.usage.prompt_tokens > 0

    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
              "sunny": {"type": "boolean"}}, "required": ["city", "sunny"]}  # fmt: skip
    structured = oa.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "The weather in Paris as JSON."}],
        max_tokens=60, temperature=0, extra_body=extra,
        response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": schema}},
    )  # fmt: skip
    data = json.loads(structured.choices[0].message.content)
    assert isinstance(data["city"], str) and isinstance(data["sunny"], bool)


def test_the_prompt_cache_does_not_change_a_greedy_reply(oc):
    prompt = "<start_of_turn>user\nSay hello<end_of_turn><start_of_turn>model"
    options = {"num_predict": 6, "temperature": 0, "num_ctx": 1024}
    replies = [oc.generate(MODEL, prompt=prompt, raw=True, options=options) for _ in range(2)]
    assert replies[1].prompt_eval_count < replies[0].prompt_eval_count  # served from cache
    assert replies[1].response == replies[0].response


def test_sigkill_of_the_runner_mid_stream(live_server, oc):
    options = {"num_predict": 400, "num_ctx": 1024, "temperature": 0}
    stream = oc.generate(MODEL, prompt="1, 2, 3, 4, 5, 6,", raw=True, stream=True, options=options)
    first = next(stream)
    assert first.response
    pid = httpx.get(live_server.url + "/api/ps").json()["models"][0]["hearth"]["pid"]
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(ollama.ResponseError) as err:
        for _ in stream:
            pass
    assert "runner" in err.value.error
    assert httpx.get(live_server.url + "/").text == "Hearth is running"  # the service lives
    again = oc.generate(MODEL, prompt="Hello", options=FAST)  # and reloads the model
    assert again.eval_count == 8
    assert httpx.get(live_server.url + "/api/ps").json()["models"][0]["hearth"]["pid"] != pid


def test_keep_alive_zero_unloads(oc):
    oc.generate(MODEL, prompt="Hi", options=FAST)
    assert oc.ps().models
    out = oc.generate(MODEL, keep_alive=0)
    assert out.done_reason == "unload"
    deadline = time.time() + 10
    while oc.ps().models and time.time() < deadline:
        time.sleep(0.1)
    assert oc.ps().models == []


def test_as_a_new_user_would(live_server, tmp_path):
    """A user's own script: the ollama module's functions, pointed at Hearth by OLLAMA_HOST."""
    script = tmp_path / "hello.py"
    script.write_text(
        textwrap.dedent("""
        import ollama
        print([m.model for m in ollama.list().models])
        question = {"role": "user", "content": "Why is the sky blue?"}
        r = ollama.chat(model="gemma3:270m", messages=[question],
                        options={"num_predict": 12, "num_ctx": 1024})
        print("REPLY", r.message.content.replace("\\n", " "))
        for part in ollama.generate(model="gemma3:270m", prompt="Once upon a time", stream=True,
                                    options={"num_predict": 6, "num_ctx": 1024}):
            print(part.response, end="", flush=True)
        print()
    """)
    )
    env = dict(os.environ, OLLAMA_HOST=live_server.url)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "gemma3:270m" in proc.stdout and "REPLY " in proc.stdout
