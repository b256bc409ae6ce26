"""A server's question during a tool call (MCP elicitation), asked on the terminal.

`hearth run --tools` prints the server's message, then asks whether to answer, decline or
cancel (a, d or c); answering asks each field on its own line (its kind, its choices and its
default said; an empty line keeps the default or leaves an optional field out; a value the
field does not take is said and asked again). End of input cancels. With `--yes` (no one at
the terminal to ask) every question is declined, and the terminal says so.
"""

from __future__ import annotations

from typing import Any, TextIO

from ..agent.elicit import ElicitAnswer, Elicitation, FormField, check_values

__all__ = ["TerminalElicit"]

_CHOICES = {"a": "accept", "answer": "accept", "d": "decline", "decline": "decline"}
_CHOICES |= {"c": "cancel", "cancel": "cancel"}


def _hint(f: FormField) -> str:
    if f.kind in ("choice", "choices"):
        values = ", ".join(v for v, _label in f.options)
        what = f"one of {values}" if f.kind == "choice" else f"some of {values}, comma-separated"
    elif f.kind == "boolean":
        what = "yes or no"
    elif f.kind == "integer":
        what = "a whole number"
    elif f.kind == "number":
        what = "a number"
    else:
        what = f"text ({f.format})" if f.format else "text"
    parts = [what]
    if f.default is not None:
        parts.append(f"default {f.default}")
    if not f.required:
        parts.append("optional")
    return "; ".join(parts)


class TerminalElicit:
    """The hub's elicitation handler on a terminal (`ToolHub.on_elicit`)."""

    def __init__(self, inp: TextIO, err: TextIO, decline_all: bool = False) -> None:
        self.inp, self.err, self.decline_all = inp, err, decline_all

    def _line(self, question: str) -> str | None:
        self.err.write(question)
        self.err.flush()
        line = self.inp.readline()
        if not line:
            self.err.write("\n")
            return None
        return line.rstrip("\n")

    def __call__(self, q: Elicitation) -> ElicitAnswer:
        self.err.write(f"\n[tool] the MCP server '{q.server}' asks: {q.message}\n")
        if q.url:
            self.err.write(f"[tool] it asks you to open {q.url}\n")
        if self.decline_all:
            self.err.write("[tool] declined: --yes answers no questions for you\n")
            return ElicitAnswer("decline")
        while True:
            line = self._line("Answer, decline or cancel? [a/d/c] ")
            if line is None:
                return ElicitAnswer("cancel")
            action = _CHOICES.get(line.strip().lower())
            if action == "accept":
                break
            if action is not None:
                return ElicitAnswer(action)  # type: ignore[arg-type]
        if q.url:
            return ElicitAnswer("accept")
        raw: dict[str, Any] = {}
        for f in q.fields:
            while True:
                about = f" ({f.description})" if f.description else ""
                line = self._line(f"  {f.label}{about} [{_hint(f)}]: ")
                if line is None:
                    return ElicitAnswer("cancel")
                given: Any = line.strip() or f.default
                try:
                    value = check_values([f], {f.name: "" if given is None else given})
                except ValueError as e:
                    self.err.write(f"  {e}\n")
                    continue
                raw.update(value)
                break
        return ElicitAnswer("accept", raw)
