"""The `hearth` command: `hearth run`, and (as they land) serve, list, show, ..."""

from __future__ import annotations

import argparse
import sys

from .default_model import DEFAULT_MODEL

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hearth", description="Local LLMs, on your machine.")
    sub = p.add_subparsers(dest="command")

    run = sub.add_parser("run", help="chat with a model in the terminal")
    run.add_argument("model", nargs="?", default=DEFAULT_MODEL, help="model name or .gguf path")
    run.add_argument("prompt", nargs="?", help="reply once to this prompt and exit")
    run.add_argument("--raw", action="store_true", help="no chat template; BOS per the file")
    run.add_argument("--num-predict", type=int, default=-1, help="max tokens to generate")
    run.add_argument("--temperature", type=float, default=0.8)
    run.add_argument("--top-k", type=int, default=40)
    run.add_argument("--top-p", type=float, default=0.9)
    run.add_argument("--min-p", type=float, default=0.0)
    run.add_argument("--repeat-penalty", type=float, default=1.1, help="1 turns it off")
    run.add_argument("--seed", type=int, default=-1, help="same seed, same text (-1: random)")
    run.add_argument("--num-ctx", type=int, default=4096, help="context length in tokens")
    run.add_argument("--num-batch", type=int, default=512, help="prompt tokens per pass")
    run.add_argument("--threads", type=int, default=None, help="CPU threads (physical cores)")
    run.add_argument("--flash-attention", action="store_true", help="use flash attention")
    run.add_argument("--verbose", action="store_true", help="print prompt and generation speed")
    return p


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        # No GUI yet: the bare command chats with the default model.
        args = parser.parse_args(["run", *(argv or [])])
    if args.command == "run":
        from .terminal_chat import run

        sys.exit(run(args))
    parser.error(f"unknown command {args.command}")
