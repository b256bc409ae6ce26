"""The speculative-decoding options through the service: `speculate` reaches the runner's
completion options, `draft_model` (a model's name) starts the runner with that model's file
beside the model, and a draft model that is not installed is a 400 that names it; the real
service gives the same reply with speculation on and off and reports the figures."""

from __future__ import annotations

import httpx
import pytest

from .fakes import add_model


def _generate(fake_service, **options):
    body = {"model": "tiny", "prompt": "hi", "stream": False, "options": options}
    return fake_service.client.post("/api/generate", json=body)


def test_speculate_reaches_the_runner(fake_service):
    assert _generate(fake_service, speculate=False).status_code == 200
    assert fake_service.launcher.started[-1].requests[-1].options.speculate is False
    assert _generate(fake_service).status_code == 200
    assert fake_service.launcher.started[-1].requests[-1].options.speculate is None


def test_a_draft_model_starts_the_runner_with_its_file(fake_service, tiny_llama_path):
    add_model(fake_service.store, "drafter", tiny_llama_path)
    assert _generate(fake_service).status_code == 200
    assert fake_service.launcher.started[-1].options.draft_model is None
    assert _generate(fake_service, draft_model="drafter").status_code == 200
    assert len(fake_service.launcher.started) == 2  # the runner without it does not serve
    runner = fake_service.launcher.started[-1]
    record = fake_service.store.resolve("drafter")
    layer = record.layer("model")
    assert runner.options.draft_model == str(fake_service.store.blob_path(layer.digest))
    assert "--draft-model" in runner.options.args()
    assert _generate(fake_service).status_code == 200  # with a draft model serves any request
    assert len(fake_service.launcher.started) == 2


def test_a_draft_model_not_installed_is_refused_by_name(fake_service):
    out = _generate(fake_service, draft_model="nowhere")
    assert out.status_code == 400
    assert "the draft model nowhere is not installed" in out.json()["error"]


@pytest.mark.slow
def test_the_real_service_speculates_exactly_and_says_so(live_server):
    """Through the service and a real runner of the default model: the same reply with
    speculate false and true, the drafted and accepted tokens in the final record, and the
    runner's speculation in /api/ps."""
    text = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
    body = {
        "model": "gemma3:270m",
        "prompt": f"Repeat this code exactly:\n\n{text}",
        "stream": False,
        "options": {"temperature": 0.5, "seed": 11, "num_predict": 40},
    }
    replies = {}
    with httpx.Client(base_url=live_server.url, timeout=600) as client:
        for speculate in (False, True):
            options = {**body["options"], "speculate": speculate}
            out = client.post("/api/generate", json={**body, "options": options})
            assert out.status_code == 200, out.text
            replies[speculate] = out.json()
        ps = client.get("/api/ps").json()
    assert replies[True]["response"] == replies[False]["response"]
    assert replies[True]["context"] == replies[False]["context"]
    assert replies[False]["hearth"]["drafted"] == 0
    assert replies[True]["hearth"]["accepted"] > 0
    loaded = ps["models"][0]["hearth"]["speculation"]
    assert loaded == {"enabled": True, "drafts": "prompt lookup"}
