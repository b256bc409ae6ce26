"""`hearth run MODEL [PROMPT]`: chat with a model in the terminal, like `ollama run`.

A client of the service: it uses the running `hearth serve` (HEARTH_HOST), or starts a private
one for the session. With PROMPT, print one streamed reply and exit; without it, an
interactive chat whose follow-up turns reuse the runner's cached conversation. `--raw` sends
the text without a chat template. MODEL may be a path to a .gguf file: it is registered (as
`local/<file name>`, hard-linked, not copied) so the service can load it. `--tools CONFIG.json`
gives the model the tools of the MCP servers in that file (`terminal_tools.py`); `--attach FILE`
sends documents and pictures with the first question (attachments.py). When a turn would not
fit the context the oldest turns are summarised first (terminal_compaction.py; `/summary`,
`/undo`).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..agent.loop import StepReply, turn_options
from ..client import HearthClient, ServiceError, reported_num_ctx
from ..default_model import DEFAULT_MODEL
from ..options import run_flags
from .attachments import TerminalAttachments, format_sources
from .connection import Connection, connect
from .terminal_compaction import TerminalCompaction, fold

if TYPE_CHECKING:
    from .terminal_tools import ToolSession


class _UsageError(RuntimeError):
    """A combination of options that cannot work; the message says why."""


__all__ = ["resolve_model", "request_options", "run"]

_ALIASES = ("gemma3:270m-q4_K_M", "default")


def _local_name(path: Path) -> str:
    stem = re.sub(r"[^a-z0-9._-]+", "-", path.stem.lower()).strip("-._") or "model"
    return f"local/{stem[:80]}:latest"


def projector_beside(model: Path) -> Path | None:
    """The vision projector lying beside a model file (`mmproj*.gguf`, as llama.cpp's
    releases name it): the only one, else the one whose name shares the model's stem."""
    found = sorted(p for p in model.parent.glob("mmproj*.gguf") if p.is_file() and p != model)
    if len(found) > 1:
        stem = model.stem.lower().split("-")[0]
        found = [p for p in found if stem in p.name.lower()]
    return found[0] if len(found) == 1 else None


def resolve_model(client: HearthClient, name: str, projector: str | None = None) -> str:
    """A model name, or a .gguf path registered with the service -> the name to use. A
    model file brings its vision projector: `projector`, else an `mmproj*.gguf` beside it."""
    if name in _ALIASES:
        return DEFAULT_MODEL
    path = Path(name).expanduser()
    if path.is_file() or name.lower().endswith(".gguf"):
        if not path.is_file():
            raise ServiceError(f"model '{name}' not found: there is no such file")
        local = _local_name(path)
        body = {"model": local, "from": str(path.resolve()), "link": True}
        mmproj = Path(projector).expanduser() if projector else projector_beside(path.resolve())
        if mmproj is not None:
            if not mmproj.is_file():
                raise ServiceError(f"no vision projector at {mmproj}")
            body["projector"] = str(mmproj.resolve())
        for _ in client.create(body):
            pass
        return local
    client.show(name)  # "model '...' not found" when absent
    return name


def request_options(args: Any) -> dict[str, Any]:
    """The options the user set (the rest come from the model and the defaults)."""
    given = {f.name: getattr(args, f.dest, None) for f in run_flags()}
    return {name: value for name, value in given.items() if value is not None}


def response_format(value: str | None) -> str | dict[str, Any] | None:
    """`--format`: "json", or a JSON schema given inline or as a file's path (Ollama's
    `format`: the reply is held to it)."""
    if value is None or value == "json":
        return value
    text = value
    if not value.lstrip().startswith("{"):
        try:
            text = Path(value).expanduser().read_text(encoding="utf-8")
        except OSError as e:
            raise _UsageError(f'--format must be "json", a JSON schema or its file: {e}') from None
    try:
        schema = json.loads(text)
    except ValueError as e:
        raise _UsageError(f"--format's JSON schema is not valid JSON: {e}") from None
    if not isinstance(schema, dict):
        raise _UsageError("--format's JSON schema must be an object")
    return schema


