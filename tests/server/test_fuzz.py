"""schemathesis against the service's own OpenAPI spec: no generated request may get a 5xx
or hang. The service runs in-process on fake runners (so a fuzzed `num_predict` costs nothing)
with the example model name registered, so valid-looking requests reach the generation code.
test_fuzz_live.py runs the same fuzz against a real `hearth serve` with a real runner.
"""

from __future__ import annotations

import time

import pytest
import schemathesis

from hearth.server.app import create_app
from hearth.server.config import ServerConfig

from .fakes import FakeLauncher, add_model
from .fuzzing import fuzz

pytestmark = pytest.mark.slow  # ~20 s: hundreds of generated requests

EXAMPLES = 25
MODEL = "gemma3:270m"


@pytest.fixture(scope="module")
def app(tmp_path_factory, tiny_llama_path):
    # Offline, as every test's service: no fuzzed pull or search reaches the internet (online,
    # an unreachable registry is a 502, the gateway error it is, which this test counts).
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HEARTH_OFFLINE", "1")
        yield _make_app(tmp_path_factory)


def _make_app(tmp_path_factory):
    app = create_app(
        ServerConfig(),
        models_dir=tmp_path_factory.mktemp("fuzz") / "models",
        launcher=FakeLauncher(),
        register_default=False,
        available_memory=lambda: None,
    )
    return app


def test_no_server_errors_and_no_hangs(app, tiny_llama_path):
    store = app.state.service.store
    schema = schemathesis.openapi.from_dict(app.openapi())
    failures: list[str] = []

    def check(case: schemathesis.Case) -> None:
        try:
            store.resolve(MODEL)
        except LookupError:  # a fuzzed DELETE removed it
            add_model(store, MODEL, tiny_llama_path)
        start = time.monotonic()
        response = case.call(app=app, base_url="http://127.0.0.1")
        took = time.monotonic() - start
        if response.status_code >= 500 or took > 10:
            failures.append(
                f"{case.method} {case.formatted_path} {case.body!r:.300} -> "
                f"{response.status_code} in {took:.1f}s: {response.text[:300]}"
            )

    assert fuzz(schema, EXAMPLES, MODEL, check) >= 20
    assert not failures, "\n".join(failures[:10])
