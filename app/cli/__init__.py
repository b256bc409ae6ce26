"""The `hearth` command: serve, run, list, show, ps, rm, cp, create, stop, pull, import-ollama,
install-desktop, chats (and the internal `runner`). Everything but `serve`, `runner`,
`import-ollama`, `install-desktop` and `chats` (the history file) is a client of the service;
`hearth run` starts a private one when none is running."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

from .. import __version__
from ..agent.specs import DEFAULT_CALL_TIMEOUT, DEFAULT_MAX_STEPS
from ..default_model import DEFAULT_MODEL
from ..options import run_flags
from ..runner.protocol import RunnerOptions
from .chats import add_chats
from .desktop import add_install_desktop, display_libraries_sentence, install_desktop_command

__all__ = ["main", "build_parser"]


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


def _add_run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser("run", help="chat with a model in the terminal")
    run.add_argument("model", nargs="?", default=DEFAULT_MODEL, help="model name or .gguf path")
    run.add_argument("prompt", nargs="?", help="reply once to this prompt and exit")
    run.add_argument("--raw", action="store_true", help="no chat template; BOS per the file")
    # Unset options are left to the model's parameters and the defaults (shown; hearth.options).
    for f in run_flags():
        if f.kind is bool:
            run.add_argument(f.flag, action="store_true", default=None, help=f.help)
        else:
            run.add_argument(f.flag, type=f.kind, default=None, help=f.help)
    run.add_argument("--verbose", action="store_true", help="print prompt and generation speed")
    run.add_argument("--keep-alive", default=None, help="how long the model stays loaded")
    run.add_argument(
        "--mmproj", default=None, help="vision projector .gguf (default: mmproj*.gguf beside)"
    )
    run.add_argument(
        "--format", default=None, help='"json", or a JSON schema (inline or a .json file)'
    )
    run.add_argument(
        "--tools", metavar="CONFIG.json", default=None,
        help='MCP servers the model may use ({"mcpServers": ...}, as Claude Desktop\'s)',
    )  # fmt: skip
    run.add_argument("--yes", action="store_true", help="allow every tool call without asking")
    run.add_argument(
        "--max-steps", type=_positive, default=DEFAULT_MAX_STEPS,
        help=f"model turns with tool calls per answer (default {DEFAULT_MAX_STEPS})",
    )  # fmt: skip
    run.add_argument(
        "--tool-timeout", type=_positive_float, default=DEFAULT_CALL_TIMEOUT,
        help=f"seconds one tool call may take (default {DEFAULT_CALL_TIMEOUT:g})",
    )  # fmt: skip
    run.add_argument(
        "--attach",
        action="append",
        default=[],
        metavar="FILE",
        help="a document (PDF, DOCX, text, Markdown, HTML, CSV, code) or an image to ask about "
        "(repeatable)",
    )
    run.add_argument(
        "--embed-model",
        default=None,
        help="embedding model for searching long documents (default: the first installed)",
    )


def _add_runner(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    runner = sub.add_parser("runner", help="(internal) serve one model for `hearth serve`")
    runner.add_argument("--model", required=True, help="path to the .gguf file")
    RunnerOptions.add_arguments(runner)  # its fields, with their defaults and help


def _add_models(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("serve", help="start the Ollama/OpenAI-compatible service")
    serve.add_argument(
        "--host",
        default=None,
        help="address[:port] (default HEARTH_HOST or "
        "127.0.0.1:11434); beyond loopback HEARTH_API_KEY is required",
    )
    serve.add_argument("--port", type=int, default=None, help="port (0: any free port)")
    serve.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    serve.add_argument(
        "--exit-on-stdin-close",
        action="store_true",
        help="stop when stdin closes (for a parent process)",
    )
    sub.add_parser("list", aliases=["ls"], help="list models")
    show = sub.add_parser("show", help="show a model's details")
    show.add_argument("model")
    for flag in ("modelfile", "template", "parameters", "system", "license"):
        show.add_argument(f"--{flag}", action="store_true", help=f"print only the {flag}")
    sub.add_parser("ps", help="list loaded models")
    worker = sub.add_parser(
        "worker",
        help="serve this machine's devices to another Hearth over ggml RPC (no authentication)",
    )
    worker.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback)")
    worker.add_argument("--port", type=int, default=50052, help="TCP port (llama.cpp's default)")
    worker.add_argument("--threads", type=int, default=None, help="CPU threads (physical cores)")
    worker.add_argument("--cache-dir", default=None, help="keep received tensors here by hash")
    devices = sub.add_parser("devices", help="list the devices models can run on (CPU, GPUs)")
    devices.add_argument("--json", action="store_true", help="print the service's JSON report")
    rm = sub.add_parser("rm", help="delete models")
    rm.add_argument("models", nargs="+")
    cp = sub.add_parser("cp", help="copy a model under a new name")
    cp.add_argument("source")
    cp.add_argument("destination")
    create = sub.add_parser(
        "create",
        help="create a model from a .gguf file, a Hugging Face folder or a Modelfile",
    )
    create.add_argument("model", help="name for the new model (name[:tag])")
    create.add_argument(
        "-f", "--file", help="a .gguf file, a Hugging Face safetensors folder or a Modelfile"
    )
    create.add_argument(
        "--quantize",
        "-q",
        help="when converting a Hugging Face folder: f16 (default), f32, q8_0 or q4_K_M",
    )
    create.add_argument("--from", dest="source", help="an existing model to start from")
    create.add_argument("--mmproj", help="its vision projector .gguf (llama.cpp's mmproj file)")
    create.add_argument(
        "--link",
        action="store_true",
        help="hard-link the .gguf into the store instead of copying it",
    )
    create.add_argument("--template", help="a file holding a Jinja chat template")
    create.add_argument("--system", help="the default system prompt")
    create.add_argument(
        "--parameter",
        "-p",
        action="append",
        metavar="KEY=VALUE",
        help="a default option, e.g. temperature=0.2 (repeatable)",
    )
    stop = sub.add_parser("stop", help="unload a model")
    stop.add_argument("model")
    pull = sub.add_parser(
        "pull", help="download a model: hf.co/OWNER/REPO[:QUANT] or NAME[:TAG] (Ollama's library)"
    )
    pull.add_argument("model")
    pull.add_argument("--insecure", action="store_true", help="allow a registry on plain http")
    imp = sub.add_parser("import-ollama", help="import the models of an Ollama installation")
    imp.add_argument(
        "--source",
        help="Ollama's models folder (default: OLLAMA_MODELS, "
        "~/.ollama/models, /usr/share/ollama/.ollama/models)",
    )
    imp.add_argument("--copy", action="store_true", help="copy files instead of linking them")
    imp.add_argument("--all", action="store_true", help="also models no plugin can run")
    imp.add_argument("--force", action="store_true", help="replace models already imported")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hearth", description="Local LLMs, on your machine.")
    p.add_argument("--version", action="version", version=f"hearth {__version__}")
    sub = p.add_subparsers(dest="command")
    _add_run(sub)
    _add_models(sub)
    _add_runner(sub)
    add_install_desktop(sub)
    add_chats(sub)
    return p


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse `argv`; `run`'s own arguments may come in any order (`run MODEL --raw "PROMPT"`:
    argparse alone stops at the first option when positionals are optional)."""
    if argv and argv[0] == "run":
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                run: argparse.ArgumentParser = action.choices["run"]
                args = argparse.Namespace(command="run")
                run.parse_intermixed_args(argv[1:], args)
                return args
    return parser.parse_args(argv)


