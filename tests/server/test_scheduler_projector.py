"""A model file loaded with and without its vision projector (two models may share the file):
the runner that lacks the projector does not take a request that needs it, and each one's
measured memory is kept apart. Fake runners; the live test is test_vision_e2e.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hearth.server.config import ServerConfig
from hearth.server.scheduling.records import LoadSpec
from hearth.server.scheduling.runner_process import RunnerOptions
from hearth.server.scheduling.scheduler import Scheduler

from .fakes import FakeLauncher, add_model


def spec(projector: str | None) -> LoadSpec:
    options = RunnerOptions(num_ctx=1024, projector=projector)
    return LoadSpec(key="/m/a", path="/m/a", name="a:latest", digest="a" * 8, options=options)


def test_a_runner_without_the_projector_is_reloaded_with_it_and_not_back():
    async def go() -> None:
        launcher = FakeLauncher()
        s = Scheduler(ServerConfig(), launcher)
        (await s.acquire(spec(None), 60)).release()
        (await s.acquire(spec("/m/mmproj"), 60)).release()  # needs the projector: reload
        assert len(launcher.started) == 2 and launcher.stopped == [launcher.started[0]]
        assert launcher.started[1].options.projector == "/m/mmproj"
        (await s.acquire(spec(None), 60)).release()  # text only: the vision runner serves it
        (await s.acquire(spec("/m/mmproj"), 60)).release()
        assert len(launcher.started) == 2
        (await s.acquire(spec("/m/other-mmproj"), 60)).release()  # another projector: reload
        assert len(launcher.started) == 3
        await s.close()

    asyncio.run(go())


def test_memory_measured_without_the_projector_is_not_used_with_it(fake_service, tmp_path):
    svc = fake_service.app.state.service
    store = fake_service.store
    blob = store.blob_path(store.resolve("tiny").layer("model").digest)
    projector = tmp_path / "mmproj.gguf"
    projector.write_bytes(Path(blob).read_bytes())  # any GGUF will do for the estimate
    add_model(store, "tiny-vision", blob)
    layers = list(store.resolve("tiny-vision").layers)
    layers.append(store.add_file(projector, link=True, kind="projector"))
    store.write_manifest("tiny-vision", layers)

    async def estimates() -> tuple[dict[str, int], dict[str, int]]:
        text, vision = await svc.target("tiny"), await svc.target("tiny-vision")
        assert text.key == vision.key and vision.projector is not None
        return (
            svc.memory(text, svc.settings(text, None)),
            svc.memory(vision, svc.settings(vision, None)),
        )

    text, vision = asyncio.run(estimates())
    key = asyncio.run(svc.target("tiny")).key
    svc.scheduler.measured[key, None] = {"weights": 7, "graph": 1}
    after_text, after_vision = asyncio.run(estimates())
    assert after_text["weights"] == 7
    assert after_vision == vision  # the text-only runner's weights lack the projector's
