"""One rule lays OpenAI's and Anthropic's sampling fields over Hearth's `options` on every /v1
route that has them (request_types.layered_options): the API's own field wins, then the same
option in `options`, then the API's default (OpenAI: temperature 1, top_p 1; Anthropic:
temperature 1), then the model's parameters. Requests are sent with the official clients; the
options the (fake) runner receives are checked."""

from __future__ import annotations

import anthropic
import openai
import pytest

HI = [{"role": "user", "content": "hi"}]
MODEL = "params-tiny"  # tiny with parameters top_k 7, top_p 0.6


@pytest.fixture
def service(fake_service):
    out = fake_service.client.post("/api/create", json={
        "model": MODEL, "from": "tiny", "parameters": {"top_k": 7, "top_p": 0.6},
        "stream": False})  # fmt: skip
    assert out.json()["status"] == "success"
    return fake_service


def _chat(service, **body):
    oa = openai.OpenAI(base_url="http://127.0.0.1/v1", api_key="k", http_client=service.client)
    oa.chat.completions.create(model=MODEL, messages=HI, max_tokens=3, **body)


def _responses(service, **body):
    oa = openai.OpenAI(base_url="http://127.0.0.1/v1", api_key="k", http_client=service.client)
    r = oa.responses.create(model=MODEL, input="hi", max_output_tokens=16, **body)
    sent = _sent(service)  # the response echoes what was sampled with
    assert (r.temperature, r.top_p) == (sent.temperature, sent.top_p)


def _messages(service, temperature=None, top_p=None, extra_body=None):
    ac = anthropic.Anthropic(
        base_url="http://127.0.0.1", api_key="k", http_client=service.client, max_retries=0
    )
    # The anthropic 2.x client sends its sampling fields in extra_body (README).
    given = {"temperature": temperature, "top_p": top_p}
    extra = {**{k: v for k, v in given.items() if v is not None}, **(extra_body or {})}
    ac.messages.create(model=MODEL, max_tokens=3, messages=HI, extra_body=extra)


ROUTES = {"chat/completions": _chat, "responses": _responses, "messages": _messages}


def _sent(service):
    return service.launcher.started[-1].requests[-1].options


@pytest.mark.parametrize("route", ROUTES)
def test_the_api_field_wins_over_options(service, route):
    options = {"temperature": 0.2, "top_p": 0.3}
    ROUTES[route](service, temperature=0.7, top_p=0.8, extra_body={"options": options})
    assert (_sent(service).temperature, _sent(service).top_p) == (0.7, 0.8)


@pytest.mark.parametrize("route", ROUTES)
def test_options_count_when_the_api_field_is_not_sent(service, route):
    options = {"temperature": 0.2, "top_p": 0.3, "top_k": 5}
    ROUTES[route](service, extra_body={"options": options})
    sent = _sent(service)
    assert (sent.temperature, sent.top_p, sent.top_k) == (0.2, 0.3, 5)


@pytest.mark.parametrize("route", ROUTES)
def test_one_field_sent_the_other_from_options(service, route):
    ROUTES[route](service, temperature=0.4, extra_body={"options": {"top_p": 0.3}})
    assert (_sent(service).temperature, _sent(service).top_p) == (0.4, 0.3)


@pytest.mark.parametrize(
    ("route", "top_p"),
    [("chat/completions", 1.0), ("responses", 1.0), ("messages", 0.6)],
)
def test_then_the_api_default_then_the_model_parameters(service, route, top_p):
    """Neither sets them: the API's temperature 1 (both APIs'), OpenAI's top_p 1 (Anthropic
    has none, so the model's 0.6), and the model's top_k 7 (no API defaults it)."""
    ROUTES[route](service)
    sent = _sent(service)
    assert (sent.temperature, sent.top_p, sent.top_k) == (1.0, top_p, 7)
