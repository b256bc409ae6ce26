"""The schema fuzz run of test_fuzz.py against a live `hearth serve`: a real runner on the tiny
llama, the real device probe, online pulls. No generated request may get a 5xx, except a 502
or 503 that names an upstream it could not reach, and none may take longer than `BOUND_S`.

Pulls must not reach the internet: every outside address (the Ollama registry, any fuzzed
registry host: the service's proxy settings; Hugging Face: `HF_ENDPOINT`) leads to a loopback
port bound but not listening, so each pull fails at once with the 502 naming what it could not
reach. The service's own runner, also on loopback, is reached directly (`NO_PROXY`).

Replies are kept short, so the time bound measures the service and not how long the tiny model
takes to write 10 x num_ctx tokens (what an unbounded request may ask for): the model's
parameters cap replies at `REPLY_TOKENS` (as the built-in model's parameters cap them at 384), and a
generated `num_predict` or `max_tokens` past it is lowered to it. test_fuzz.py fuzzes those.
"""

from __future__ import annotations

import collections
import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import schemathesis

from hearth.server.store.model_store import ModelStore

from .fakes import LiveServer, add_model, start_server, stop_server
from .fuzzing import fuzz

pytestmark = pytest.mark.slow  # 1-3 minutes: ~400 generated requests on a real runner

EXAMPLES = 25
MODEL = "tiny:latest"
REPLY_TOKENS = 16
BOUND_S = 60.0  # the longest any one request may take (a busy 2-core machine, model loads)
UNREACHABLE = re.compile(r"could not reach|cannot reach|connection refused", re.IGNORECASE)
LENGTHS = ("num_predict", "max_tokens", "max_completion_tokens")


def _short_replies(case: schemathesis.Case) -> None:
    """A generated reply length past REPLY_TOKENS (or unbounded: negative) lowered to it."""
    body = case.body
    if isinstance(body, dict):
        options = body.get("options")
        for fields in (body, options if isinstance(options, dict) else {}):
            for key in LENGTHS:
                value = fields.get(key)
                if type(value) in (int, float) and not 0 <= value <= REPLY_TOKENS:
                    fields[key] = REPLY_TOKENS


def _add_tiny(store: ModelStore, gguf: Path) -> None:
    add_model(store, MODEL, gguf, params=json.dumps({"num_predict": REPLY_TOKENS}).encode())


@pytest.fixture(scope="module")
def closed_port() -> Iterator[int]:
    """A loopback port that refuses connections at once (bound, so nothing else takes it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory, tiny_llama_path: Path, closed_port: int
) -> Iterator[tuple[LiveServer, ModelStore]]:
    home = tmp_path_factory.mktemp("fuzz-live-home")
    store = ModelStore(home / "models")
    _add_tiny(store, tiny_llama_path)
    # As after `hearth rm gemma3:270m`: first start registers no built-in model, so every
    # model the fuzz reaches is the tiny one.
    (store.root / ".default-registered").write_text("removed")
    nowhere = f"http://127.0.0.1:{closed_port}"
    env = {
        "HEARTH_OFFLINE": "",
        "HEARTH_CONTEXT_LENGTH": "512",
        "HF_ENDPOINT": nowhere,
        **{name: nowhere for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")},
        **{name.lower(): nowhere for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")},
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    server = start_server(home, None, env)
    try:
        yield server, store
    finally:
        stop_server(server)


def test_no_server_errors_and_no_hangs_on_a_live_service(live, tiny_llama_path):
    server, store = live
    session = requests.Session()
    session.trust_env = False  # this process's proxy settings are not the service's
    schema = schemathesis.openapi.from_dict(session.get(server.url + "/openapi.json").json())
    statuses: collections.Counter[int | str] = collections.Counter()
    failures: list[str] = []
    started = time.monotonic()

    def check(case: schemathesis.Case) -> None:
        try:
            store.resolve(MODEL)
        except LookupError:  # a fuzzed DELETE removed it
            _add_tiny(store, tiny_llama_path)
        _short_replies(case)
        request = f"{case.method} {case.formatted_path} {case.body!r:.300}"
        start = time.monotonic()
        try:
            response = case.call(base_url=server.url, session=session, timeout=BOUND_S)
        except requests.RequestException as e:
            statuses[type(e).__name__] += 1
            failures.append(f"{request} -> no answer within {BOUND_S:.0f}s: {e}")
            return
        took = time.monotonic() - start
        status = response.status_code
        statuses[status] += 1
        gateway = status in (502, 503) and UNREACHABLE.search(response.text)
        if (status >= 500 and not gateway) or took > BOUND_S:
            failures.append(f"{request} -> {status} in {took:.1f}s: {response.text[:300]}")

    operations = fuzz(schema, EXAMPLES, MODEL, check)
    total = sum(statuses.values())
    summary = (
        f"{total} requests over {operations} operations in {time.monotonic() - started:.0f}s; "
        f"statuses: {dict(sorted(statuses.items(), key=str))}"
    )
    print(summary)
    assert operations >= 20, summary
    assert server.proc.poll() is None, f"the service stopped; {summary}"
    assert not failures, f"{len(failures)} failures; {summary}\n" + "\n".join(failures[:10])
