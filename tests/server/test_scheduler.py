"""The scheduler on fake runners: load on demand, reuse, reload, keep-alive, eviction, queue
limit, and a runner that dies."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from hearth.server.config import FOREVER, ServerConfig
from hearth.server.scheduling.records import LoadFailed, LoadSpec, ServerBusy
from hearth.server.scheduling.runner_process import RunnerOptions
from hearth.server.scheduling.scheduler import Scheduler

from .fakes import FakeLauncher


def spec(key: str = "a", num_ctx: int = 2048, estimate: int = 0, **kw: object) -> LoadSpec:
    options = RunnerOptions(num_ctx=num_ctx, **kw)  # type: ignore[arg-type]
    return LoadSpec(key=key, path=f"/m/{key}", name=f"{key}:latest", digest=key * 8,
                    options=options, estimate=estimate)  # fmt: skip


def run(coro):
    return asyncio.run(coro)


def test_loads_on_demand_and_reuses_the_runner():
    async def go() -> None:
        launcher = FakeLauncher()
        s = Scheduler(ServerConfig(), launcher)
        async with await s.acquire(spec(), 60) as lease:
            assert lease.runner is launcher.started[0]
        async with await s.acquire(spec(), 60) as lease:
            assert lease.runner is launcher.started[0]
        assert len(launcher.started) == 1 and [e.spec.key for e in s.loaded()] == ["a"]
        await s.close()

    run(go())


def test_a_smaller_context_is_served_by_the_loaded_larger_one():
    async def go() -> None:
        launcher = FakeLauncher()
        s = Scheduler(ServerConfig(), launcher)
        (await s.acquire(spec(num_ctx=8192), 60)).release()
        (await s.acquire(spec(num_ctx=1024), 60)).release()
        assert len(launcher.started) == 1
        (await s.acquire(spec(num_ctx=16384), 60)).release()  # larger: reload
        assert len(launcher.started) == 2 and launcher.stopped == [launcher.started[0]]
        assert s.loaded()[0].spec.options.num_ctx == 16384
        (await s.acquire(spec(num_ctx=1024, flash_attention=True), 60)).release()
        assert len(launcher.started) == 3  # a different attention kernel: reload
        await s.close()

    run(go())


def test_reload_waits_for_running_requests():
    async def go() -> None:
        launcher = FakeLauncher()
        s = Scheduler(ServerConfig(), launcher)
        first = await s.acquire(spec(num_ctx=1024), 60)
        bigger = asyncio.create_task(s.acquire(spec(num_ctx=4096), 60))
        await asyncio.sleep(0.05)
        assert not bigger.done() and launcher.stopped == []  # the first request still runs
        first.release()
        (await bigger).release()
        assert launcher.stopped == [launcher.started[0]] and len(launcher.started) == 2
        await s.close()

    run(go())


def test_keep_alive_zero_unloads_when_idle_and_negative_keeps():
    async def go() -> None:
        launcher = FakeLauncher()
        s = Scheduler(ServerConfig(), launcher)
        (await s.acquire(spec("a"), 0)).release()
        await asyncio.sleep(0.01)
        assert s.loaded() == [] and len(launcher.stopped) == 1
        (await s.acquire(spec("b"), 0.05)).release()
        assert [e.spec.key for e in s.loaded()] == ["b"]
        await asyncio.sleep(0.15)
        assert s.loaded() == []
        (await s.acquire(spec("c"), FOREVER)).release()
        await asyncio.sleep(0.05)
        assert [e.spec.key for e in s.loaded()] == ["c"]
        assert await s.unload("c") and s.loaded() == []
        await s.close()

    run(go())


def test_max_loaded_models_evicts_the_least_recently_used_idle_one():
    async def go() -> None:
        launcher = FakeLauncher()
        s = Scheduler(ServerConfig(max_loaded_models=2), launcher)
        (await s.acquire(spec("a"), 60)).release()
        busy = await s.acquire(spec("b"), 60)
        (await s.acquire(spec("a"), 60)).release()  # a is now more recent than b, but b is busy
        (await s.acquire(spec("c"), 60)).release()
        assert sorted(e.spec.key for e in s.loaded()) == ["b", "c"]  # a went: b was busy
        waiting = asyncio.create_task(s.acquire(spec("d"), 60))
        await asyncio.sleep(0.02)
        assert waiting.done()  # c was idle, so it made room
        (await waiting).release()
        busy.release()
        await s.close()

    run(go())


def test_eviction_when_memory_is_short():
    async def go() -> None:
        launcher = FakeLauncher()
        free = {"bytes": 1000}
        s = Scheduler(ServerConfig(), launcher, available_memory=lambda: free["bytes"])
        (await s.acquire(spec("a", estimate=800), 60)).release()
        free["bytes"] = 200  # a holds the memory now
        (await s.acquire(spec("b", estimate=800), 60)).release()
        assert [e.spec.key for e in s.loaded()] == ["b"]
        assert launcher.stopped == [launcher.started[0]]
        await s.close()

    run(go())


def test_out_of_memory_at_load_unloads_another_model_and_retries():
    async def go() -> None:
        launcher = FakeLauncher()
        s = Scheduler(ServerConfig(), launcher)
        (await s.acquire(spec("a"), 60)).release()
        launcher.fail = "not enough memory: the model needs 9 GiB, 2 GiB are free"
        (await s.acquire(spec("b"), 60)).release()
        assert [e.spec.key for e in s.loaded()] == ["b"]
        launcher.fail = "model.gguf is truncated"
        with pytest.raises(LoadFailed, match="truncated"):
            await s.acquire(spec("c"), 60)
        await s.close()

    run(go())


def test_queue_limit_answers_busy():
    async def go() -> None:
        launcher = FakeLauncher()
        s = Scheduler(replace(ServerConfig(), max_queue=1), launcher)
        first = await s.acquire(spec(), 60)  # holds the only slot (parallel 1)
        second = asyncio.create_task(s.acquire(spec(), 60))
        await asyncio.sleep(0.01)
        with pytest.raises(ServerBusy, match="busy"):
            await s.acquire(spec(), 60)
        first.release()
        (await second).release()
        await s.close()

    run(go())


def test_a_dead_runner_is_replaced_on_the_next_request():
    async def go() -> None:
        launcher = FakeLauncher()
        s = Scheduler(ServerConfig(), launcher)
        lease = await s.acquire(spec(), 60)
        lease.runner.alive = False  # SIGKILLed
        s.runner_failed(lease.entry)
        lease.release()
        async with await s.acquire(spec(), 60) as again:
            assert again.runner is launcher.started[1]
        await s.close()

    run(go())


def test_a_cancelled_waiter_gives_its_place_back():
    async def go() -> None:
        launcher = FakeLauncher()
        s = Scheduler(ServerConfig(), launcher)
        first = await s.acquire(spec(), 0)
        waiter = asyncio.create_task(s.acquire(spec(), 0))
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        first.release()
        await asyncio.sleep(0.01)
        assert s.loaded() == []  # keep_alive 0 and no references left: unloaded
        await s.close()

    run(go())


def test_num_parallel_serves_requests_side_by_side():
    async def go() -> None:
        launcher = FakeLauncher()
        s = Scheduler(replace(ServerConfig(), num_parallel=2), launcher)
        a = await s.acquire(spec(parallel=2), 60)
        b = await asyncio.wait_for(s.acquire(spec(parallel=2), 60), 1)  # no waiting
        third = asyncio.create_task(s.acquire(spec(parallel=2), 60))
        await asyncio.sleep(0.01)
        assert not third.done()
        a.release()
        (await third).release()
        b.release()
        assert len(launcher.started) == 1
        await s.close()

    run(go())
