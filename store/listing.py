"""Pi's per-session listing info (``SessionManager.list``), accumulated one parsed line at a time.

The same accumulator fills the ``sessions`` columns at import and append time and recomputes the
oracle-shaped ``listInfo`` for ``inspect``. Where Pi's own code would throw on a line (and then
silently leave the whole file out of its list) the accumulator records ``pi_listable = False``
and carries on, so our listing still shows the session.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from store.format.jsdate import js_iso, parse_js_date
from store.format.jsjson import js_number
from store.format.jsvalue import UNDEFINED, js_trim, prop


class _PiWouldThrow(Exception):
    """The line makes Pi's list code throw a TypeError."""


@dataclass(slots=True)
class ListingState:
    """Running listing info of one session."""

    header: dict | None = None
    name: str | None = None
    message_count: int = 0
    first_message: str = ""
    last_activity_ms: float | None = None
    pi_listable: bool = True
    texts: list[str] | None = field(default=None)  # all message texts, only when asked for

    def add(self, value: Any) -> None:
        """Feed one parsed, truthy line that follows the header (file order)."""
        try:
            self._add(value)
        except _PiWouldThrow:
            self.pi_listable = False

    def _add(self, value: Any) -> None:
        if not isinstance(value, dict):
            return
        kind = value.get("type")
        if kind == "session_info":
            self.name = _trimmed_name(value.get("name", UNDEFINED))
        if kind != "message":
            return
        self.message_count += 1
        message = value.get("message", UNDEFINED)
        if message is None or message is UNDEFINED:
            raise _PiWouldThrow  # Pi reads message.role of null
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) or "content" not in message:
            return
        role = message["role"]
        if role not in ("user", "assistant"):
            return
        activity = _activity_ms(value, message)
        if activity is not None:
            self.last_activity_ms = max(self.last_activity_ms or 0, activity)
        text = _text_content(message["content"])
        if not text:
            return
        if self.texts is not None:
            self.texts.append(text)
        if not self.first_message and role == "user":
            self.first_message = text

    def modified_ms(self, mtime_ms: float | None) -> float | None:
        """Latest user/assistant activity if positive, else the header time, else ``mtime_ms``."""
        if self.last_activity_ms is not None and self.last_activity_ms > 0:
            return self.last_activity_ms
        header_ts = prop(self.header, "timestamp")
        header_ms = parse_js_date(header_ts) if isinstance(header_ts, str) else None
        return header_ms if header_ms is not None else mtime_ms

    def info(self, mtime_ms: float | None) -> dict | None:
        """The oracle's ``listInfo`` document (None when Pi would not list the file)."""
        if self.header is None or not self.pi_listable:
            return None
        cwd = self.header.get("cwd")
        parent = self.header.get("parentSession", UNDEFINED)
        modified = self.modified_ms(mtime_ms)
        return {
            "id": self.header.get("id"),
            "cwd": cwd if isinstance(cwd, str) else "",
            "name": self.name,
            "parentSessionPath": None if parent is UNDEFINED else parent,
            "created": js_iso(parse_js_date(self.header.get("timestamp", UNDEFINED))),
            "modified": js_iso(modified) if modified is not None else None,
            "messageCount": self.message_count,
            "firstMessage": self.first_message or "(no messages)",
            "allMessagesText": " ".join(self.texts or []),
        }


def _trimmed_name(name: Any) -> str | None:
    if name is None or name is UNDEFINED:
        return None
    if not isinstance(name, str):
        raise _PiWouldThrow  # name.trim is not a function
    return js_trim(name) or None


def _activity_ms(entry: dict, message: dict) -> float | None:
    stamp = message.get("timestamp")
    if isinstance(stamp, (int, float)) and not isinstance(stamp, bool):
        return stamp
    return parse_js_date(entry.get("timestamp", UNDEFINED))


def _text_content(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _PiWouldThrow  # content.filter is not a function
    parts = []
    for block in content:
        if block is None or block is UNDEFINED:
            raise _PiWouldThrow  # block.type of null
        if prop(block, "type") == "text":
            parts.append(_join_part(prop(block, "text")))
    return " ".join(parts)


def _join_part(value: Any) -> str:
    """How ``Array.prototype.join`` renders one element."""
    if value is None or value is UNDEFINED:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return js_number(value)
    if isinstance(value, list):
        return ",".join(_join_part(v) for v in value)
    return "[object Object]"


def trimmed_session_name(value: Any) -> str | None:
    """Pi's ``getSessionName`` reading of one session_info entry (raises TypeError like Pi)."""
    try:
        return _trimmed_name(prop(value, "name"))
    except _PiWouldThrow:
        raise TypeError("session_info name is not a string") from None

