"""`hearth chats list|export|import`: the chat history from the terminal, without the service.

Export writes JSON (everything, importable: history.export) or Markdown (each chat's branch on
screen, for reading) to a file or stdout; import adds a JSON export's chats under new ids and
never changes the chats already there.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TextIO

from ..history import ChatStore
from ..history.export import ExportError, import_file
from ..history.export_files import FORMATS, export_text, format_for, write_export
from ..history.migrations import SchemaError

__all__ = ["add_chats", "chats_command"]


def add_chats(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chats = sub.add_parser("chats", help="list, export or import the app's chats")
    verbs = chats.add_subparsers(dest="chats_command", required=True)
    verbs.add_parser("list", aliases=["ls"], help="list chats: id, last used, title")
    export = verbs.add_parser(
        "export", help="write chats as JSON (all of them, importable) or Markdown (for reading)"
    )
    export.add_argument(
        "--chat", type=int, action="append", metavar="ID", help="only this chat (repeatable)"
    )
    export.add_argument(
        "--format",
        choices=FORMATS,
        help="json (default) or markdown; a FILE ending in .md means markdown",
    )
    export.add_argument("-o", "--output", metavar="FILE", help="write to FILE (default: stdout)")
    imp = verbs.add_parser("import", help="add the chats of a JSON export (never overwrites)")
    imp.add_argument("file", metavar="FILE")


def chats_command(
    args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    """Run one `hearth chats` verb; every failure is one sentence on stderr and status 1."""
    try:
        store = ChatStore(recover=False)  # the app may be streaming a reply right now
    except (SchemaError, OSError) as e:
        err.write(f"hearth: {e}\n")
        return 1
    try:
        if args.chats_command in ("list", "ls"):
            for chat in store.chats():
                when = time.strftime("%Y-%m-%d %H:%M", time.localtime(chat.updated_at))
                out.write(f"{chat.id:>6}  {when}  {chat.title or 'New chat'}\n")
            return 0
        if args.chats_command == "export":
            if not args.output:
                out.write(export_text(store, args.chat, format_for(None, args.format)))
                return 0
            path = Path(args.output).expanduser()
            n = write_export(store, args.chat, path, args.format)
            err.write(f"exported {n} chat{'s' if n != 1 else ''} to {path}\n")
            return 0
        path = Path(args.file).expanduser()
        ids = import_file(store, path)
        titles = [(c.title or "New chat") for c in map(store.chat, ids) if c is not None]
        out.write(f"imported {len(ids)} chat{'s' if len(ids) != 1 else ''} from {path}")
        out.write((": " + "; ".join(titles) if titles else "") + "\n")
        return 0
    except ExportError as e:
        err.write(f"hearth: {e}\n")
        return 1
    except OSError as e:
        where = f" {e.filename}" if e.filename else ""
        err.write(f"hearth: cannot use{where}: {e.strerror or e}\n")
        return 1
    finally:
        store.close()
