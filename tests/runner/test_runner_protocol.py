"""The runner's side of the protocol over real HTTP: a runner (the tiny llama) behind its own
server answers a request with a field it does not know, or an option of the wrong type, with
400 and a sentence naming it; what it streams and reports reads back as the protocol's
records."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from hearth.engine.sampling import Sampler
from hearth.runner.core import Runner, RunnerConfig
from hearth.runner.http import RunnerState, make_server
from hearth.runner.protocol import (
    CompletionChunk,
    CompletionDone,
    CompletionOptions,
    CompletionRequest,
    ProtocolError,
    RunnerInfo,
    TokenLogprob,
    completion_line,
    from_wire,
    to_wire,
)
from hearth.runner.sequence import settings_from_request

TOKEN = "test-token"


@pytest.fixture(scope="module")
def client(tiny_llama_path) -> Iterator[httpx.Client]:
    runner = Runner(RunnerConfig(str(tiny_llama_path), num_ctx=256, parallel=2, num_batch=32))
    state = RunnerState(status="ready", progress=1.0, runner=runner)
    server = make_server(state, TOKEN)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c
    server.shutdown()
    runner.close()


def completion(client: httpx.Client, body: dict[str, Any]) -> httpx.Response:
    return client.post("/completion", json=body, timeout=60)


GREEDY = {"temperature": 0, "repeat_penalty": 1.0, "num_predict": 4}


def test_an_unknown_field_is_refused_with_400_naming_it(client):
    resp = completion(client, {"tokens": [1, 5, 6], "options": GREEDY, "cache_promt": True})
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert "unknown field 'cache_promt'" in error and "CompletionRequest" in error


def test_an_unknown_option_is_refused_with_400_naming_it(client):
    resp = completion(client, {"tokens": [1, 5, 6], "options": {**GREEDY, "temprature": 0.5}})
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert "unknown field 'options.temprature'" in error
    assert "temperature" in error  # the fields it has are listed


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"temperature": "hot"}, "options.temperature must be a number, not 'hot'"),
        ({"top_k": 4.5}, "options.top_k must be an integer"),
        ({"seed": True}, "options.seed must be an integer"),
        ({"stop": "x"}, "options.stop must be a list of strings"),
        ({"stop": ["x", 3]}, "options.stop[1] must be a string"),
    ],
)
def test_an_option_of_the_wrong_type_is_refused_with_400_saying_so(client, options, said):
    resp = completion(client, {"tokens": [1, 5, 6], "options": options})
    assert resp.status_code == 400
    assert said in resp.json()["error"]


def test_a_completion_streams_chunks_then_done_as_the_protocol_records(client):
    body = {"tokens": [1, 5, 6, 7], "options": GREEDY, "logprobs": True, "top_logprobs": 2}
    resp = completion(client, body)
    assert resp.status_code == 200
    lines = [completion_line(json.loads(line)) for line in resp.text.splitlines() if line]
    *chunks, done = lines
    assert isinstance(done, CompletionDone) and done.eval_count == 4
    assert chunks and all(isinstance(c, CompletionChunk) for c in chunks)
    logprobs = [lp for c in chunks for lp in c.logprobs or []]
    assert len(logprobs) == 4 and all(isinstance(lp, TokenLogprob) for lp in logprobs)
    assert all(len(lp.top_logprobs or []) == 2 for lp in logprobs)
    # Without logprobs asked for, the chunk has none on the wire (Ollama's shape).
    plain = completion(client, {"tokens": [1, 5, 6, 7], "options": GREEDY})
    first = json.loads(plain.text.splitlines()[0])
    assert set(first) == {"content"}


def test_info_reads_back_as_runner_info(client):
    info = from_wire(RunnerInfo, client.get("/info").json())
    assert info.num_ctx == 256 and info.parallel == 2 and info.architecture == "llama"
    assert info.memory.total == info.memory.weights + info.memory.cache + info.memory.graph
    assert set(info.devices) == {"CPU"}


def test_options_round_trip_through_the_wire_and_reach_the_sampler():
    options = CompletionOptions(
        temperature=0.3,
        top_k=7,
        top_p=0.5,
        min_p=0.05,
        seed=11,
        repeat_penalty=1.2,
        repeat_last_n=32,
        presence_penalty=0.1,
        frequency_penalty=0.2,
        num_predict=9,
        num_keep=2,
        stop=["\n", "END"],
    )
    request = CompletionRequest(
        prompt="hi", options=options, logprobs=True, top_logprobs=3, show_tokens=["[TOOL_CALLS]"]
    )
    wire = json.loads(json.dumps(to_wire(request)))
    assert from_wire(CompletionRequest, wire) == request
    settings = settings_from_request(from_wire(CompletionRequest, wire))
    sampling = settings.sampling
    assert (sampling.temperature, sampling.top_k, sampling.top_p, sampling.min_p) == (
        0.3,
        7,
        0.5,
        0.05,
    )
    assert (sampling.seed, sampling.repeat_penalty, sampling.repeat_last_n) == (11, 1.2, 32)
    assert (sampling.presence_penalty, sampling.frequency_penalty) == (0.1, 0.2)
    assert (settings.num_predict, settings.num_keep, settings.stop) == (9, 2, ("\n", "END"))
    assert settings.top_logprobs == 3
    assert settings.show_tokens == ("[TOOL_CALLS]",)  # the markers the service parses
    # Options left out travel as nothing and take the runner's defaults.
    bare = to_wire(CompletionRequest(tokens=[1]))
    assert bare["options"] == {"stop": []}
    defaults = settings_from_request(from_wire(CompletionRequest, bare))
    assert (defaults.num_predict, defaults.num_keep) == (-1, 4)
    assert Sampler(defaults.sampling).temperature == 0.8  # the declared default, in the sampler


def test_a_missing_required_field_is_named():
    with pytest.raises(ProtocolError, match="RunnerInfo lacks .*memory"):
        from_wire(RunnerInfo, {"architecture": "llama", "engine": "hearth"})
