"""Parallel slots by default: with HEARTH_NUM_PARALLEL unset a model gets 4 slots when its
estimate with 4 fits in the available memory, else 1; an explicit value is used as it is, and
/api/ps says which it is and why."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from hearth.server.app import create_app
from hearth.server.config import ServerConfig
from hearth.server.scheduling.records import LoadSpec
from hearth.server.scheduling.runner_process import RunnerOptions
from hearth.server.scheduling.scheduler import Scheduler

from .fakes import FakeLauncher, add_model


def auto(key: str = "a", one: int = 1000, four: int = 3000) -> LoadSpec:
    """A spec as the service makes it with HEARTH_NUM_PARALLEL unset."""
    return LoadSpec(key=key, path=f"/m/{key}", name=f"{key}:latest", digest=key * 8,
                    options=RunnerOptions(num_ctx=2048), estimate=one,
                    parallel_choices=((4, four),))  # fmt: skip


def run(coro):
    return asyncio.run(coro)


# -- configuration ------------------------------------------------------------------------


def test_unset_or_zero_is_automatic_and_a_number_is_kept():
    assert ServerConfig().num_parallel == 0
    assert ServerConfig.from_env({}).num_parallel == 0
    assert ServerConfig.from_env({"HEARTH_NUM_PARALLEL": "0"}).num_parallel == 0
    assert ServerConfig.from_env({"HEARTH_NUM_PARALLEL": "3"}).num_parallel == 3


# -- the scheduler's choice ----------------------------------------------------------------


def test_four_slots_when_they_fit():
    async def go() -> None:
        launcher = FakeLauncher()
        s = Scheduler(ServerConfig(), launcher, available_memory=lambda: 10_000)
        leases = [await asyncio.wait_for(s.acquire(auto(), 60), 1) for _ in range(4)]
        assert launcher.started[0].options.parallel == 4  # the runner got 4 slots
        entry = s.loaded()[0]
        assert entry.spec.options.parallel == 4 and entry.spec.estimate == 3000
        assert entry.spec.parallel_reason.startswith("automatic: 4 slots need")
        fifth = asyncio.create_task(s.acquire(auto(), 60))
        await asyncio.sleep(0.01)
        assert not fifth.done()  # all 4 slots are taken
        for lease in leases:
            lease.release()
        (await fifth).release()
        assert len(launcher.started) == 1
        await s.close()

    run(go())


def test_one_slot_when_four_do_not_fit():
    async def go() -> None:
        launcher = FakeLauncher()
        s = Scheduler(ServerConfig(), launcher, available_memory=lambda: 2000)
        lease = await s.acquire(auto(), 60)
        assert launcher.started[0].options.parallel == 1
        entry = s.loaded()[0]
        assert entry.spec.options.parallel == 1 and entry.spec.estimate == 1000
        assert "4 slots would need" in entry.spec.parallel_reason
        second = asyncio.create_task(s.acquire(auto(), 60))
        await asyncio.sleep(0.01)
        assert not second.done()  # one slot: the second request waits
        lease.release()
        (await second).release()
        await s.close()

    run(go())


def test_one_slot_when_the_available_memory_is_unknown():
    async def go() -> None:
        launcher = FakeLauncher()
        s = Scheduler(ServerConfig(), launcher, available_memory=lambda: None)
        (await s.acquire(auto(), 60)).release()
        assert launcher.started[0].options.parallel == 1
        assert "unknown" in s.loaded()[0].spec.parallel_reason
        await s.close()

    run(go())


def test_other_models_are_not_unloaded_for_more_slots():
    async def go() -> None:
        launcher = FakeLauncher()
        free = {"bytes": 10_000}
        s = Scheduler(ServerConfig(), launcher, available_memory=lambda: free["bytes"])
        (await s.acquire(auto("a", one=1000, four=3000), 60)).release()
        free["bytes"] = 2000  # a holds its memory: b fits with one slot beside it, not with 4
        (await s.acquire(auto("b", one=1000, four=3000), 60)).release()
        assert sorted(e.spec.key for e in s.loaded()) == ["a", "b"] and launcher.stopped == []
        assert [r.options.parallel for r in launcher.started] == [4, 1]
        await s.close()

    run(go())


def test_four_slots_that_fail_to_start_fall_back_to_one():
    async def go() -> None:
        launcher = FakeLauncher()
        launcher.fail = "the encoder (cross-attention) cache serves one sequence only"
        s = Scheduler(ServerConfig(), launcher, available_memory=lambda: 10_000)
        (await s.acquire(auto(), 60)).release()
        assert [r.options.parallel for r in launcher.started] == [1]
        assert s.loaded()[0].spec.parallel_reason == "automatic: 4 slots failed to start"
        await s.close()

    run(go())


# -- the service and /api/ps ---------------------------------------------------------------


class Budget:
    def __init__(self) -> None:
        self.bytes: int | None = None

    def __call__(self) -> int | None:
        return self.bytes


@pytest.fixture
def service(tmp_path: Path, tiny_llama_path: Path) -> Iterator[Any]:
    """make(config) -> (client, launcher, budget, (estimate with 1 slot, with 4 slots))."""
    clients: list[TestClient] = []

    def make(config: ServerConfig) -> tuple[TestClient, FakeLauncher, Budget, tuple[int, int]]:
        launcher, budget = FakeLauncher(), Budget()
        app = create_app(config, models_dir=tmp_path / f"m{len(clients)}", launcher=launcher,
                         register_default=False, available_memory=budget)  # fmt: skip
        add_model(app.state.service.store, "tiny", tiny_llama_path)
        svc = app.state.service
        target = asyncio.run(svc.target("tiny"))
        settings = svc.settings(target, None)
        one = svc.memory(target, settings)["total"]
        more = replace(settings, runner=replace(settings.runner, parallel=4))
        four = svc.memory(target, more)["total"]
        assert one < four
        client = TestClient(app, base_url="http://127.0.0.1")
        client.__enter__()
        clients.append(client)
        return client, launcher, budget, (one, four)

    yield make
    for client in clients:
        client.__exit__(None, None, None)


def ps_hearth(client: TestClient) -> dict[str, Any]:
    assert client.post("/api/generate", json={"model": "tiny"}).status_code == 200  # load
    return client.get("/api/ps").json()["models"][0]["hearth"]


def test_ps_shows_four_slots_when_memory_allows(service):
    client, launcher, budget, (one, four) = service(ServerConfig())
    budget.bytes = four
    hearth = ps_hearth(client)
    assert hearth["parallel"] == 4 and launcher.started[0].options.parallel == 4
    assert hearth["parallel_reason"].startswith("automatic: 4 slots need")


def test_ps_shows_one_slot_when_four_do_not_fit(service):
    client, launcher, budget, (one, four) = service(ServerConfig())
    budget.bytes = four - 1  # enough for one slot, not for four
    assert one <= budget.bytes
    hearth = ps_hearth(client)
    assert hearth["parallel"] == 1 and launcher.started[0].options.parallel == 1
    assert "4 slots would need" in hearth["parallel_reason"]


def test_an_explicit_number_of_slots_is_used_as_it_is(service):
    config = ServerConfig.from_env({"HEARTH_NUM_PARALLEL": "2"})
    client, launcher, budget, (one, four) = service(config)
    budget.bytes = 10 * four  # room for 4, but 2 were asked for
    hearth = ps_hearth(client)
    assert hearth["parallel"] == 2 and launcher.started[0].options.parallel == 2
    assert hearth["parallel_reason"] == "HEARTH_NUM_PARALLEL=2"
    client, launcher, budget, (one, four) = service(ServerConfig(num_parallel=1))
    budget.bytes = 10 * four
    assert ps_hearth(client)["parallel"] == 1 and launcher.started[0].options.parallel == 1
