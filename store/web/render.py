"""Turning untrusted session text into safe page text: Jinja2 escapes every value (autoescape),
and the filters here first take out what escaping leaves dangerous or confusing — ANSI escape
sequences (removed), bidi controls and other invisible controls (shown as ``⟨U+202E⟩``) — and
give content blocks their shape. Nothing is ever rendered as markdown or HTML: a link in a
message stays its text. Images become ``data:`` URLs only for raster types with base64 data.
"""

from __future__ import annotations

import html
import re
from typing import Any

import orjson
from markupsafe import Markup, escape

from store.visible_text import visible as clean

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")
LONG_LINES = 24
LONG_CHARS = 3000


def text_block(value: Any, css: str = "text") -> Markup:
    """A ``<pre>`` of cleaned text; long text shows its head with the rest folded."""
    text = clean(value)
    lines = text.split("\n")
    if len(lines) <= LONG_LINES and len(text) <= LONG_CHARS:
        return Markup('<pre class="{}">{}</pre>').format(css, text)
    head = "\n".join(lines[:12])[:1200]
    return Markup('<pre class="{}">{}</pre><details class="more"><summary>show all {} lines ({} characters)'
                  '</summary><pre class="{}">{}</pre></details>').format(css, head, len(lines), len(text), css, text)


def thousands(value: Any) -> str:
    """A number with thousands separators; anything else a session may hold in its place (a token
    count written as a string, a list) as its JSON, cleaned."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:,}"
    return clean(pretty_json(value))


def pretty_json(value: Any) -> str:
    """A JSON value indented for reading (ids and keys as they are)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return repr(value)


def image(block: dict) -> Markup:
    """An ``<img>`` for an image block with raster data, else a note saying what it was."""
    mime, data = block.get("mimeType"), block.get("data")
    if isinstance(mime, str) and mime in IMAGE_TYPES and isinstance(data, str) and BASE64.fullmatch(data):
        return Markup('<img class="image" alt="image from the session" src="data:{};base64,{}">').format(
            mime, "".join(data.split()))
    return Markup('<span class="note">[image: {}]</span>').format(clean(mime))


def content(value: Any) -> Markup:
    """A message's content: text, thinking (folded), tool calls with their arguments, images."""
    if isinstance(value, str):
        return text_block(value)
    if not isinstance(value, list):
        return Markup("") if value is None else text_block(pretty_json(value), "json")
    parts: list[Markup] = []
    for block in value:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append(text_block(block.get("text")))
        elif kind == "thinking":
            parts.append(Markup('<details class="thinking"><summary>thinking</summary>{}</details>').format(
                text_block(block.get("thinking"))))
        elif kind == "toolCall":
            parts.append(Markup('<div class="toolcall"><span class="tool">→ {}</span>{}</div>').format(
                clean(block.get("name")), text_block(pretty_json(block.get("arguments")), "json")))
        elif kind == "image":
            parts.append(image(block))
        else:
            parts.append(text_block(pretty_json(block), "json"))
    return Markup("").join(parts)


def message(value: Any) -> Markup:
    """The body of one message by role (tool results and bash output are folded when long)."""
    if not isinstance(value, dict):
        return text_block(pretty_json(value), "json")
    role = value.get("role")
    if role == "bashExecution":
        return Markup('<div class="tool">$ {}</div>{}').format(clean(value.get("command")),
                                                               text_block(value.get("output"), "output"))
    if role == "toolResult":
        return Markup('<div class="tool">{}{}</div>{}').format(
            clean(value.get("toolName")), " (error)" if value.get("isError") else "",
            _output(value.get("content")))
    if role in ("compactionSummary", "branchSummary"):
        return text_block(value.get("summary"))
    return content(value.get("content"))


def _output(value: Any) -> Markup:
    if isinstance(value, list) and all(isinstance(b, dict) and b.get("type") == "text" for b in value):
        return text_block("\n".join(clean(b.get("text")) for b in value), "output")
    return content(value)


def snippet(value: str) -> Markup:
    """A search snippet (``search.highlight``: an HTML fragment, ``<mark>`` its only tags): each
    piece of text between the tags cleaned as text (its entities read first) and escaped again."""
    pieces = _MARKS.split(value)
    return Markup("".join(piece if n % 2 else str(escape(clean(html.unescape(piece))))
                          for n, piece in enumerate(pieces)))


_MARKS = re.compile("(</?mark>)")


def entry_body(entry: Any) -> Markup:
    """What the conversation shows of one path entry."""
    if not isinstance(entry, dict):
        return text_block(pretty_json(entry), "json")
    kind = entry.get("type")
    if kind == "message":
        return message(entry.get("message"))
    if kind in ("compaction", "branch_summary"):
        return text_block(entry.get("summary"))
    if kind == "custom_message":
        return content(entry.get("content"))
    if kind == "context_edit":
        replacement = entry.get("replacement")
        if replacement is None:
            return Markup('<span class="note">hides {} from the context</span>').format(clean(entry.get("targetId")))
        new = replacement.get("content") if isinstance(replacement, dict) else None
        return Markup('<span class="note">replaces the content of {} with</span>{}').format(
            clean(entry.get("targetId")), content(new))
    return Markup("")
