"""`hearth run MODEL [PROMPT]`: chat with a model in the terminal, like `ollama run`.

With PROMPT, print one streamed reply and exit; without it, an interactive chat whose
follow-up turns reuse the cached conversation. `--raw` sends the text without a chat template.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

from .default_model import DEFAULT_MODEL, default_model_path
from .engine.gguf import GGUFError
from .engine.ml.api import OutOfMemoryError
from .engine.model import LoadedModel, ModelLoadError, load_model
from .engine.runner.forward import ForwardEngine
from .engine.runner.session import GenerateOptions, Session
from .engine.sampling import SamplingOptions
from .server.templates import TemplateError, render_chat

__all__ = ["resolve_model", "chat_template", "encode_prompt", "run"]

_FALLBACK_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def resolve_model(name: str) -> Path:
    """A model name or a path to a .gguf file -> the file to open."""
    if name in (DEFAULT_MODEL, "gemma3:270m-q4_K_M", "default"):
        return default_model_path()
    path = Path(name).expanduser()
    if path.is_file():
        return path
    raise FileNotFoundError(
        f"model '{name}' not found: give a path to a .gguf file or '{DEFAULT_MODEL}'"
    )


def chat_template(loaded: LoadedModel) -> str:
    meta = loaded.file.metadata
    return (
        meta.string("tokenizer.chat_template")
        or getattr(loaded.model, "default_chat_template", None)
        or _FALLBACK_TEMPLATE
    )


def encode_prompt(loaded: LoadedModel, text: str) -> list[int]:
    """Tokenize a rendered prompt: special tokens parsed, BOS added per the file, and a BOS
    that the template already wrote is not doubled."""
    tok = loaded.tokenizer
    ids = tok.encode(text, add_special=True, parse_special=True)
    if tok.bos_id is not None and len(ids) >= 2 and ids[0] == ids[1] == tok.bos_id:
        ids = ids[1:]
    return ids


def _special_text(loaded: LoadedModel, token_id: int | None) -> str:
    if token_id is None:
        return ""
    return loaded.tokenizer.token_bytes(token_id).decode("utf-8", "replace")


def _render(loaded: LoadedModel, messages: list[dict[str, Any]]) -> str:
    tok = loaded.tokenizer
    eos = next(iter(sorted(tok.eos_ids)), None)
    return render_chat(
        chat_template(loaded),
        messages,
        add_generation_prompt=True,
        bos_token=_special_text(loaded, tok.bos_id),
        eos_token=_special_text(loaded, eos),
    )


def _progress(err: TextIO) -> Any:
    last = [-1]

    def report(fraction: float) -> None:
        pct = int(fraction * 100)
        if pct != last[0] and err.isatty():
            err.write(f"\rloading model {pct:3d}%")
            err.flush()
            last[0] = pct

    return report


def run(args: Any, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    try:
        path = resolve_model(args.model)
        loaded = load_model(
            path,
            progress=_progress(err),
            num_threads=args.threads,
            flash_attention=args.flash_attention,
        )
    except (FileNotFoundError, GGUFError, ModelLoadError) as e:
        err.write(f"\nhearth: {e}\n")
        return 1
    if err.isatty():
        err.write("\r" + " " * 20 + "\r")
    try:
        engine = ForwardEngine(loaded, num_ctx=args.num_ctx, num_batch=args.num_batch)
    except OutOfMemoryError as e:
        err.write(f"hearth: {e}\n")
        loaded.close()
        return 1
    session = Session(engine, loaded.tokenizer)
    opts = GenerateOptions(
        num_predict=args.num_predict,
        sampling=SamplingOptions(
            temperature=args.temperature,
            seed=args.seed,
            top_k=args.top_k,
            top_p=args.top_p,
            min_p=args.min_p,
            repeat_penalty=args.repeat_penalty,
        ),
    )
    try:
        if args.prompt is not None:
            return _one_shot(args, loaded, session, opts, out, err)
        return _interactive(args, loaded, session, opts, out, err)
    finally:
        engine.close()
        loaded.close()


def _reply(session: Session, ids: list[int], opts: GenerateOptions, out: TextIO) -> str:
    parts = []
    for piece in session.generate(ids, opts):
        parts.append(piece)
        out.write(piece)
        out.flush()
    return "".join(parts)


def _report(session: Session, err: TextIO) -> None:
    s = session.stats
    p_rate = s.prompt_evaluated / s.prompt_seconds if s.prompt_seconds else 0.0
    e_rate = s.eval_tokens / s.eval_seconds if s.eval_seconds else 0.0
    err.write(
        f"prompt: {s.prompt_tokens} tokens ({s.prompt_cached} from cache), "
        f"{s.prompt_evaluated} evaluated in {s.prompt_seconds:.2f}s ({p_rate:.1f} tok/s)\n"
        f"generation: {s.eval_tokens} tokens in {s.eval_seconds:.2f}s ({e_rate:.1f} tok/s), "
        f"done: {s.done_reason}\n"
    )


def _one_shot(args: Any, loaded: LoadedModel, session: Session, opts: GenerateOptions,
              out: TextIO, err: TextIO) -> int:  # fmt: skip
    try:
        if args.raw:
            ids = loaded.tokenizer.encode(args.prompt, add_special=True, parse_special=False)
        else:
            ids = encode_prompt(loaded, _render(loaded, [{"role": "user", "content": args.prompt}]))
        _reply(session, ids, opts, out)
    except (TemplateError, ValueError) as e:
        err.write(f"\nhearth: {e}\n")
        return 1
    out.write("\n")
    if args.verbose:
        _report(session, err)
    return 0


def _interactive(args: Any, loaded: LoadedModel, session: Session, opts: GenerateOptions,
                 out: TextIO, err: TextIO) -> int:  # fmt: skip
    messages: list[dict[str, Any]] = []
    if sys.stdin.isatty():
        err.write(f"Chatting with {Path(loaded.path).name}. Type /bye (or Ctrl-D) to leave.\n")
    while True:
        if sys.stdin.isatty():
            out.write(">>> ")
            out.flush()
        line = sys.stdin.readline()
        if not line:
            break
        text = line.rstrip("\n")
        if text.strip() in ("/bye", "/exit", "/quit"):
            break
        if not text.strip():
            continue
        messages.append({"role": "user", "content": text})
        try:
            if args.raw:
                ids = loaded.tokenizer.encode(text, add_special=True, parse_special=False)
            else:
                ids = encode_prompt(loaded, _render(loaded, messages))
            reply = _reply(session, ids, opts, out)
        except (TemplateError, ValueError) as e:
            err.write(f"\nhearth: {e}\n")
            messages.pop()
            continue
        except KeyboardInterrupt:
            out.write("\n")
            messages.pop()
            continue
        messages.append({"role": "assistant", "content": reply})
        out.write("\n\n")
        if args.verbose:
            _report(session, err)
    return 0
