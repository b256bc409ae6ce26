"""The service's side of the runner protocol: one function builds a completion's options from
the request and the model's parameters, and a runner line the protocol does not know fails the
request with a sentence naming it (nothing is silently dropped)."""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest

from hearth.engine.sampling import SamplingOptions
from hearth.runner.protocol import (
    CompletionChunk,
    CompletionDone,
    CompletionOptions,
    CompletionRequest,
    from_wire,
    to_wire,
)
from hearth.server.request_types import RUNTIME_OPTIONS, Options
from hearth.server.scheduling.runner_process import RunnerError, RunnerProcess
from hearth.server.service import completion_options


def merged(params: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """As Service.settings merges them: the Modelfile's parameters, the request's over them."""
    given = [Options.model_validate(d).model_dump(exclude_none=True) for d in (params, request)]
    return {**given[0], **given[1]}


def test_the_options_record_takes_the_request_over_the_model_and_leaves_runtime_out():
    opts = completion_options(
        merged(
            {"temperature": 0.1, "top_k": 5, "stop": ["<end>"], "num_ctx": 2048},
            {"temperature": 0.7, "seed": 3, "num_batch": 64, "typical_p": 1},
        ),
        num_ctx=512,
    )
    assert opts == CompletionOptions(
        temperature=0.7, top_k=5, seed=3, stop=["<end>"], num_predict=10 * 512
    )
    assert from_wire(CompletionOptions, json.loads(json.dumps(to_wire(opts)))) == opts


def test_speculate_comes_from_the_model_or_the_request(tmp_path):
    from hearth.cli.modelfile import parse_modelfile

    (tmp_path / "m.gguf").write_bytes(b"")
    (tmp_path / "Modelfile").write_text("FROM ./m.gguf\nPARAMETER speculate false\n")
    params = parse_modelfile(tmp_path / "Modelfile")["parameters"]
    assert params == {"speculate": False}
    assert completion_options(merged(params, {}), 100).speculate is False
    assert completion_options(merged({"speculate": False}, {"speculate": True}), 100).speculate
    assert completion_options(merged({}, {}), 100).speculate is None  # the runner's default


def test_num_predict_keeps_a_limit_and_caps_no_limit():
    assert completion_options(merged({}, {"num_predict": 7}), 100).num_predict == 7
    assert completion_options(merged({}, {"num_predict": -1}), 100).num_predict == 1000
    assert completion_options(merged({}, {}), 100).num_predict == 1000


def test_the_option_names_agree_across_api_record_and_sampler():
    api = set(Options.model_fields)
    assert CompletionOptions.names() <= api  # every option the runner takes can be set
    assert CompletionOptions.names().isdisjoint(RUNTIME_OPTIONS)
    assert api - CompletionOptions.names() - RUNTIME_OPTIONS == {"typical_p"}  # refused
    assert {f.name for f in fields(SamplingOptions)} <= CompletionOptions.names()


# -- reading a runner's stream ---------------------------------------------------------------


def serve_lines(lines: list[str], status: int = 200) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(status)
            self.end_headers()
            self.wfile.write("".join(line + "\n" for line in lines).encode())

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


async def read(lines: list[str], status: int = 200) -> list[Any]:
    server = serve_lines(lines, status)
    proc = SimpleNamespace(returncode=None, pid=1)
    runner = RunnerProcess(proc, server.server_address[1], "token")  # type: ignore[arg-type]
    try:
        return [item async for item in runner.completion(CompletionRequest(tokens=[1]))]
    finally:
        await runner._http.aclose()
        server.shutdown()


DONE = json.dumps(to_wire(CompletionDone(eval_count=1)))


def test_a_runner_stream_reads_as_records():
    chunk = {"content": "hi", "logprobs": [{"token": "hi", "logprob": -0.5, "bytes": [104, 105]}]}
    items = asyncio.run(read([json.dumps(chunk), DONE]))
    assert isinstance(items[0], CompletionChunk) and items[0].logprobs[0].logprob == -0.5
    assert items[1] == CompletionDone(eval_count=1)


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ('{"content": "hi", "speed": 3}', "unknown field 'speed' in CompletionChunk"),
        ('{"done": true, "eval_cnt": 1}', "unknown field 'eval_cnt' in CompletionDone"),
        ('{"content": 5}', "content must be a string"),
        (
            '{"content": "a", "logprobs": [{"token": "a", "logprob": 0, "bytes": [], "p": 1}]}',
            "unknown field 'logprobs[0].p'",
        ),
        ("not json", "breaks the runner protocol"),
    ],
)
def test_a_line_the_protocol_does_not_know_fails_the_request_naming_it(line, said):
    with pytest.raises(RunnerError, match="breaks the runner protocol") as caught:
        asyncio.run(read([line, DONE]))
    assert said in str(caught.value)


def test_an_error_line_and_a_refusal_are_the_runners_sentences():
    with pytest.raises(RunnerError, match="^out of luck$"):
        asyncio.run(read(['{"content": "a"}', '{"error": "out of luck"}']))
    with pytest.raises(RunnerError, match="^options.top_k must be an integer$"):
        asyncio.run(read(['{"error": "options.top_k must be an integer"}'], status=400))
