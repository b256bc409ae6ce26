"""Test doubles and helpers for the service tests: a fake runner (same interface as
`RunnerProcess`, no model) and a live `hearth serve` subprocess on a free port."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hearth.runner.protocol import (
    CompletionChunk,
    CompletionDone,
    CompletionRequest,
    EngineKind,
    RunnerInfo,
    RunnerMemory,
    TokenLogprob,
)
from hearth.server.scheduling.runner_process import RunnerError, RunnerOptions, RunnerStartError
from hearth.server.store.model_store import ModelStore

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

REPO = Path(__file__).resolve().parents[2]


class FakeRunner:
    """A runner without a model: it answers `script` word by word, cut before the earliest of
    the request's stop strings (the final record names it, as the runner's does)."""

    _next_pid = 10_000

    def __init__(self, launcher: FakeLauncher, path: str, options: RunnerOptions) -> None:
        FakeRunner._next_pid += 1
        self.launcher = launcher
        self.path = path
        self.options = options
        self.pid = FakeRunner._next_pid
        self.alive = True
        self.requests: list[CompletionRequest] = []
        self.busy = 0  # completions and embeddings under way (its /health's busy_slots)
        self.info = RunnerInfo(
            architecture="llama",
            engine=EngineKind(options.engine),
            context_length=0,
            num_ctx=options.num_ctx,
            parallel=options.parallel,
            vocab_size=32000,
            memory=RunnerMemory(weights=1000, cache=200, graph=100, total=1300),
        )

    async def completion(
        self, request: CompletionRequest
    ) -> AsyncIterator[CompletionChunk | CompletionDone]:
        self.busy += 1
        try:
            async for item in self._completion(request):
                yield item
        finally:
            self.busy -= 1

    async def _completion(
        self, request: CompletionRequest
    ) -> AsyncIterator[CompletionChunk | CompletionDone]:
        self.requests.append(request)
        ctl = self.launcher
        while ctl.endless:
            await asyncio.sleep(0.01)
            yield CompletionChunk(content="and ")
        if ctl.refuse:
            raise RunnerError(ctl.refuse)
        text = '{"answer": 42}' if request.format else ctl.script
        found = sorted((i, s) for s in request.options.stop if s and (i := text.find(s)) >= 0)
        stop = found[0][1] if found else None
        text = text[: found[0][0]] if found else text
        words = re.findall(r"\S+\s*", text)
        limit = request.options.num_predict
        if limit is not None and 0 <= limit < len(words):
            words = words[:limit]
        for i, word in enumerate(words):
            if ctl.gate is not None and i == 1:
                await ctl.gate.wait()
            if ctl.die_after is not None and i == ctl.die_after:
                self.alive = False
                raise RunnerError("the model's runner process stopped (status -9)")
            await asyncio.sleep(0)
            logprobs = None
            if request.logprobs:
                top = [TokenLogprob(token=word, logprob=-0.5, bytes=list(word.encode()))]
                logprobs = [
                    TokenLogprob(token=word, logprob=-0.5, bytes=list(word.encode()),
                                 top_logprobs=top[: request.top_logprobs])
                ]  # fmt: skip
            yield CompletionChunk(content=word, logprobs=logprobs)
        prompt = request.prompt or ""
        yield CompletionDone(
            done_reason="length" if len(words) < len(re.findall(r"\S+", text)) else "stop",
            stop=stop if len(words) == len(re.findall(r"\S+", text)) else None,
            prompt_eval_count=max(1, len(prompt.split())),
            prompt_cached=0,
            prompt_eval_duration=1000,
            eval_count=len(words),
            eval_duration=2000,
        )

    async def embedding(self, text: str | list[int], truncate: bool = True) -> dict[str, Any]:
        self.busy += 1
        try:
            while self.launcher.endless:
                await asyncio.sleep(0.01)
        finally:
            self.busy -= 1
        n = len(text)
        return {"embedding": [float(n), 1.0, 2.0, 3.0], "prompt_eval_count": max(1, n // 4)}

    async def tokenize(self, content: str, add_special: bool = True) -> list[int]:
        return list(range(len(content.split())))

    async def detokenize(self, tokens: list[int]) -> str:
        return " ".join(str(t) for t in tokens)

    async def health(self) -> dict[str, Any]:
        return {"status": "ready", "progress": 1.0, "error": None, "busy_slots": self.busy,
                "passes": len(self.requests)}  # fmt: skip

    async def stop(self) -> None:
        if self.alive:
            self.alive = False
            self.launcher.stopped.append(self)


@dataclass
class FakeLauncher:
    """Starts FakeRunners and records what happened; knobs make them misbehave."""

    script: str = "Hello from the fake runner, nice to meet you."
    started: list[FakeRunner] = field(default_factory=list)
    stopped: list[FakeRunner] = field(default_factory=list)
    fail: str | None = None  # RunnerStartError message for the next start
    refused: bool = False  # that error says the engine cannot run the file
    refuse: str | None = None  # RunnerError before the first chunk
    die_after: int | None = None  # the runner dies before this chunk
    gate: asyncio.Event | None = None  # hold every stream after its first chunk
    endless: bool = False  # completions and embeddings that never end (until cancelled)

    async def __call__(self, path: str, options: RunnerOptions, timeout: float) -> FakeRunner:
        if self.fail:
            message, self.fail = self.fail, None
            raise RunnerStartError(message, self.refused)
        runner = FakeRunner(self, path, options)
        self.started.append(runner)
        return runner


def add_model(store: ModelStore, name: str, gguf: Path, **settings: bytes) -> None:
    layers = [store.add_file(gguf, link=True)]
    layers += [store.put_bytes(data, kind) for kind, data in settings.items()]
    store.write_manifest(name, layers)


# -- a live `hearth serve` on the default model ---------------------------------------------


@dataclass
class LiveServer:
    url: str
    proc: subprocess.Popen[str]
    home: Path
    log: Path

    def runner_pids(self) -> list[int]:
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]


def start_server(home: Path, gemma3: Path | None, extra_env: dict[str, str] | None = None,
                 args: tuple[str, ...] = (), new_session: bool = False) -> LiveServer:  # fmt: skip
    """Start `hearth serve --port 0` with HEARTH_HOME=home (the default model's file placed
    where first start looks for it, so nothing is assembled again); `new_session`: in a
    process group of its own (a signal to its group cannot reach the tests)."""
    if gemma3 is not None:
        builtin = home / "models" / "builtin"
        builtin.mkdir(parents=True, exist_ok=True)
        target = builtin / gemma3.name
        if not target.exists():
            try:
                os.link(gemma3, target)
            except OSError:
                import shutil

                shutil.copyfile(gemma3, target)
    env = dict(os.environ, HEARTH_HOME=str(home), **(extra_env or {}))
    env.pop("HEARTH_HOST", None)
    log = home / "serve.log"
    home.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "hearth", "serve", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=open(log, "w"),  # noqa: SIM115 - the child owns it
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=REPO,
        start_new_session=new_session,
    )
    assert proc.stdout is not None
    deadline = time.time() + 120
    line = ""
    while time.time() < deadline:
        line = proc.stdout.readline()
        if line.startswith("Hearth listening on ") or not line:
            break
    if not line.startswith("Hearth listening on "):
        proc.kill()
        raise RuntimeError(f"hearth serve did not start:\n{log.read_text()[-3000:]}")
    return LiveServer(line.split()[-1], proc, home, log)


def stop_server(server: LiveServer) -> None:
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(20)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()


@dataclass
class FakeService:
    """An in-process app on fake runners: the `fake_service` fixture (conftest.py)."""

    client: TestClient
    launcher: FakeLauncher
    store: ModelStore
    app: Any
