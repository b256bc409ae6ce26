#!/usr/bin/env python3
"""Make the PNGs in docs/screenshots/: the main window mid-conversation (light and dark), a
question about a picture (vision), a question about a long PDF with its sources (documents),
the Models page, its "Get models" window, the Settings page and a tool round trip, from a
real window under Xvfb.

    .venv/bin/python scripts/screenshots.py            # needs xvfb-run (Debian: xvfb)
    .venv/bin/python scripts/screenshots.py --only tools.png

The app runs as a user would: it starts its own `hearth serve` (so the Models page shows the
real default model and its memory estimate). The conversation is sample text written into a
throw-away history first, so the pictures show what a longer chat looks like; the vision
scene's picture is drawn here (Pillow), its answer is sample text written for that picture,
and its model is named as a vision model a user would pick. The documents scene's PDF is
written here (fpdf2) and read, indexed and searched by hearth.documents as the app does; its
answer is sample text. Not a test.

The tools scene (tools.png) is a real round trip: the default model (gemma3:270m, a tiny
one) under a chat template that offers tools (tests/server/live_models.py's), its first turn
held by a JSON schema to a call of the weather server's `forecast` (tests/ui/mcp_weather.py,
a real MCP server over stdio), the call allowed on the approval card as a user would, the
result sent back and the model's own answer to it.

The compare scene (compare.png) is one question answered side by side by two models (sample
text and figures written for it), the chat going on with the left reply.

The compaction scene (compaction.png) is a chat that outgrew a 512-token context: its earlier
turns summarised (sample text written for them) and the notice opened on the summary.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOOLS_MODEL = "gemma3-tools:270m"
TOOLS_QUESTION = "What will the weather be like in Lisbon tomorrow?"
# The first turn's output is held to this: a call of the weather server's forecast tool.
CALL_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"const": "weather__forecast"},
        "arguments": {
            "type": "object",
            "properties": {"city": {"const": "Lisbon"}},
            "required": ["city"],
        },
    },
    "required": ["name", "arguments"],
}

CODE_ANSWER = """Use the standard library's `csv` module: `DictReader` gives you one dict per \
row, keyed by the header line.

```python
import csv
from pathlib import Path

def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))

rows = read_rows(Path("sales.csv"))
total = sum(float(r["amount"]) for r in rows)
print(f"{len(rows)} rows, total {total:.2f}")
```

A few things worth knowing:

- Open the file with `newline=""`, or quoted fields containing line breaks are split wrongly.
- Every value is a **string**: convert numbers yourself, as `float(r["amount"])` does above.
- For large files, loop over the reader instead of building a list.
"""

FOLLOW_UP = """Yes: pass `delimiter=";"` to the reader.

```python
reader = csv.DictReader(f, delimiter=";")
```

If you don't know the delimiter in advance, `csv.Sniffer().sniff(sample)` can guess it \
from the first few kilobytes of the file."""

VISION_MODEL = "gemma3:4b"
VISION_QUESTION = "Where could this have been taken, and what time of day is it?"
VISION_ANSWER = """It looks like a **mountain lake at sunset**, somewhere alpine or in the \
Rockies:

- **Time of day:** early evening. The sun sits just above the ridge line, the sky shades from \
orange near the horizon to violet overhead, and the lake mirrors that glow.
- **Setting:** two ranges of peaks, the far one snow-capped, behind a calm lake; dark conifers \
line the shore, which suggests a high, cool climate.
- **Signs of people:** a small wooden cabin on the left shore with a lit window, and a jetty \
running into the water.

If you know roughly when it was taken, the sun's height would narrow the season down: this \
low, warm light over snowy peaks fits late summer or early autumn."""
VISION_FOLLOW_UP = "Same place in winter: what changed?"