def run(args: Any, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    conn: Connection | None = None
    tools: ToolSession | None = None
    attached: TerminalAttachments | None = None
    try:
        fmt = response_format(getattr(args, "format", None))
        if getattr(args, "tools", None) and args.raw:
            raise _UsageError("--tools needs the model's chat template: leave out --raw")
        conn = connect(start_private=True)
        model = resolve_model(conn.client, args.model, getattr(args, "mmproj", None))
        files = getattr(args, "attach", None) or []
        if files and args.raw:
            raise _UsageError("--attach needs the chat template: leave out --raw")
        if files:
            embed_model = getattr(args, "embed_model", None)
            attached = TerminalAttachments(
                conn.client, model, files, args.num_ctx, embed_model, err
            )
        if getattr(args, "tools", None):
            from .terminal_tools import open_tools  # the MCP SDK loads only for --tools

            tools = open_tools(args, conn.client, model, sys.stdin, err)
        chat = _Chat(conn.client, model, args, out, err, tools, attached)
        if fmt is not None:
            chat.base["format"] = fmt
        if args.prompt is not None:
            return chat.one_shot(args.prompt)
        return chat.interactive()
    except (ServiceError, _UsageError) as e:
        err.write(f"\nhearth: {e}\n")
        return 1
    finally:
        if tools is not None:
            tools.close()  # the MCP servers stop with the chat
        if attached is not None:
            attached.close()
        if conn is not None:
            conn.close()


class _Chat:
    def __init__(
        self,
        client: HearthClient,
        model: str,
        args: Any,
        out: TextIO,
        err: TextIO,
        tools: ToolSession | None = None,
        attached: TerminalAttachments | None = None,
    ):
        self.client, self.model, self.args = client, model, args
        self.out, self.err, self.tools = out, err, tools
        self.attached = attached
        self._report = ""
        self.base: dict[str, Any] = {"model": model, "options": request_options(args)}
        if args.keep_alive is not None:
            self.base["keep_alive"] = args.keep_alive
        self.compaction: TerminalCompaction | None = None  # interactive chats only

    def _stream(self, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        """Stream a reply to `out`; returns the NDJSON objects."""
        items = []
        for item in self.client.stream(path, {**self.base, **body}):
            piece = item.get("response") if "response" in item else item["message"]["content"]
            if piece:
                self.out.write(piece)
                self.out.flush()
            items.append(item)
            if item.get("done"):
                self._done(item)
                if self.compaction is not None:
                    self.compaction.on_final(item)
                if self.attached is not None:  # the context the service used from now on
                    self.attached.num_ctx = reported_num_ctx(item) or self.attached.num_ctx
        return items

    def _step(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> StepReply:
        """One model turn offering `tools` (the agent loop's `ChatStep`), its length capped
        (`turn_options`); a turn cut at the cap is said on stderr."""
        options = turn_options(self.base["options"])
        body = {"messages": fold(messages), "tools": tools, "options": options}
        reply = StepReply.from_chunks(self._stream("/api/chat", body))
        if reply.stats.get("done_reason") == "length":
            self.err.write(
                f"\n(the model's turn was cut at {options['num_predict']} tokens; "
                "--num-predict changes the limit)\n"
            )
        return reply

    def _done(self, final: dict[str, Any]) -> None:
        extra = final.get("hearth", {})
        if extra.get("truncated"):
            self.err.write("\n(the conversation was cut to fit the context: use --num-ctx)\n")
        if not self.args.verbose:
            return
        evaluated = final.get("prompt_eval_count", 0)
        p_s = final.get("prompt_eval_duration", 0) / 1e9
        e_n, e_s = final.get("eval_count", 0), final.get("eval_duration", 0) / 1e9
        self._report = (
            f"prompt: {extra.get('prompt_tokens', evaluated)} tokens "
            f"({extra.get('prompt_cached', 0)} from cache), {evaluated} evaluated in "
            f"{p_s:.2f}s ({evaluated / p_s if p_s else 0.0:.1f} tok/s)\n"
            f"generation: {e_n} tokens in {e_s:.2f}s ({e_n / e_s if e_s else 0.0:.1f} tok/s), "
            f"done: {final.get('done_reason', '')}\n"
        )
        if extra.get("drafted"):
            self._report += (
                f"speculation: {extra['accepted']} of {extra['drafted']} drafted tokens accepted\n"
            )

    def _reply(self, messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
        """Answer the last user message; returns the messages to add (the answer, and with
        tools every call's turn and result)."""
        self._report = ""
        if self.args.raw:
            items = self._stream("/api/generate", {"prompt": text, "raw": True})
            reply = "".join(i.get("response", "") for i in items)
        elif self.tools is not None:
            return self.tools.run(messages, self._step).added
        else:
            body = {"messages": fold(messages)}
            reply = StepReply.from_chunks(self._stream("/api/chat", body)).content
        return [{"role": "assistant", "content": reply}]

    def _user(self, text: str) -> dict[str, Any]:
        return self.attached.user(text) if self.attached else {"role": "user", "content": text}

    def _sources(self) -> None:
        if self.attached is not None:
            self.err.write(format_sources(self.attached.sources()))

    def _unask(self, messages: list[dict[str, Any]]) -> None:
        """The last question got no answer: it goes (with a summary made for it)."""
        while messages and messages.pop().get("role") != "user":
            pass
        if self.attached is not None:
            self.attached.forget_last()

    def one_shot(self, prompt: str) -> int:
        self._reply([self._user(prompt)], prompt)  # one question: nothing to compact
        self.out.write("\n")
        self._sources()
        if self._report:
            self.err.write(self._report)
        return 0

    def interactive(self) -> int:
        messages: list[dict[str, Any]] = []
        if not self.args.raw:
            self.compaction = TerminalCompaction(
                self.client, self.model, self.base["options"], self.err
            )
        tty = sys.stdin.isatty()
        if tty:
            self.err.write(f"Chatting with {self.model}. Type /bye (or Ctrl-D) to leave.\n")
        while True:
            if tty:
                self.out.write(">>> ")
                self.out.flush()
            line = sys.stdin.readline()
            if not line:
                break
            text = line.rstrip("\n")
            if text.strip() in ("/bye", "/exit", "/quit"):
                break
            if not text.strip():
                continue
            if self.compaction is not None and text.strip() in ("/summary", "/undo"):
                act = self.compaction.show if text.strip() == "/summary" else self.compaction.undo
                self.err.write(act(messages))
                continue
            messages.append(self._user(text))
            try:
                if self.compaction is not None:
                    self.compaction.before_reply(messages)
                added = self._reply(messages, text)
            except KeyboardInterrupt:  # stop this reply, keep the chat
                self.out.write("\n")
                self._unask(messages)
                continue
            except ServiceError as e:
                self.err.write(f"\nhearth: {e}\n")
                self._unask(messages)
                continue
            messages.extend(added)
            if self.attached is not None:
                self.attached.assistant(added[-1]["content"])
            self.out.write("\n\n")
            self._sources()
            if self._report:
                self.err.write(self._report)
        return 0
