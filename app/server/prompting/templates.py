"""Chat templates: a GGUF's `tokenizer.chat_template` rendered in a sandboxed Jinja2.

Templates come from model files, which are untrusted, so they run in Jinja's immutable
sandbox: no attribute access to Python internals, no mutation of the objects passed in. The
variables are the ones Hugging Face templates expect: `messages`, `add_generation_prompt`,
`bos_token`, `eos_token`, `tools`, plus `raise_exception()` and `strftime_now()`.
"""

from __future__ import annotations

import datetime
import functools
import json
from collections.abc import Iterable
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["TemplateError", "render_chat", "compile_template"]


class TemplateError(ValueError):
    """The chat template is broken or refused the conversation; the message says why."""


def _raise(message: str) -> None:
    raise TemplateError(message)


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False, **_: Any) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii)


@functools.lru_cache(maxsize=32)
def compile_template(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=["jinja2.ext.loopcontrols"],
        undefined=jinja2.Undefined,
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(
            f"the chat template has a syntax error on line {e.lineno}: {e.message}"
        ) from None


def render_chat(
    template: str,
    messages: Iterable[dict[str, Any]],
    add_generation_prompt: bool = True,
    bos_token: str = "",
    eos_token: str = "",
    tools: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> str:
    """Render `messages` ({role, content, ...} dicts) to the prompt text."""
    tpl = compile_template(template)
    try:
        return tpl.render(
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            bos_token=bos_token,
            eos_token=eos_token,
            tools=tools,
            **extra,
        )
    except TemplateError:
        raise
    except jinja2.exceptions.SecurityError as e:
        raise TemplateError(
            f"the chat template tried something unsafe and was stopped: {e}"
        ) from None
    except jinja2.TemplateError as e:
        raise TemplateError(f"the chat template failed: {e}") from e
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise TemplateError(f"the chat template failed: {e}") from e
