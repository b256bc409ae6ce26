"""Markdown rendering for replies: code blocks with copy links, no raw HTML, thinking."""

from __future__ import annotations

from hearth.ui.markdown import render_markdown, split_thinking
from hearth.ui.theme import DARK, LIGHT


def test_code_blocks_are_highlighted_and_copyable():
    text = "Try:\n\n```python\ndef f():\n    return 1\n```\n\nand `x`."
    r = render_markdown(text, LIGHT)
    assert r.code_blocks == ["def f():\n    return 1"]
    assert 'href="copy:0"' in r.html
    assert "<span style=" in r.html  # pygments colours, inline for Qt


def test_an_unfinished_stream_still_renders():
    r = render_markdown("Here:\n```js\nconsole.log(1", DARK)
    assert r.code_blocks == ["console.log(1"]


def test_model_html_is_shown_as_text():
    r = render_markdown("<script>alert(1)</script> <b>bold</b>", LIGHT)
    assert "<script>" not in r.html and "&lt;script&gt;" in r.html


def test_inline_thinking_is_split_out():
    assert split_thinking("<think>plan</think>Answer") == ("plan", "Answer")
    assert split_thinking("<think>still going") == ("still going", "")
    assert split_thinking("no thoughts") == ("", "no thoughts")
