"""The entries ``SessionManager.append_*`` creates, with Pi's key order and omissions.

Pi writes ``JSON.stringify(entry)``: keys in the order the object literal lists them, keys whose
value is ``undefined`` left out. Here ``None`` for an optional argument means "not given" (left
out); pass JSON ``null`` where Pi stores null by giving it explicitly where the format requires it
(``parentId``, a context edit's ``replacement``).
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from store.errors import InvalidEntry, InvalidReplacement, InvalidSessionId
from store.format.jsvalue import js_trim


def now_iso(ms: float | None = None) -> str:
    """``new Date().toISOString()``: UTC with milliseconds and a ``Z``."""
    ms = int(time.time() * 1000 if ms is None else ms)
    return _iso_of_second(ms // 1000) + f"{ms % 1000:03d}Z"


@functools.lru_cache(maxsize=8)
def _iso_of_second(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S.")


IdSource = Callable[[str], str]
"""Where new ids come from (``SessionStore(ids=...)``): called with ``"uuid"`` it returns the next
random UUID (Pi's ``randomUUID()``: an entry id is its first 8 characters, the full UUID is the
fallback after 100 taken ones), with ``"session"`` the next session id (Pi's ``uuidv7()``)."""


def random_uuid() -> str:
    """A random version-4 UUID, like ``crypto.randomUUID()``."""
    return str(uuid.uuid4())


def id_candidates(draw: Callable[[], str]) -> Iterator[str]:
    """The short ids Pi's ``generateId`` tries, in order: the first 8 characters of each of up
    to 100 drawn UUIDs (each drawn when it is asked for)."""
    for _ in range(100):
        yield draw()[:8]


def entry_id(draw: Callable[[], str], taken: Callable[[str], bool], candidates: Iterator[str] | None = None) -> str:
    """Pi's ``generateId``: the first of :func:`id_candidates` (``candidates``: the rest of them,
    when some were tried already) that is not ``taken``, else one more full UUID."""
    for candidate in id_candidates(draw) if candidates is None else candidates:
        if not taken(candidate):
            return candidate
    return draw()


def uuid7(ms: float | None = None) -> str:
    """A version-7 UUID (time-ordered), Pi's session id format."""
    ms = int(time.time() * 1000 if ms is None else ms)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | secrets.randbits(12) << 64
    value |= 0b10 << 62 | secrets.randbits(62)
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


_SESSION_ID = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")


def check_session_id(session_id: Any) -> None:
    """A chosen session id must be what Pi accepts (it names files): ASCII letters, digits, ``.``,
    ``_`` and ``-``, starting and ending with a letter or digit."""
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
        raise InvalidSessionId(f"invalid session id {session_id!r}: use letters, digits, '.', '_' and '-', "
                               "starting and ending with a letter or digit")


def resolve_cwd(cwd: str) -> str:
    return os.path.abspath(os.path.expanduser(cwd))


def header(session_id: str, timestamp: str, cwd: str, parent_session: str | None = None) -> dict:
    entry = {"type": "session", "version": 3, "id": session_id, "timestamp": timestamp, "cwd": cwd}
    if parent_session is not None:
        entry["parentSession"] = parent_session
    return entry


def _base(kind: str, entry_id: str, parent_id: str | None, timestamp: str) -> dict:
    return {"type": kind, "id": entry_id, "parentId": parent_id, "timestamp": timestamp}


def _optional(entry: dict, **fields: Any) -> dict:
    for key, value in fields.items():
        if value is not None:
            entry[key] = value
    return entry


def message(entry_id: str, parent_id: str | None, ts: str, msg: dict) -> dict:
    entry = _base("message", entry_id, parent_id, ts)
    entry["message"] = msg
    return entry


def thinking_level_change(entry_id: str, parent_id: str | None, ts: str, level: str) -> dict:
    entry = _base("thinking_level_change", entry_id, parent_id, ts)
    entry["thinkingLevel"] = level
    return entry


def model_change(entry_id: str, parent_id: str | None, ts: str, provider: str, model_id: str) -> dict:
    entry = _base("model_change", entry_id, parent_id, ts)
    entry["provider"] = provider
    entry["modelId"] = model_id
    return entry


def usage(entry_id: str, parent_id: str | None, ts: str, kind: str, provider: str, model: str,
          usage_data: dict, note: str | None) -> dict:
    entry = _base("usage", entry_id, parent_id, ts)
    entry.update(kind=kind, provider=provider, model=model, usage=usage_data)
    if note:  # Pi spreads the note in only when it is truthy
        entry["note"] = note
    return entry


def custom(entry_id: str, parent_id: str | None, ts: str, custom_type: str, data: Any) -> dict:
    entry = _optional({"type": "custom", "customType": custom_type}, data=data)
    entry.update(id=entry_id, parentId=parent_id, timestamp=ts)
    return entry


def session_info(entry_id: str, parent_id: str | None, ts: str, name: str) -> dict:
    entry = _base("session_info", entry_id, parent_id, ts)
    entry["name"] = sanitize_name(name)
    return entry


def sanitize_name(name: str) -> str:
    """Runs of CR/LF become one space, then the name is trimmed as JavaScript trims (Pi's
    ``appendSessionInfo``)."""
    if not isinstance(name, str):
        raise InvalidEntry(f"a session name must be a string, not {type(name).__name__}")
    return js_trim(re.sub(r"[\r\n]+", " ", name))


def custom_message(entry_id: str, parent_id: str | None, ts: str, custom_type: str, content: Any,
                   display: bool, details: Any) -> dict:
    entry: dict = {"type": "custom_message", "customType": custom_type, "content": content, "display": display}
    _optional(entry, details=details)
    entry.update(id=entry_id, parentId=parent_id, timestamp=ts)
    return entry


def context_edit(entry_id: str, parent_id: str | None, ts: str, target_id: str,
                 replacement: dict | None) -> dict:
    entry = _base("context_edit", entry_id, parent_id, ts)
    entry.update(targetId=target_id, replacement=replacement)
    return entry


def check_replacement(replacement: Any) -> None:
    """A replacement is null or an object whose ``content`` is a string or a list."""
    if replacement is None:
        return
    if not isinstance(replacement, dict) or not isinstance(replacement.get("content", None), (str, list)):
        raise InvalidReplacement("Context edit replacement must be null or contain string/array content")


def label(entry_id: str, parent_id: str | None, ts: Any, target_id: str, text: str | None) -> dict:
    entry = _base("label", entry_id, parent_id, ts)
    entry["targetId"] = target_id
    return _optional(entry, label=text)


def branch_summary(entry_id: str, parent_id: str | None, ts: str, from_id: str, summary: str, details: Any,
                   usage_data: Any, from_hook: bool | None) -> dict:
    entry = _base("branch_summary", entry_id, parent_id, ts)
    entry.update(fromId=from_id, summary=summary)
    return _optional(entry, details=details, usage=usage_data, fromHook=from_hook)
