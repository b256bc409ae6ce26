"""Write a history database with the ChatStore of the checkout it runs in, and a JSON record of
everything that store read back.

    PYTHONPATH=$PWD/.shim .venv/bin/python tests/history/make_history_fixture.py OUT_DIR

writes OUT_DIR/chats.db and OUT_DIR/chats.json. Copied to tests/fixtures/history/ as
chats-schema1.db and chats-schema1.json, they were made with the schema-1 code of commit d0d30df
(the last one before the first migration), so the migration tests open a file written by the code
users had, not one built by hand. Run it again only to make a fixture for a NEW schema (keep the
old files: every old schema must keep opening).

The chats cover what a user's history holds: branches (a regenerated answer, an edited
question) with the current leaf on an older branch, images, stats, thinking, a reply cut off by
a kill (interrupted), a stopped and a failed reply, an auto title, a user's title, a system
prompt and options, an empty chat, non-ASCII text.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import struct
import sys
import zlib
from pathlib import Path
from typing import Any

from hearth.history import ChatStore
from hearth.history.chat_store import make_title
from hearth.history.records import ERROR, STOPPED, STREAMING


def tiny_png(rgb: tuple[int, int, int], size: int = 2) -> bytes:
    """A real PNG of one colour (so a viewer can show the fixture's images)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    row = b"\x00" + bytes(rgb) * size
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * size))
        + chunk(b"IEND", b"")
    )


def _stats(tokens: int) -> dict[str, Any]:
    return {
        "total_duration": 2_000_000_000,
        "load_duration": 1_000_000,
        "prompt_eval_count": 21,
        "prompt_eval_duration": 100_000_000,
        "eval_count": tokens,
        "eval_duration": 1_000_000_000,
        "tokens_per_second": float(tokens),
        "ttft": 0.125,
        "truncated": False,
        "shifted": False,
    }


def write_chats(store: ChatStore) -> None:
    # 1. Branches: a regenerated answer and an edited question; the screen shows the first answer.
    sky = store.create_chat("gemma3:270m", system_prompt="You are terse.")
    store.update_chat(sky.id, options={"temperature": 0.2, "num_ctx": 4096})
    q1 = store.add_message(sky.id, None, "user", "Why is the sky blue?")
    store.set_auto_title(sky.id, make_title(q1.content))
    a1 = store.add_message(sky.id, q1.id, "assistant", model="gemma3:270m")
    store.update_message(
        a1.id,
        content="Rayleigh scattering: short wavelengths scatter more.",
        thinking="The user asks about sky colour. Explain scattering.",
        stats=_stats(11),
    )
    a2 = store.add_message(sky.id, q1.id, "assistant", "Because of *Rayleigh* scattering.")
    store.update_message(a2.id, stats=_stats(6))
    q2 = store.add_message(sky.id, a2.id, "user", "And at sunset?")
    store.add_message(sky.id, q2.id, "assistant", "Longer paths scatter blue away; red remains.")
    q1b = store.add_message(sky.id, None, "user", "Why is the sky blue? Answer in French.")
    store.add_message(sky.id, q1b.id, "assistant", "À cause de la diffusion Rayleigh. 🌅")
    store.select(sky.id, a1.id)

    # 2. Images, a user's own title, a stopped reply.
    photo = store.create_chat("gemma3:4b")
    store.rename_chat(photo.id, "Holiday photos")
    q = store.add_message(
        photo.id,
        None,
        "user",
        "What colours are these?",
        images=[tiny_png((255, 0, 0)), tiny_png((0, 0, 255), size=3)],
    )
    a = store.add_message(photo.id, q.id, "assistant", "Red and", model="gemma3:4b")
    store.update_message(a.id, state=STOPPED, stats={"ttft": 0.5})
    q3 = store.add_message(photo.id, a.id, "user", "", images=[b"\x00\x01binary\xff"])
    store.add_message(photo.id, q3.id, "assistant", "That is not an image I can read.")

    # 3. A failed reply, then a reply cut off by a kill (still "streaming" when the store closed).
    code = store.create_chat("llama3.2:1b")
    q = store.add_message(code.id, None, "user", "Write `hello` in Python\n\nwith a docstring")
    store.set_auto_title(code.id, make_title(q.content))
    bad = store.add_message(code.id, q.id, "assistant", model="llama3.2:1b")
    store.update_message(bad.id, state=ERROR, error="The model stopped: out of memory.")
    cut = store.add_message(code.id, q.id, "assistant", state=STREAMING, model="llama3.2:1b")
    store.update_message(cut.id, content='```python\ndef hello():\n    """Say', thinking="Easy.")

    # 4. An empty chat (created, nothing asked yet).
    store.create_chat("qwen3:0.6b")


def dump(store: ChatStore) -> dict[str, Any]:
    """Everything the store reads back: chats, every message of each tree, each chat's path."""

    def plain(record: Any) -> dict[str, Any]:
        out = dataclasses.asdict(record)
        if "images" in out:
            out["images"] = [base64.b64encode(b).decode() for b in out["images"]]
        return out

    chats = []
    for chat in store.chats():
        ids = [
            r[0]
            for r in store._conn.execute(
                "SELECT id FROM messages WHERE chat_id=? ORDER BY id", (chat.id,)
            )
        ]
        messages = [store.message(i) for i in ids]
        chats.append(
            {
                "chat": plain(chat),
                "messages": [plain(m) for m in messages if m is not None],
                "path": [[m.id, m.version, m.versions] for m in store.path(chat.id)],
            }
        )
    return {"schema": store._conn.execute("PRAGMA user_version").fetchone()[0], "chats": chats}


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    db = out_dir / "chats.db"
    for stale in out_dir.glob("chats.db*"):
        stale.unlink()
    store = ChatStore(db)
    write_chats(store)
    store.close()
    store = ChatStore(db)  # reopening marks the cut-off reply "interrupted", as the app does
    assert store.recovered == 1
    record = dump(store)
    store.close()  # the last connection's close checkpoints the WAL: one self-contained file
    (out_dir / "chats.json").write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
