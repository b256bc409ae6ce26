"""The models page's "Get models" against a real `hearth serve` whose Hugging Face is the
local fake (tests/server/remote_fakes.py): search, download with progress, cancel, the
offline switch and the first-run offer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from server.fakes import start_server, stop_server
from server.remote_fakes import Remote, pattern_blob, serve


@pytest.fixture
def hub(tmp_path: Path, gemma3_path: Path, tiny_llama_path: Path) -> Iterator[tuple[Remote, str]]:
    remote = Remote()
    remote.add_hf_repo("me/Tiny-GGUF", {"Tiny-Q4_K_M.gguf": tiny_llama_path.read_bytes()})
    remote.add_hf_repo("me/Slow-GGUF", {"Slow-Q4_K_M.gguf": pattern_blob(16 << 20, seed=2)})
    with serve(remote) as base:
        server = start_server(
            tmp_path / "svc", gemma3_path, {"HF_ENDPOINT": base, "HEARTH_OFFLINE": ""}
        )
        try:
            yield remote, server.url
        finally:
            stop_server(server)


def test_get_models_searches_downloads_and_cancels(qtbot, make_app, hub):
    remote, url = hub
    app = make_app(url)
    window = app.window
    # First run: a real chat model is offered once, and the settings remember it.
    qtbot.waitUntil(lambda: getattr(window, "first_model_offer", None) is not None)
    assert window.first_model_offer.isVisible() and app.settings.offered_models
    window.first_model_offer.later_btn.click()
    assert not window.first_model_offer.isVisible()

    window.models_page.get_btn.click()
    dialog = window.get_models_dialog()
    assert dialog.isVisible() and dialog.catalog.count() >= 5
    dialog.query.setText("tiny")
    dialog.search_btn.click()
    qtbot.waitUntil(lambda: dialog.results.count() == 1)
    assert dialog.results.item(0).text().startswith("me/Tiny-GGUF")
    dialog.results.setCurrentRow(0)
    seen: list[tuple[str, int, int]] = []
    app.downloads.progress.connect(lambda _n, s, c, t: seen.append((s, c, t)))
    dialog.get_btn.click()
    assert "hf.co/me/Tiny-GGUF" in dialog.rows  # a progress row with its Cancel button
    qtbot.waitUntil(lambda: "hf.co/me/Tiny-GGUF:latest" in app.models.names(), timeout=60_000)
    assert dialog.rows == {}
    assert seen[-1][0] == "success" and any(t > 0 and c == t for _s, c, t in seen)

    remote.delay = 0.05
    dialog.name.setText("hf.co/me/Slow-GGUF")
    dialog.get_btn.click()
    row = dialog.rows["hf.co/me/Slow-GGUF"]
    qtbot.waitUntil(lambda: row.bar.maximum() == 1000 and row.bar.value() > 0, timeout=30_000)
    row.cancel.click()
    qtbot.waitUntil(lambda: dialog.rows == {}, timeout=30_000)
    app.models.refresh()
    qtbot.wait(500)
    assert not any("Slow" in n for n in app.models.names())

    dialog.offline.setChecked(True)
    assert app.settings.work_offline
    before = len(remote.requests)
    dialog.search_btn.click()
    dialog.name.setText("hf.co/me/Tiny-GGUF:Q4_K_M")
    dialog.get_btn.click()
    qtbot.wait(300)
    assert len(remote.requests) == before and dialog.rows == {}
