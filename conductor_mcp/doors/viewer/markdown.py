"""Model output as the viewer shows it: markdown rendered to sanitised HTML, the raw text one click away.

Model output is untrusted. markdown-it-py renders CommonMark plus tables and strikethrough with raw HTML off
(`<script>`, `<img onerror>` and every other tag come out as escaped text), escapes every text node and attribute
itself, and refuses `javascript:`, `vbscript:`, `file:` and `data:` link targets (its `validateLink`). On top of
that, images are not rendered (an image is a request to wherever the model points), links may only be http(s) or
mailto, every link gets `rel="noopener noreferrer nofollow"`, and very long outputs are shown as text only.
"""

from __future__ import annotations

from html import escape
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

from conductor_mcp.core.limits import MAX_RENDERED_CHARS


def escaped(value: object) -> str:
    """Any value as HTML text, quotes included: the one escape every viewer page uses for what it did not write."""
    return escape(str(value), quote=True)


LINK_SCHEMES = ("http://", "https://", "mailto:")


def _link_open(renderer: RendererHTML, tokens: list[Token], idx: int, options: OptionsDict, env: EnvType) -> str:
    tokens[idx].attrSet("rel", "noopener noreferrer nofollow")
    return renderer.renderToken(tokens, idx, options, env)


def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"]).disable("image")
    md.validateLink = lambda url: url.strip().lower().startswith(LINK_SCHEMES)
    md.add_render_rule("link_open", _link_open)
    return md


_MD = _markdown()


def output_html(text: str, css_class: str) -> str:
    """An output as rendered markdown (`css_class` on it) with its raw text in a <details> below it."""
    raw = f'<pre class="text raw">{escape(text, quote=True)}</pre>'
    if len(text) > MAX_RENDERED_CHARS or not text.strip():
        return f'<pre class="text {css_class}">{escape(text, quote=True)}</pre>'
    rendered: Any = _MD.render(text)
    return (
        f'<div class="markdown {css_class}">{rendered}</div>'
        f'<details class="raw-text"><summary>raw text</summary>{raw}</details>'
    )
