"""Strings as the database's text columns hold them, the same on SQLite and PostgreSQL: lone
surrogates (legal in JSON, not in UTF-8) and NUL (PostgreSQL text cannot hold it) cannot be stored."""

from __future__ import annotations

import re
from collections.abc import Callable

_UNSTORABLE = re.compile("[\ud800-\udfff\x00]")


def _storable(value: str, replace: Callable[[re.Match], str]) -> str:
    if value.isascii():
        return value if "\x00" not in value else _UNSTORABLE.sub(replace, value)
    try:
        value.encode("utf-8")  # in C, several times faster than a regex scan: surrogates are rare
    except UnicodeEncodeError:
        return _UNSTORABLE.sub(replace, value)
    return value if "\x00" not in value else _UNSTORABLE.sub(replace, value)


def _escape(match: re.Match) -> str:
    return f"\\u{ord(match.group()):04x}"


def db_text(value: str) -> str:
    """``value`` with the unstorable characters written as JSON.stringify escapes them
    (``\\udxxx``, ``\\u0000``): entry ids are stored and looked up in this form."""
    return _storable(value, _escape)


_ESCAPE = re.compile(r"\\u(?:d[89a-f][0-9a-f]{2}|0000)")


def may_be_escaped(stored: str) -> bool:
    """Whether a stored text may hold :func:`db_text`'s escape of a character it could not store
    (else it is the text as given)."""
    return "\\u" in stored and _ESCAPE.search(stored) is not None


def clean_text(value: str) -> str:
    """``value`` with the unstorable characters replaced by U+FFFD (text to read and search)."""
    return _storable(value, lambda _match: "\ufffd")


def unescaped(stored: str) -> str:
    """:func:`db_text`'s escapes turned back into the characters (which a literal ``\\udcff`` in
    the text given would be too: the caller decides which reading is meant, e.g. the one of a
    file path that exists)."""
    return _ESCAPE.sub(lambda match: chr(int(match.group()[2:], 16)), stored)