def _gui_available() -> bool:
    if sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
        or os.environ.get("QT_QPA_PLATFORM")
    ):  # fmt: skip
        return False
    return importlib.util.find_spec("PySide6") is not None


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    gui_args = not argv or argv[0].split("=")[0] in ("--server", "--api-key", "--smoke-test")
    if gui_args and _gui_available():
        # The bare command (or only the window's own options) opens the desktop app, unless a
        # system library Qt needs is missing: then a sentence naming the package, not Qt's abort.
        missing = display_libraries_sentence()
        if missing:
            print(f"hearth: {missing}", file=sys.stderr)
            sys.exit(1)
        from ..ui.app import main as gui_main

        sys.exit(gui_main(argv))
    parser = build_parser()
    if not argv:  # no display: chat with the default model in the terminal instead
        argv = ["run"]
    args = _parse(parser, argv)
    if args.command == "run":
        from .terminal_chat import run

        sys.exit(run(args))
    if args.command == "runner":
        from ..runner.main import main as runner_main

        sys.exit(runner_main(args))
    if args.command == "install-desktop":
        sys.exit(install_desktop_command(args))
    if args.command == "chats":
        from .chats import chats_command

        sys.exit(chats_command(args))
    if args.command == "serve":
        from ..server.serve import serve

        sys.exit(serve(args))
    if args.command == "worker":
        from .worker import run_worker

        sys.exit(run_worker(args))
    from .commands import run_command

    sys.exit(run_command(args))
