"""Text from sessions made safe to show a person: a model or a tool wrote it, and it may hold
terminal escape sequences (clear the screen, set the window title), other control characters,
bidi overrides that make text read other than it is, or lone surrogates (legal in Pi's JSON).
The web viewer (``store.web.render``) and the CLI's human formats (``store.cli.output``) show
the same text; the data formats (JSON, CSV, TSV) keep it as it is."""

from __future__ import annotations

import re
from typing import Any

from store.format import js_stringify

ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
# C0/C1 controls other than tab and newline, bidi embeddings/overrides/isolates, zero-width marks,
# and lone surrogates (not encodable as UTF-8)
INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff"
                       "\ud800-\udfff]")
LINE_BREAKS = re.compile("[\n\u2028\u2029]")


def as_text(value: Any) -> str:
    """A session's value as text to show: a string as it is, another JSON value (an id that is an
    array, a command that is a number) as its JSON, None (or a template's undefined) as nothing."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, dict, int, float)):
        return js_stringify(value)
    return "" if value is None else str(value)


def visible(value: Any) -> str:
    """:func:`as_text` of ``value`` with ANSI sequences removed and invisible characters shown as
    ``⟨U+001B⟩``."""
    return INVISIBLE.sub(_shown, ANSI.sub("", as_text(value)))


def one_line(value: Any) -> str:
    """:func:`visible`, for a line that must stay one record (the CLI's piped plain lines): line
    breaks (``\n``, and U+2028/U+2029, which ``str.splitlines`` splits at) shown as ``⟨U+000A⟩``."""
    return LINE_BREAKS.sub(_shown, visible(value))


def _shown(match: re.Match[str]) -> str:
    return f"⟨U+{ord(match.group()):04X}⟩"
