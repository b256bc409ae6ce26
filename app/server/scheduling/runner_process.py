"""The service's side of the runner protocol (see hearth.runner.protocol): start, talk to,
stop a runner.

All methods are coroutines for the asyncio service. A runner that dies (crash, SIGKILL, out of
memory) turns into a `RunnerCrashed` for the requests that were using it; nothing else breaks.

A runner runs in a session (and process group) of its own, with no stdin: a signal meant for
its group (a crash handler's, a debugger's, a supervisor's) cannot reach the service, nor a
terminal's Ctrl-C a runner directly (the service stops its runners; a runner whose service
is gone ends itself, see runner/main.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import signal
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import httpx

from ... import env as hearth_env
from ...engine.cpu_turns import runner_env
from ...program import hearth_command
from ...runner.protocol import (
    TOKEN_ENV,
    CompletionChunk,
    CompletionDone,
    CompletionError,
    CompletionRequest,
    ProtocolError,
    RunnerInfo,
    RunnerOptions,
    completion_line,
    from_wire,
    to_wire,
)

__all__ = ["RunnerCrashed", "RunnerError", "RunnerStartError", "RunnerOptions", "RunnerProcess"]

ProgressFn = Callable[[float], None]


class RunnerError(RuntimeError):
    """A request failed in (or with) the runner; the message is for the user."""


class RunnerCrashed(RunnerError):
    """The runner broke off: its connection failed or a reply ended without its last line.
    It has died, or is dying (a native abort may take a while to end a process: a core dump,
    a device driver's teardown); either way it must not serve another request."""


class RunnerStartError(RunnerError):
    """The model could not be loaded; the message says why (e.g. the memory it needs).
    `refused`: the engine cannot run the file (not memory, not the system)."""

    def __init__(self, message: str, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


class RunnerProcess:
    """A running `hearth runner`. Create with `await RunnerProcess.start(...)`."""

    def __init__(self, proc: asyncio.subprocess.Process, port: int, token: str) -> None:
        self.proc = proc
        self.port = port
        self._token = token
        self.info: RunnerInfo  # from the `ready` event, before `start` returns
        self._http = httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(None, connect=10.0),
        )
        self._stderr_tail: list[str] = []
        self._tasks: list[asyncio.Task[None]] = []  # stdout/stderr readers, kept referenced

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    @classmethod
    async def start(
        cls,
        model_path: str,
        options: RunnerOptions | None = None,
        progress: ProgressFn | None = None,
        timeout: float = 300.0,
    ) -> RunnerProcess:
        """Spawn a runner and wait until its model is ready (or raise RunnerStartError).

        `timeout` limits stalled loading: it restarts whenever progress advances.
        """
        options = options or RunnerOptions()
        token = secrets.token_hex(16)
        # every runner takes turns on the CPU with the others (engine/cpu_turns.py)
        env = dict(os.environ, **runner_env(os.environ), **{TOKEN_ENV: token})
        proc = await asyncio.create_subprocess_exec(
            *hearth_command(),
            "runner",
            "--model",
            str(model_path),
            *options.args(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,  # its own process group: see the module docstring
        )
        stderr: list[str] = []
        drain = asyncio.create_task(_collect(proc.stderr, stderr))
        runner: RunnerProcess | None = None
        try:
            while True:
                assert proc.stdout is not None
                line = await asyncio.wait_for(proc.stdout.readline(), timeout)
                if not line:
                    await proc.wait()
                    tail = "".join(stderr[-20:]).strip()
                    raise RunnerStartError(
                        f"the runner exited while loading ({exit_status(proc.returncode)})"
                        + (f": {tail.splitlines()[-1]}" if tail else "")
                    )
                event = json.loads(line)
                kind = event.get("event")
                if kind == "listening":
                    runner = cls(proc, int(event["port"]), token)
                    runner._stderr_tail = stderr
                elif kind == "progress" and progress is not None:
                    progress(float(event.get("fraction", 0.0)))
                elif kind == "error":
                    message = str(event.get("message", "the model failed to load"))
                    raise RunnerStartError(message, bool(event.get("refused")))
                elif kind == "ready":
                    assert runner is not None
                    try:
                        runner.info = from_wire(RunnerInfo, event.get("info"))
                    except ProtocolError as e:
                        raise RunnerStartError(_broken(e)) from None
                    runner._tasks = [drain, asyncio.create_task(_discard(proc.stdout))]
                    return runner
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            drain.cancel()
            if runner is not None:
                await runner._http.aclose()
            raise

    def _died(self) -> RunnerCrashed:
        tail = "".join(self._stderr_tail[-5:]).strip()
        last = _last_words(tail)
        return RunnerCrashed(
            f"the model's runner process stopped ({exit_status(self.proc.returncode)})"
            + (f": {last}" if last else "")
        )

    async def _broke_off(self, what: str) -> RunnerCrashed:
        """The runner broke off (its connection failed, a reply ended without its last line):
        it crashed (a native abort: an RPC worker gone, a device error or out of memory). Its
        exit status and last words when it ends within a second, else `what` happened."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.proc.wait(), 1.0)
        return self._died() if not self.alive else RunnerCrashed(what)

    async def completion(
        self, request: CompletionRequest
    ) -> AsyncIterator[CompletionChunk | CompletionDone]:
        """Yield the runner's lines, read as the protocol's records: chunks, then the final
        `CompletionDone`.

        Raises RunnerError for a `CompletionError` line, a 4xx answer, a line that breaks the
        protocol, or a runner that died. Closing the iterator early cancels the generation in
        the runner.
        """
        try:
            async with self._http.stream("POST", "/completion", json=to_wire(request)) as resp:
                if resp.status_code != 200:
                    body = await resp.aread()
                    raise RunnerError(_error_text(body, resp.status_code))
                done = False
                async for line in resp.aiter_lines():
                    if not line.strip():
                        continue
                    item = _completion_line(line)
                    if isinstance(item, CompletionError):
                        raise RunnerError(item.error)
                    if isinstance(item, CompletionDone) and item.speculation_off:
                        # The runner switched drafting off: what /api/ps reports follows.
                        off = {"enabled": False, "reason": item.speculation_off}
                        self.info = replace(self.info, speculation=off)
                    yield item
                    if isinstance(item, CompletionDone):
                        done = True
                        break
                if not done:
                    raise await self._broke_off("the runner ended the reply without finishing it")
        except (httpx.TransportError, httpx.StreamError):
            raise await self._broke_off("the connection to the model's runner broke") from None

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            resp = await self._http.post(path, json=body)
        except httpx.TransportError:
            raise await self._broke_off("the connection to the model's runner broke") from None
        if resp.status_code != 200:
            raise RunnerError(_error_text(resp.content, resp.status_code))
        return dict(resp.json())

    async def embedding(self, text: str | list[int], truncate: bool = True) -> dict[str, Any]:
        return await self._post("/embedding", {"input": text, "truncate": truncate})

    async def tokenize(self, content: str, add_special: bool = True) -> list[int]:
        out = await self._post("/tokenize", {"content": content, "add_special": add_special})
        return list(out["tokens"])

    async def detokenize(self, tokens: list[int]) -> str:
        return str((await self._post("/detokenize", {"tokens": tokens}))["content"])

    async def health(self) -> dict[str, Any]:
        try:
            resp = await self._http.get("/health", timeout=3.0)
            return dict(resp.json())
        except (httpx.TransportError, ValueError):
            return {"status": "dead"}

    async def stop(self) -> None:
        """End the process (the only reliable way to hand all its memory back)."""
        if self.alive:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 5.0)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        await self._http.aclose()


def exit_status(code: int | None) -> str:
    """A process's exit code in words: "status 1", "killed by SIGABRT" (a native abort)."""
    if code is None or code >= 0:
        return f"status {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"killed by {name}" + (" (a native abort)" if -code == signal.SIGABRT else "")


_NATIVE_ABORT = re.compile(r"\.(?:c|cc|cpp|cu|m):\d+: (.+)$")


def _last_words(tail: str) -> str:
    """What a runner said last before it stopped: a native abort's message ("Remote RPC
    server crashed or returned malformed response", from "ggml-rpc.cpp:498: ...") when there
    is one, else the last line."""
    lines = tail.splitlines()
    for line in reversed(lines):
        m = _NATIVE_ABORT.search(line.strip())
        if m:
            return m.group(1)
    return lines[-1] if lines else ""


def _broken(error: ValueError) -> str:
    return f"the runner's reply breaks the runner protocol: {error}"


def _completion_line(line: str) -> CompletionChunk | CompletionDone | CompletionError:
    """One line of a completion stream as its record; RunnerError when it is not one."""
    try:
        return completion_line(json.loads(line))
    except ValueError as e:  # not JSON, or a ProtocolError (unknown field, wrong type)
        raise RunnerError(_broken(e)) from None


def _error_text(body: bytes, status: int) -> str:
    try:
        return from_wire(CompletionError, json.loads(body)).error
    except (ValueError, TypeError):  # ProtocolError is a ValueError
        return f"the runner answered HTTP {status}"


async def _collect(stream: asyncio.StreamReader | None, sink: list[str]) -> None:
    """Keep the runner's recent stderr (for error messages); HEARTH_RUNNER_LOG=1 echoes it."""
    if stream is None:
        return
    echo = hearth_env.flag("HEARTH_RUNNER_LOG")
    while line := await stream.readline():
        text = line.decode("utf-8", "replace")
        sink.append(text)
        if len(sink) > 200:
            del sink[:100]
        if echo:
            sys.stderr.write(text)


async def _discard(stream: asyncio.StreamReader | None) -> None:
    if stream is None:
        return
    while await stream.readline():
        pass