DOCS_QUESTION = (
    "How much did the Harbour Commission approve for the Skagen lighthouse, and by when must "
    "the work be done?"
)
DOCS_ANSWER = """The Harbour Commission approved **4,812,000 kroner** for restoring the Skagen \
lighthouse, and the work must be **finished before the autumn storms** [1].

Two details from elsewhere in the report: the harbour fund pays one third of the lighthouse \
works, and the tender for them closes on **14 March** [2]."""
DOCS_FOLLOW_UP = "What does the field trial say about irrigation?"
_REPORT_LINES = (
    "Cargo volumes through the north basin rose for the third year running, led by timber "
    "and grain.",
    "The ferry berth was dredged to 7.5 metres in May, and the work stayed within budget.",
    "Pilotage requests averaged 41 a month; no incidents were reported.",
    "Staff numbers were unchanged at 63, with two apprentices joining the workshop.",
    "Mooring fees were indexed to inflation as agreed by the board in the previous year.",
    "The quay lighting was replaced with LED fittings, cutting its energy use by half.",
    "Winter ice kept the inner basin closed for nine days in February.",
    "The fishing fleet landed 12,400 tonnes, slightly below the ten-year average.",
)


def report_pdf(path: Path, pages: int = 48) -> Path:
    """A harbour's annual report: a page of routine business per page, the lighthouse grant
    stated once on page 31 and its funding on page 12."""
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.set_font("Helvetica", size=11)
    for n in range(1, pages + 1):
        pdf.add_page()
        pdf.set_font("Helvetica", "B", 13)
        pdf.cell(0, 8, f"Annual report 2025 - part {n}", new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("Helvetica", size=11)
        lines = [_REPORT_LINES[(n + k) % len(_REPORT_LINES)] for k in range(6)]
        if n == 31:
            lines.insert(
                3,
                "The Harbour Commission approved 4,812,000 kroner for restoring "
                "the Skagen lighthouse, to be finished before the autumn storms.",
            )
        if n == 12:
            lines.insert(
                2,
                "The harbour fund pays one third of the cost of the lighthouse "
                "works; the tender for them closes on 14 March.",
            )
        pdf.multi_cell(0, 6, " ".join(lines))
    pdf.output(str(path))
    return path


def seed_documents_chat(store, when: float, folder: Path) -> None:
    """A question about a long PDF, answered, with the passages the prompt drew on."""
    from hearth.documents import ChatDocuments, prepare_document
    from hearth.history.chat_store import make_title

    pdf = report_pdf(folder / "harbour-report-2025.pdf")
    chat = store.create_chat("gemma3:270m")
    store.set_auto_title(chat.id, make_title(DOCS_QUESTION))
    q = store.add_message(chat.id, None, "user", DOCS_QUESTION)
    ChatDocuments(store).on_sent(q, [prepare_document(pdf)], "", [], 4096)
    a = store.add_message(chat.id, q.id, "assistant", DOCS_ANSWER, model="gemma3:270m")
    stats = {
        "eval_count": 71,
        "eval_duration": 1_600_000_000,
        "prompt_eval_count": 2410,
        "prompt_tokens": 2410,
        "tokens_per_second": 44.2,
        "ttft": 1.12,
        "done_reason": "stop",
    }
    store.update_message(a.id, stats=stats)
    store._conn.execute("UPDATE chats SET updated_at=? WHERE id=?", (when, chat.id))


OTHER_CHATS = (
    "Plan a weekend in Lisbon",
    "Explain Rust lifetimes like I'm five",
    "Sourdough starter schedule",
    "Haiku about the first snow",
    "Compare SQLite WAL and rollback journal",
)


def lake_picture(winter: bool = False, size: tuple[int, int] = (600, 400)) -> bytes:
    """A drawn mountain lake at sunset (or the same place under snow), as PNG bytes."""
    from PIL import Image, ImageDraw, ImageFilter

    w, h = size
    horizon = int(h * 0.62)
    img = Image.new("RGB", size)
    draw = ImageDraw.Draw(img)
    top, low = ((78, 92, 140), (200, 210, 226)) if winter else ((72, 52, 128), (252, 160, 84))
    for y in range(horizon):  # the sky, violet overhead to orange at the horizon
        t = y / horizon
        draw.line(
            [(0, y), (w, y)],
            fill=tuple(int(a + (b - a) * t) for a, b in zip(top, low, strict=True)),
        )
    sun = (int(w * 0.62), int(horizon * 0.42))  # just above the ridge
    glow = (255, 236, 200) if winter else (255, 214, 120)
    draw.ellipse([sun[0] - 26, sun[1] - 26, sun[0] + 26, sun[1] + 26], fill=glow)
    far = [(0, horizon), (0, 170), (90, 120), (170, 165), (260, 95), (350, 150)]
    far += [(430, 110), (520, 160), (w, 125), (w, horizon)]
    draw.polygon(far, fill=(120, 110, 150) if not winter else (150, 160, 185))
    for peak in ((90, 120), (260, 95), (430, 110)):  # snow on the far peaks
        x, y = peak
        cap = [(x - 26, y + 22), (x, y), (x + 26, y + 22), (x + 8, y + 16), (x - 6, y + 24)]
        draw.polygon(cap, fill=(246, 246, 250))
    near = [(0, horizon), (0, 220), (120, 175), (210, 225), (330, 190), (450, 232)]
    near += [(540, 200), (w, 226), (w, horizon)]
    draw.polygon(near, fill=(58, 52, 78) if not winter else (225, 230, 240))
    img = img.filter(ImageFilter.GaussianBlur(0.6))
    draw = ImageDraw.Draw(img)
    # the lake: the sky upside down, darker, with a few ripples
    sky = img.crop((0, horizon - (h - horizon), w, horizon)).transpose(
        Image.Transpose.FLIP_TOP_BOTTOM
    )
    water = Image.blend(sky, Image.new("RGB", sky.size, (30, 40, 70)), 0.45)
    if winter:
        water = Image.blend(water, Image.new("RGB", sky.size, (215, 225, 238)), 0.6)
    img.paste(water, (0, horizon))
    for n in range(0 if winter else 9):  # the sun's glitter (the winter lake is frozen)
        y = horizon + 12 + n * 15
        x = sun[0] - 40 + (n % 3) * 14
        draw.line([(x, y), (x + 60 - n * 4, y)], fill=glow, width=2)
    # the shore, pines, the cabin with its lit window, the jetty
    shore = (34, 44, 36) if not winter else (236, 238, 244)
    draw.polygon(
        [(0, horizon - 6), (250, horizon + 4), (210, horizon + 30), (0, horizon + 44)], fill=shore
    )
    for x, height in ((18, 70), (48, 92), (80, 60), (212, 78), (236, 58)):
        base = horizon + 8
        pine = (22, 48, 34) if not winter else (40, 70, 60)
        draw.polygon([(x - 14, base), (x, base - height), (x + 14, base)], fill=pine)
        if winter:
            draw.polygon(
                [(x - 6, base - height + 24), (x, base - height), (x + 6, base - height + 24)],
                fill=(250, 250, 255),
            )
    cabin = (110, horizon - 30, 170, horizon + 6)
    draw.rectangle(cabin, fill=(120, 66, 40))
    roof = [(102, horizon - 28), (140, horizon - 56), (178, horizon - 28)]
    draw.polygon(roof, fill=(70, 36, 26) if not winter else (245, 246, 250), outline=(70, 36, 26))
    draw.rectangle((124, horizon - 20, 138, horizon - 8), fill=(255, 206, 110))
    draw.rectangle((170, horizon + 2, 250, horizon + 7), fill=(92, 60, 40))
    for x in (190, 215, 240):
        draw.line([(x, horizon + 7), (x, horizon + 18)], fill=(70, 46, 30), width=3)
    if winter:
        for n in range(140):  # falling snow
            x, y = (n * 97) % w, (n * 57) % h
            draw.ellipse([x, y, x + 3, y + 3], fill=(255, 255, 255))
    out = BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


def seed_vision_chat(store, when: float) -> None:
    """A question about a picture, answered: the vision scene's chat."""
    from hearth.history.chat_store import make_title

    chat = store.create_chat(VISION_MODEL)
    store.set_auto_title(chat.id, make_title(VISION_QUESTION))
    q = store.add_message(chat.id, None, "user", VISION_QUESTION, images=[lake_picture()])
    a = store.add_message(chat.id, q.id, "assistant", VISION_ANSWER, model=VISION_MODEL)
    stats = {
        "eval_count": 142,
        "eval_duration": 6_700_000_000,
        "prompt_eval_count": 291,
        "prompt_tokens": 291,  # 256 of them the picture
        "tokens_per_second": 21.2,
        "ttft": 1.84,
        "done_reason": "stop",
    }
    store.update_message(a.id, stats=stats)
    store._conn.execute("UPDATE chats SET updated_at=? WHERE id=?", (when, chat.id))


COMPACT_TURNS = [
    (
        "My name is Ada and I keep three goats in Ockham.",
        "Nice to meet you, Ada! Three goats in Ockham sounds lovely.",
    ),
    (
        "We decided to paint the garden shed green before the end of May.",
        "Green before the end of May: noted.",
    ),
    (
        "My brother Charles repairs clocks on Marchmont Street.",
        "A clock repairer in the family is handy!",
    ),
    (
        "Open question: should the goats move to the north field this winter?",
        "That depends on shelter and water in the north field.",
    ),
]
COMPACT_QUESTION = "What did we decide about the shed, and who repairs clocks?"
COMPACT_SUMMARY = (
    "The user, Ada, keeps three goats in Ockham. Decision: the garden shed will be painted "
    "green before the end of May. Ada's brother Charles repairs clocks on Marchmont Street. "
    "Open question: whether the goats move to the north field this winter."
)
COMPACT_ANSWER = (
    "You decided to paint the garden shed green before the end of May, and your brother "
    "Charles repairs clocks on Marchmont Street."
)


def seed_compaction_chat(store, when: float) -> None:
    """A chat whose earlier turns were summarised to fit a 512-token context."""
    from hearth.history.compaction import SUMMARY

    chat = store.create_chat("gemma3:270m")
    store.set_auto_title(chat.id, "Goats, the shed and the clocks")
    store.update_chat(chat.id, options={"num_ctx": 512})
    parent = None
    for question, answer in COMPACT_TURNS:
        q = store.add_message(chat.id, parent, "user", question)
        parent = store.add_message(chat.id, q.id, "assistant", answer, model="gemma3:270m").id
    q = store.add_message(chat.id, parent, "user", COMPACT_QUESTION)
    summary = store.add_message(
        chat.id, q.id, SUMMARY, COMPACT_SUMMARY, model="gemma3:270m", covers=8
    )
    a = store.add_message(chat.id, summary.id, "assistant", COMPACT_ANSWER, model="gemma3:270m")
    stats = {
        "eval_count": 31,
        "eval_duration": 700_000_000,
        "prompt_eval_count": 118,
        "prompt_tokens": 118,
        "tokens_per_second": 44.3,
        "ttft": 0.31,
        "done_reason": "stop",
        "truncated": False,
        "shifted": False,
    }
    store.update_message(a.id, stats=stats)
    store._conn.execute("UPDATE chats SET updated_at=? WHERE id=?", (when, chat.id))


def seed_history() -> None:
    from hearth.history import ChatStore
    from hearth.history.chat_store import make_title

    store = ChatStore()
    now = time.time()
    for n, title in enumerate(OTHER_CHATS):
        chat = store.create_chat("gemma3:270m")
        store.set_auto_title(chat.id, title)
        q = store.add_message(chat.id, None, "user", title)
        store.add_message(chat.id, q.id, "assistant", "…", model="gemma3:270m")
        store._conn.execute(  # spread the sample chats over the past week
            "UPDATE chats SET updated_at=? WHERE id=?", (now - 86400 * (n + 1) * 1.3, chat.id)
        )
    seed_compaction_chat(store, now - 4 * 3600)
    seed_compare_chat(store, now - 5 * 3600)
    seed_vision_chat(store, now - 3 * 3600)
    seed_documents_chat(store, now - 2 * 3600, Path(os.environ["HEARTH_HOME"]))
    chat = store.create_chat("gemma3:270m")
    question = "How do I read a CSV file into a list of dicts in Python?"
    store.set_auto_title(chat.id, make_title(question))
    q = store.add_message(chat.id, None, "user", question)
    stats = {
        "eval_count": 187,
        "eval_duration": 4_120_000_000,
        "prompt_eval_count": 38,
        "prompt_tokens": 38,
        "tokens_per_second": 45.4,
        "ttft": 0.21,
        "done_reason": "stop",
    }
    first = store.add_message(chat.id, q.id, "assistant", "Short version: csv.DictReader.")
    store.update_message(first.id, stats={**stats, "eval_count": 9})
    a = store.add_message(chat.id, q.id, "assistant", CODE_ANSWER, model="gemma3:270m")
    store.update_message(a.id, stats=stats)
    q2 = store.add_message(chat.id, a.id, "user", "My file uses semicolons. Does that still work?")
    a2 = store.add_message(chat.id, q2.id, "assistant", FOLLOW_UP, model="gemma3:270m")
    store.update_message(
        a2.id,
        stats={**stats, "eval_count": 74, "prompt_tokens": 262, "tokens_per_second": 44.1},
    )
    store.close()


def write_tool_servers() -> None:
    """The weather server (tests/ui/mcp_weather.py) in the app's mcp.json."""
    from hearth.agent.config import default_config_path

    path = default_config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    server = {"command": sys.executable, "args": [str(REPO / "tests/ui/mcp_weather.py")]}
    path.write_text(json.dumps({"mcpServers": {"weather": server}}), encoding="utf-8")


def hold_first_turn_to_a_call() -> None:
    """The tiny model's first turn is held (Ollama's `format`, a JSON schema) to the call;
    every turn is greedy. The app's own turn reader is wrapped; nothing else changes."""
    from hearth.ui.controllers import model_turn

    original = model_turn.ModelTurn.run

    def run(self, body, on_piece):  # type: ignore[no-untyped-def]
        options = {**body.get("options", {}), "temperature": 0, "num_predict": 40}
        body = {**body, "options": options}
        if body["messages"][-1]["role"] == "user":
            body["format"] = CALL_SCHEMA
        return original(self, body, on_piece)

    model_turn.ModelTurn.run = run  # type: ignore[method-assign]


def shoot_tools(h, spin, out: Path) -> None:  # type: ignore[no-untyped-def]
    """A tool round trip on the default model with a template that offers tools."""
    import httpx

    sys.path.insert(0, str(REPO / "tests" / "server"))
    from live_models import MODEL, TOOLS_TEMPLATE

    body = {"model": TOOLS_MODEL, "from": MODEL, "template": TOOLS_TEMPLATE, "stream": False}
    headers = {"Authorization": f"Bearer {h.client.token}"}
    created = httpx.post(h.client.base_url + "/api/create", json=body, headers=headers, timeout=300)
    created.raise_for_status()
    h.models.refresh()
    spin(30, lambda: (info := h.models.info(TOOLS_MODEL)) is not None and info.details_loaded)
    hold_first_turn_to_a_call()
    offer = getattr(h.window, "first_model_offer", None)
    if offer is not None:
        offer.later_btn.click()  # the first-run offer of a chat model: "Not now"
    h.chat.new_chat(TOOLS_MODEL)
    h.chat.set_chat_tool("weather", True)
    page = h.window.chat_page
    page.composer.edit.setPlainText(TOOLS_QUESTION)
    page.composer.send_requested.emit(TOOLS_QUESTION)
    spin(180, lambda: page.transcript.approval is not None or not h.chat.busy)
    if page.transcript.approval is None:
        raise SystemExit("the model did not call the tool")
    spin(0.5)
    page.transcript.approval.allow_btn.click()  # as the user would
    spin(300, lambda: not h.chat.busy)
    tool = next(w for w in page.transcript.widgets if w.item.role == "tool")
    tool.tool_view.toggle.setChecked(True)  # the call opened: its arguments and result
    spin(1.0)
    page.transcript.verticalScrollBar().setValue(page.transcript.widgets[0].y())
    spin(1.0)
    h.window.grab().save(str(out / "tools.png"))
    print("wrote", out / "tools.png")


COMPARE_MODEL = "llama3.2:1b"  # named as a second model a user would have installed
COMPARE_QUESTION = "What should I pack for a weekend of hiking in the mountains?"
COMPARE_LEFT = """For two days in the mountains, pack in layers:

- **Clothing**: a waterproof jacket, a warm fleece, quick-drying shirts, spare socks.
- **Footwear**: broken-in hiking boots with good grip.
- **Navigation**: a paper map and compass, even if you carry a phone.
- **Food and water**: 2 litres of water a day, snacks that keep, a simple stove.
- **Safety**: a first-aid kit, a head torch, a whistle and sun cream.

Check the forecast the evening before you set off."""
COMPARE_RIGHT = """Keep the pack light but ready for bad weather:

1. Rain jacket and a warm hat, because mountain weather turns fast.
2. Sturdy boots and two pairs of wool socks.
3. Water, lunch and high-energy snacks.
4. Map, phone and a small power bank.
5. A basic first-aid kit.

Tell someone your route and when you expect to be back."""


def seed_compare_chat(store, when: float) -> None:
    """A question answered side by side by two models (Compare), the chat going on with the
    left one; sample text and figures."""
    chat = store.create_chat("gemma3:270m")
    store.set_auto_title(chat.id, "Packing for a mountain weekend")
    q = store.add_message(chat.id, None, "user", COMPARE_QUESTION)
    base = {"prompt_eval_count": 24, "prompt_tokens": 24, "done_reason": "stop"}
    for column, (model, text, speed, first, count) in enumerate(
        (
            ("gemma3:270m", COMPARE_LEFT, 44.6, 0.28, 112),
            (COMPARE_MODEL, COMPARE_RIGHT, 17.9, 0.74, 86),
        ),
        start=1,
    ):
        a = store.add_message(chat.id, q.id, "assistant", text, model=model, compare=column)
        stats = {**base, "eval_count": count, "tokens_per_second": speed, "ttft": first}
        store.update_message(a.id, stats=stats)
        if column == 1:
            left = a.id
    store.select(chat.id, left)
    store._conn.execute("UPDATE chats SET updated_at=? WHERE id=?", (when, chat.id))


def shoot_compare(h, spin, out: Path) -> None:  # type: ignore[no-untyped-def]
    """The comparison: both replies side by side with their figures, the left one chosen."""
    offer = getattr(h.window, "first_model_offer", None)
    if offer is not None:
        offer.later_btn.click()  # the first-run offer of a chat model: "Not now"
    compared = next(c for c in h.store.chats() if c.title == "Packing for a mountain weekend")
    h.chat.open_chat(compared.id)
    h.window.chat_page.composer.edit.setPlainText("Which of these can I leave out if it is sunny")
    spin(1.0)
    h.window.chat_page.transcript.verticalScrollBar().setValue(0)
    spin(1.0)
    h.window.grab().save(str(out / "compare.png"))
    print("wrote", out / "compare.png")


def shoot(out: Path, only: str = "") -> None:
    from PySide6.QtCore import QEvent, QEventLoop
    from PySide6.QtWidgets import QApplication

    from hearth.app_settings import AppSettings, new_api_key
    from hearth.history.chat_store import make_title
    from hearth.ui.app import HearthApp
    from hearth.ui.views.main_window import CHAT_PAGE, MODELS_PAGE, SETTINGS_PAGE

    app = QApplication(["hearth"])
    app.setApplicationName("Hearth")
    h = HearthApp([], settings=AppSettings(theme="light"))
    h.start()
    h.window.resize(1320, 900)

    def spin(seconds: float, until=lambda: False) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end and not until():
            app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
            # deleteLater() waits for an event loop; processEvents alone never runs it
            app.sendPostedEvents(None, QEvent.Type.DeferredDelete)

    spin(180, lambda: h.service.state in ("ready", "failed"))
    if h.service.state != "ready":
        raise SystemExit(f"the engine did not start; see {h.service.log_path}")
    spin(30, lambda: h.models.loaded and all(m.details_loaded for m in h.models.model.models()))
    if only in ("tools.png", "compare.png"):
        h.window.show_page(CHAT_PAGE)
        (shoot_tools if only == "tools.png" else shoot_compare)(h, spin, out)
        h.shutdown()
        return
    h.chat.open_chat(h.store.chats()[0].id)
    h.window.chat_page.composer.edit.setPlainText("Can it also write the rows back out, sorted ")

    def grab(name: str) -> None:
        if only and name != only:
            return
        spin(1.0)
        h.window.grab().save(str(out / name))
        print("wrote", out / name)

    def from_the_question() -> None:
        transcript = h.window.chat_page.transcript
        spin(0.5)
        transcript.verticalScrollBar().setValue(transcript.widgets[0].y())

    h.window.show_page(CHAT_PAGE)
    from_the_question()
    grab("main-light.png")
    h.settings_ctrl.set_theme("dark")
    from_the_question()
    grab("main-dark.png")
    h.settings_ctrl.set_theme("light")
    # A chat that outgrew its context: the notice, its summary opened.
    if not only or only == "compaction.png":
        compacted = next(c for c in h.store.chats() if c.title == "Goats, the shed and the clocks")
        h.chat.open_chat(compacted.id)
        h.window.chat_page.composer.edit.clear()
        notice = next(w for w in h.window.chat_page.transcript.widgets if w.item.role == "summary")
        notice.toggle.click()
        spin(0.5)
        h.window.chat_page.transcript.scroll_to_bottom()
        grab("compaction.png")
        if only:
            h.shutdown()
            return
    # A question about a picture, and a second picture waiting in the composer.
    vision = next(c for c in h.store.chats() if c.model == VISION_MODEL)
    h.chat.open_chat(vision.id)
    h.window.chat_page.composer.edit.setPlainText(VISION_FOLLOW_UP)
    h.chat.attach_images([lake_picture(winter=True)])
    from_the_question()
    grab("vision.png")
    h.chat.remove_attachment(0)
    # A question about a long PDF: its chip, the reply's sources with one passage open, and a
    # short document waiting in the composer (sent whole).
    documents = next(c for c in h.store.chats() if c.title == make_title(DOCS_QUESTION))
    h.chat.open_chat(documents.id)
    h.window.chat_page.composer.edit.setPlainText(DOCS_FOLLOW_UP)
    sys.path.insert(0, str(REPO / "tests" / "documents"))
    from make_documents import headed_docx

    h.chat.attach_documents([headed_docx(Path(os.environ["HEARTH_HOME"]) / "field-trial.docx")])
    spin(30, lambda: bool(h.chat.documents.pending))
    reply = h.window.chat_page.transcript.widgets[-1]
    reply.sources.show_passage(0)
    from_the_question()
    grab("documents.png")
    h.chat.documents.clear()
    h.window.show_page(MODELS_PAGE)
    h.window.models_page.select_name("gemma3:270m")
    grab("models.png")
    # "Get models…": the curated list (no network here: nothing is searched or downloaded).
    h.window.models_page.get_models_requested.emit()
    dialog = h.window.get_models_dialog()  # type: ignore[attr-defined]
    spin(1.0)
    if not only or only == "get-models.png":
        dialog.grab().save(str(out / "get-models.png"))
        print("wrote", out / "get-models.png")
    dialog.close()
    # Show the page as it looks with the API exposed, without binding 0.0.0.0 here.
    shown = AppSettings(**{**vars(h.settings), "api_enabled": True, "api_expose": True})
    shown.api_key = new_api_key()
    h.window.show_page(SETTINGS_PAGE)
    h.window.settings_page.show_settings(
        shown,
        h.window.tr(
            "On: listening on every network interface, port 11434. Clients send the header "
            "“Authorization: Bearer <key>”."
        ),
    )
    grab("settings.png")
    if not only:
        h.window.show_page(CHAT_PAGE)
        shoot_tools(h, spin, out)
        shoot_compare(h, spin, out)
    h.shutdown()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=REPO / "docs" / "screenshots")
    p.add_argument("--only", default="", help="make only this picture (e.g. documents.png)")
    args = p.parse_args()
    if not os.environ.get("DISPLAY") and not os.environ.get("HEARTH_IN_XVFB"):
        if shutil.which("xvfb-run") is None:
            raise SystemExit("xvfb-run is missing: apt-get install xvfb")
        env = dict(os.environ, HEARTH_IN_XVFB="1")
        cmd = ["xvfb-run", "-a", "-s", "-screen 0 1600x1000x24 -dpi 96", sys.executable]
        only = ["--only", args.only] if args.only else []
        return subprocess.call([*cmd, __file__, "--out", str(args.out), *only], env=env)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ["QT_QPA_PLATFORM"] = "xcb"
    with tempfile.TemporaryDirectory(prefix="hearth-shots-") as home:
        os.environ["HEARTH_HOME"] = home
        seed_history()
        write_tool_servers()
        shoot(args.out, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
