"""Reading an Ollama Modelfile into an `/api/create` request body, for `hearth create -f`.

Supported instructions: FROM (a model name, a .gguf path or a Hugging Face checkpoint folder
(converted by the service), relative to the Modelfile; a
second FROM names the vision projector .gguf),
PARAMETER, TEMPLATE (Jinja, as Hearth runs it), SYSTEM, LICENSE and MESSAGE; values may be
quoted or wrapped in triple quotes across lines. ADAPTER is refused with a sentence.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

__all__ = ["ModelfileError", "parse_modelfile", "parameter_value"]


class ModelfileError(ValueError):
    pass


def parameter_value(text: str) -> Any:
    """A PARAMETER value as JSON would have it: numbers and booleans typed, strings as is."""
    text = text.strip()
    if text.startswith('"') and text.endswith('"') and len(text) >= 2:
        return text[1:-1]
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def _instructions(text: str) -> list[tuple[str, str, int]]:
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        rest = rest.strip()
        start = i
        if rest.startswith('"""'):
            body = rest[3:]
            while '"""' not in body:
                if i >= len(lines):
                    raise ModelfileError(f"line {start}: a triple-quoted value is never closed")
                body += "\n" + lines[i]
                i += 1
            rest = body[: body.index('"""')]
        elif rest.startswith('"') and rest.endswith('"') and len(rest) >= 2:
            rest = rest[1:-1]
        out.append((word.upper(), rest, start))
    return out


def parse_modelfile(path: Path) -> dict[str, Any]:
    """The create request body (without `model`) for the Modelfile at `path`."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ModelfileError(f"cannot read {path}: {e}") from None
    body: dict[str, Any] = {}
    params: dict[str, Any] = {}
    messages = []
    for word, value, line in _instructions(text):
        if word == "FROM":
            # Two FROM lines: the model and its vision projector (the service tells which
            # file is which from their GGUF headers, as Ollama does).
            if "projector" in body:
                raise ModelfileError(f"line {line}: at most two FROM lines (model, projector)")
            key = "projector" if "from" in body else "from"
            source = Path(value).expanduser()
            if value.lower().endswith(".gguf") or value.startswith((".", "/", "~")):
                source = source if source.is_absolute() else (path.parent / source).resolve()
                body[key] = str(source)
            elif key == "projector":
                raise ModelfileError(f"line {line}: the second FROM must be a .gguf file")
            else:
                body["from"] = value
        elif word == "PARAMETER":
            key, _, raw = value.partition(" ")
            if not raw.strip():
                raise ModelfileError(f"line {line}: PARAMETER needs a name and a value")
            v = parameter_value(raw)
            if key == "stop":
                params.setdefault("stop", []).append(v if isinstance(v, str) else raw.strip())
            else:
                params[key] = v
        elif word in ("TEMPLATE", "SYSTEM", "LICENSE"):
            body[word.lower()] = value
        elif word == "MESSAGE":
            role, _, content = value.partition(" ")
            messages.append({"role": role, "content": content.strip().strip('"')})
        elif word == "ADAPTER":
            raise ModelfileError(f"line {line}: adapters (LoRA) are not supported yet")
        else:
            raise ModelfileError(f"line {line}: unknown instruction {shlex.quote(word)}")
    if "from" not in body:
        raise ModelfileError(f"{path.name} has no FROM line")
    if params:
        body["parameters"] = params
    if messages:
        body["messages"] = messages
    json.dumps(body)  # everything must be JSON-ready
    return body
