"""What the live API tests share: the default model's name and a model built from it whose
template offers tools, renders the model's calls as JSON ({"name", "arguments"}) and the
results as user turns, so a tool round trip can be driven through any endpoint.

`create_tools_model(url, name)` registers it on a live `hearth serve` through /api/create."""

from __future__ import annotations

import httpx

MODEL = "gemma3:270m"
# Gemma's turns, with tools offered, the model's calls as JSON and the results as user turns
TOOLS_TEMPLATE = (
    "{% for m in messages %}<start_of_turn>"
    "{{ 'model' if m.role == 'assistant' else 'user' }}\n"
    "{% if loop.first and tools %}You may call these functions, answering with JSON "
    '{"name": ..., "arguments": {...}}: {{ tools | tojson }}\n{% endif %}'
    "{% if m.role == 'tool' %}Function result: {% endif %}{{ m.content }}"
    "{% for c in m.tool_calls or [] %}"
    '{{ {"name": c.function.name, "arguments": c.function.arguments} | tojson }}'
    "{% endfor %}<end_of_turn>\n{% endfor %}<start_of_turn>model\n"
)


def create_tools_model(url: str, name: str) -> None:
    """Register `name`: the default model with TOOLS_TEMPLATE."""
    body = {"model": name, "from": MODEL, "template": TOOLS_TEMPLATE, "stream": False}
    created = httpx.post(url + "/api/create", json=body, timeout=120).json()
    assert created["status"] == "success", created
