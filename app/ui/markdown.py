"""Model text → HTML for QTextBrowser: Markdown (markdown-it), code highlighted by Pygments.

Qt's rich text understands a subset of HTML 4 with inline styles, so code blocks are tables
(the one box with padding and a background Qt draws reliably) and colours are inline. Raw HTML
in model output is escaped, never rendered. Each code block gets a `copy:N` link; the view maps
it back to `Rendered.code_blocks[N]`.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any

from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name, guess_lexer
from pygments.util import ClassNotFound

from .theme import Palette

__all__ = ["Rendered", "render_markdown", "split_thinking"]

_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.S)


def split_thinking(text: str) -> tuple[str, str]:
    """Models that inline their reasoning as <think>…</think>: (thinking, answer)."""
    if "<think>" not in text:
        return "", text
    thoughts = [m.group(1).strip() for m in _THINK.finditer(text)]
    return "\n\n".join(t for t in thoughts if t), _THINK.sub("", text).strip()


@dataclass
class Rendered:
    html: str
    code_blocks: list[str] = field(default_factory=list)


class _Renderer:
    def __init__(self, palette: Palette, copy_label: str) -> None:
        self.p = palette
        self.copy_label = copy_label
        self.code_blocks: list[str] = []
        self.formatter = HtmlFormatter(noclasses=True, nowrap=True, style=palette.pygments_style)
        # breaks=True: a single newline is a line break, as people (and poems) expect in chat.
        md = MarkdownIt("commonmark", {"html": False, "linkify": False, "breaks": True})
        md.enable(["table", "strikethrough"])
        # markdown-it binds rules as methods of its own renderer: wrap ours.
        md.add_render_rule("fence", lambda _r, t, i, o, e: self.fence(t, i, o, e))
        md.add_render_rule("code_block", lambda _r, t, i, o, e: self.fence(t, i, o, e))
        md.add_render_rule("code_inline", lambda _r, t, i, o, e: self.code_inline(t, i, o, e))
        self.md = md

    def code_inline(self, tokens: Any, idx: int, _options: Any, _env: Any) -> str:
        code = html.escape(tokens[idx].content)
        return (
            f'<code style="background-color:{self.p.code_bg}; font-family:monospace;">'
            f"&nbsp;{code}&nbsp;</code>"
        )

    def fence(self, tokens: Any, idx: int, _options: Any, _env: Any) -> str:
        token = tokens[idx]
        code = token.content.rstrip("\n")
        lang = (token.info or "").strip().split(" ")[0]
        number = len(self.code_blocks)
        self.code_blocks.append(code)
        body = self._highlight(code, lang)
        p = self.p
        label = html.escape(lang or "text")
        return (
            f'<table width="100%" cellspacing="0" cellpadding="0" border="0"'
            f' style="margin-top:6px; margin-bottom:10px; background-color:{p.code_bg};">'
            f'<tr><td style="padding:6px 12px 0px 12px;">'
            f'<span style="color:{p.muted}; font-size:small;">{label}</span></td>'
            f'<td align="right" style="padding:6px 12px 0px 12px;">'
            f'<a href="copy:{number}" style="color:{p.muted}; text-decoration:none;'
            f' font-size:small;">{html.escape(self.copy_label)}</a></td></tr>'
            f'<tr><td colspan="2" style="padding:4px 12px 10px 12px;">'
            f'<pre style="font-family:monospace; margin:0;">{body}</pre></td></tr></table>'
        )

    def _highlight(self, code: str, lang: str) -> str:
        try:
            lexer = get_lexer_by_name(lang) if lang else guess_lexer(code)
        except ClassNotFound:
            return html.escape(code)
        out: str = highlight(code, lexer, self.formatter)
        return out.rstrip("\n")


def render_markdown(text: str, palette: Palette, copy_label: str = "Copy") -> Rendered:
    """Render `text` (possibly cut off mid-stream: an open code fence runs to the end)."""
    r = _Renderer(palette, copy_label)
    body = r.md.render(text)
    style = (
        f"<style>p {{ margin-top:0px; margin-bottom:8px; }}"
        f" a {{ color:{palette.accent}; }}"
        f" h1, h2, h3 {{ margin-top:10px; margin-bottom:6px; }}"
        f" th {{ background-color:{palette.code_bg}; padding:4px 8px; }}"
        f" td {{ padding:4px 8px; }} li {{ margin-bottom:2px; }}"
        f" blockquote {{ color:{palette.muted}; }}</style>"
    )
    body = body.replace(
        "<table>", f'<table cellspacing="0" border="1" style="border-color:{palette.border};">'
    )
    return Rendered(style + body, r.code_blocks)
