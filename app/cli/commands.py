"""The CLI's model commands over the service: list, show, ps, devices, rm, cp, create, stop, pull,
plus import-ollama (which edits the store directly; a running service sees the result).

Each returns an exit status; errors are one `hearth: ...` line on stderr.
"""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

from ..client import ServiceError
from .connection import Connection, connect
from .modelfile import ModelfileError, parameter_value, parse_modelfile

__all__ = ["COMMANDS", "human_bytes", "since"]


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit in ("B", "KB") else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


def since(iso: str, future: bool = False) -> str:
    try:
        t = datetime.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return iso
    delta = (t - datetime.datetime.now(datetime.UTC)).total_seconds()
    seconds = abs(delta)
    if seconds > 100 * 365 * 86400:
        return "Forever"
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        if seconds >= size or unit == "second":
            n = int(seconds // size)
            text = f"{n} {unit}{'s' if n != 1 else ''}"
            return f"{text} from now" if delta > 0 else f"{text} ago"
    return iso


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write("    ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


def cmd_list(args: Any, conn: Connection, out: TextIO) -> int:
    rows = [["NAME", "ID", "SIZE", "MODIFIED"]]
    for m in conn.client.models():
        rows.append([m["name"], m["digest"][:12], human_bytes(m["size"]), since(m["modified_at"])])
    _table(rows, out)
    return 0


def processor_text(size: int, size_vram: int) -> str:
    """Where a loaded model's bytes are, as `ollama ps` writes it: "100% CPU", "100% GPU",
    "48%/52% CPU/GPU" (or "Unknown" for sizes that do not add up)."""
    if size_vram == 0:
        return "100% CPU"
    if size_vram == size:
        return "100% GPU"
    if size_vram > size or size <= 0:
        return "Unknown"
    cpu = round((size - size_vram) / size * 100)
    return f"{cpu}%/{100 - cpu}% CPU/GPU"


def cmd_ps(args: Any, conn: Connection, out: TextIO) -> int:
    rows = [["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL"]]
    for m in conn.client.ps():
        proc = processor_text(int(m.get("size") or 0), int(m.get("size_vram") or 0))
        until = since(m["expires_at"], future=True)
        rows.append(
            [
                m["name"],
                m["digest"][:12],
                human_bytes(m["size"]),
                proc,
                str(m.get("context_length", "")),
                until,
            ]
        )
    _table(rows, out)
    return 0


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def cmd_devices(args: Any, conn: Connection, out: TextIO) -> int:
    report = conn.client.devices()
    if args.json:
        out.write(json.dumps(report, indent=2) + "\n")
        return 0
    rows = [["ID", "KIND", "NAME", "FREE", "TOTAL", "LIBRARY", "DRIVER", "COMPUTE"]]
    for d in report["devices"]:
        nv = d.get("nvidia") or {}
        rows.append(
            [d["id"], d["kind"], d["name"], _gib(d["free"]), _gib(d["total"]), d["library"],
             nv.get("driver", ""), nv.get("compute", "")]
        )  # fmt: skip
    _table(rows, out)
    if report.get("nvidia_error"):
        out.write(f"no NVIDIA GPU ({report['nvidia_error']})\n")
    used = {(d.get("nvidia") or {}).get("uuid") for d in report["devices"]}
    for gpu in report.get("nvidia", []):
        if gpu["uuid"] not in used:
            out.write(
                f"{gpu['name']} (driver {gpu['driver']}, compute {gpu['compute']}, "
                f"{_gib(gpu['free'])} free of {_gib(gpu['total'])}) is not usable: "
                "this ggml build has no CUDA backend for it\n"
            )
    return 0


def cmd_show(args: Any, conn: Connection, out: TextIO) -> int:
    info = conn.client.show(args.model)
    for flag in ("modelfile", "template", "parameters", "system", "license"):
        if getattr(args, flag, False):
            out.write(str(info.get(flag, "")) + "\n")
            return 0
    d, mi = info.get("details", {}), info.get("model_info", {})
    arch = mi.get("general.architecture", d.get("family", ""))
    rows = [
        ("architecture", arch),
        ("parameters", d.get("parameter_size", "")),
        ("context length", mi.get(f"{arch}.context_length", "")),
        ("embedding length", mi.get(f"{arch}.embedding_length", "")),
        ("quantization", d.get("quantization_level", "")),
    ]
    out.write("  Model\n")
    for k, v in rows:
        out.write(f"    {k:<20}{v}\n")
    out.write("\n  Capabilities\n")
    for cap in info.get("capabilities", []):
        out.write(f"    {cap}\n")
    if info.get("parameters"):
        out.write("\n  Parameters\n")
        for line in str(info["parameters"]).splitlines():
            out.write(f"    {line}\n")
    hearth = info.get("hearth", {})
    if hearth:
        out.write("\n  Hearth\n")
        est = human_bytes(hearth.get("estimated_memory", 0))
        out.write(f"    {'memory estimate':<20}{est} (num_ctx {hearth.get('num_ctx')})\n")
        if hearth.get("problem"):
            out.write(f"    {'cannot run':<20}{hearth['problem']}\n")
    return 0


def cmd_rm(args: Any, conn: Connection, out: TextIO) -> int:
    for name in args.models:
        conn.client.delete(name)
        out.write(f"deleted '{name}'\n")
    return 0


def cmd_cp(args: Any, conn: Connection, out: TextIO) -> int:
    conn.client.copy(args.source, args.destination)
    out.write(f"copied '{args.source}' to '{args.destination}'\n")
    return 0


def cmd_stop(args: Any, conn: Connection, out: TextIO) -> int:
    conn.client.stop(args.model)
    return 0


def cmd_create(args: Any, conn: Connection, out: TextIO, err: TextIO = sys.stderr) -> int:
    body: dict[str, Any] = {}
    if args.file:
        path = Path(args.file).expanduser().resolve()
        local = path.suffix.lower() == ".gguf" or path.is_dir()  # a model file or HF folder
        body = {"from": str(path)} if local else parse_modelfile(path)
    if args.source:
        body["from"] = args.source
    if "from" not in body:
        raise ModelfileError(
            "say what to create from: -f FILE.gguf, -f FOLDER (Hugging Face), -f Modelfile "
            "or --from MODEL"
        )
    if args.template:
        body["template"] = Path(args.template).read_text()
    if args.system is not None:
        body["system"] = args.system
    for item in args.parameter or []:
        key, _, value = item.partition("=")
        if key == "stop":
            body.setdefault("parameters", {}).setdefault("stop", []).append(value)
        else:
            body.setdefault("parameters", {})[key] = parameter_value(value)
    if getattr(args, "mmproj", None):
        body["projector"] = str(Path(args.mmproj).expanduser().resolve())
    if getattr(args, "quantize", None):
        body["quantize"] = args.quantize
    source_path = Path(str(body["from"]))
    folder = source_path.is_absolute() and source_path.is_dir()
    local = str(body["from"]).endswith(".gguf") and source_path.is_absolute()
    host = urlsplit(conn.client.base_url).hostname
    if folder and host not in ("127.0.0.1", "localhost", "::1"):
        # The service is elsewhere: upload the folder's files, as the ollama client does.
        body.pop("from")
        body["files"] = {}
        for source in sorted(p for p in source_path.iterdir() if p.is_file()):
            err.write(f"uploading {source.name}\n")
            body["files"][source.name] = conn.client.upload_blob(source)
    elif local and host not in ("127.0.0.1", "localhost", "::1"):
        # The service is elsewhere: send the files themselves, as the ollama client does.
        sources = [Path(body.pop("from"))]
        if body.get("projector"):
            sources.append(Path(body.pop("projector")))
        body["files"] = {}
        for source in sources:
            err.write(f"uploading {source.name}\n")
            body["files"][source.name] = conn.client.upload_blob(source)
    body.update(model=args.model, link=bool(args.link))
    show_progress(conn.client.create(body), err, lambda text: text.startswith("converting"))
    return 0


def show_progress(
    statuses: Iterable[dict[str, Any]], err: TextIO, every_percent: Callable[[str], bool]
) -> None:
    """Progress lines (`status`, `total`, `completed`) on stderr: one updated line on a
    terminal; otherwise a line per new status (and per percent where `every_percent`)."""
    last = ""
    for status in statuses:
        text = status.get("status", "")
        if status.get("total"):
            pct = 100 * status.get("completed", 0) // max(1, status["total"])
            text = f"{text} {pct}%"
        if err.isatty():
            err.write("\r\033[K" + text)
        elif text != last and ("%" not in text or every_percent(text)):
            err.write(text + "\n")
        last = text
    if err.isatty():
        err.write("\n")


def cmd_pull(args: Any, conn: Connection, out: TextIO, err: TextIO = sys.stderr) -> int:
    body = {"model": args.model, "insecure": bool(getattr(args, "insecure", False))}
    show_progress(conn.client.stream("/api/pull", body), err, lambda t: t.endswith(" 100%"))
    out.write(f"pulled {args.model}\n")
    return 0


def cmd_import_ollama(args: Any, out: TextIO) -> int:
    from ..paths import models_dir
    from ..plugins.registry import default_registry
    from ..server.store.importer import import_ollama
    from ..server.store.model_store import ModelStore

    source = Path(args.source).expanduser() if args.source else None
    results = import_ollama(
        ModelStore(models_dir()), default_registry(), source, args.copy, args.all, args.force
    )
    for r in results:
        mark = "imported" if r.imported else "skipped "
        out.write(f"{mark}  {r.name}" + (f"  ({r.note})" if r.note else "") + "\n")
    done = sum(r.imported for r in results)
    out.write(f"{done} of {len(results)} models imported\n")
    return 0


# command -> (function, whether a private service may be started for it)
COMMANDS: dict[str, tuple[Any, bool]] = {
    "list": (cmd_list, True),
    "ls": (cmd_list, True),
    "show": (cmd_show, True),
    "ps": (cmd_ps, False),
    "devices": (cmd_devices, True),
    "rm": (cmd_rm, True),
    "cp": (cmd_cp, True),
    "create": (cmd_create, True),
    "stop": (cmd_stop, False),
    "pull": (cmd_pull, True),
}


def run_command(args: Any, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Dispatch `args.command`; every failure is one sentence on stderr and status 1."""
    try:
        if args.command == "import-ollama":
            return cmd_import_ollama(args, out)
        func, private = COMMANDS[args.command]
        with connect(start_private=private) as conn:
            return int(func(args, conn, out))
    except (ServiceError, ModelfileError, FileNotFoundError, OSError) as e:
        err.write(f"hearth: {e}\n")
        return 1
