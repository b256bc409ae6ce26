"""The speculative-decoding options through the service: `speculate` reaches the runner's
completion options, `draft_model` (a model's name) starts the runner with that model's file
beside the model, and a draft model that is not installed is a 400 that names it."""

from __future__ import annotations

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
