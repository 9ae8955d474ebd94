"""Pi's load-time migration of old session files (v1 -> v2 -> v3), mirrored step for step.

It works on the list of parsed values of one file as Pi's loader keeps them: blank, unparseable
and falsy lines dropped, the header first, and anything else that parsed (a second "session"
line, ``42``, ``[1, 2]``) in file order.  Values are mutated in place; writing each one back with
``js_stringify`` then gives the bytes Pi rewrites the file with.

JavaScript details that matter:

* The version is ``header.version ?? 1`` compared with ``<``/``>=``, so ``"2"`` counts as 2,
  ``[2]`` as 2, ``""`` as 0, and a value that is no number at all (``"abc"``, ``{}``) compares
  false both ways: nothing changes, yet Pi still reports a migration and rewrites the file.
* Pi's code is an ES module (strict mode): giving an ``id`` to a primitive entry (``42``,
  ``"str"``, ``true``) throws a TypeError, so ``SessionManager.open`` fails; that is
  ``MigrationError`` here.  Reading a property of ``null`` throws as well.
* An array entry silently accepts ``id``/``parentId`` as array properties that
  ``JSON.stringify`` never writes.  The array stays unchanged here, but its id still takes a turn
  of ``new_id``, becomes the next entry's ``parentId`` and can be a compaction's target.
"""

import math
import re
from collections.abc import Callable
from typing import Any

from store.format.jsjson import js_string

__all__ = [
    "CURRENT_SESSION_VERSION",
    "MigrationError",
    "migrate_entries",
    "needs_migration",
    "session_version",
]

CURRENT_SESSION_VERSION = 3


class MigrationError(ValueError):
    """Pi's migration would throw on this file (so Pi cannot open it); ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# ---------------------------------------------------------------------------------------------
# JavaScript's ToNumber, as used by relational comparisons

# StrWhiteSpaceChar: WhiteSpace (incl. U+FEFF and every Zs character) and LineTerminator.
_JS_WHITESPACE = (
    "\t\n\v\f\r \xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_DECIMAL = re.compile(r"[+-]?(?:Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)")
_NON_DECIMAL = re.compile(r"0([xXoObB])([0-9a-fA-F]+)")
_RADIX = {"x": 16, "o": 8, "b": 2}


def _string_to_number(text: str) -> float:
    text = text.strip(_JS_WHITESPACE)
    if not text:
        return 0.0
    if _DECIMAL.fullmatch(text):
        return float(text)
    match = _NON_DECIMAL.fullmatch(text)
    if match is None:
        return math.nan
    try:
        return float(int(match[2], _RADIX[match[1].lower()]))
    except ValueError:  # a digit outside the radix: "0b12", "0o8"
        return math.nan


def _to_number(value: Any) -> float:
    """ToNumber(ToPrimitive(value)) for a JSON value (objects are NaN, arrays go via String)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, float):
        return value
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if value is None:
        return 0.0
    if isinstance(value, dict):
        return math.nan
    return _string_to_number(value if isinstance(value, str) else js_string(value))


# ---------------------------------------------------------------------------------------------
# migration


def _type_of(entry: Any) -> Any:
    """``entry.type`` as JavaScript reads it; None stands for undefined."""
    if isinstance(entry, dict):
        return entry.get("type")
    if entry is None:
        raise MigrationError("Cannot read properties of null (reading 'type')")
    return None


def _is_session(entry: Any) -> bool:
    return _type_of(entry) == "session"


def _find_header(parsed: list[Any]) -> dict[str, Any] | None:
    """The first "session" entry, as ``entries.find(e => e.type === "session")``."""
    return next((entry for entry in parsed if _is_session(entry)), None)


def session_version(header: dict[str, Any]) -> float:
    """``header.version ?? 1`` as the number JavaScript compares (NaN when not numeric)."""
    version = header.get("version")
    return 1.0 if version is None else _to_number(version)


def _version(parsed: list[Any]) -> float:
    header = _find_header(parsed)
    return 1.0 if header is None else session_version(header)


def needs_migration(parsed: list[Any]) -> bool:
    """Whether Pi would migrate (and so rewrite) a file with these parsed values.

    True unless the version is at least 3; a non-numeric version (NaN) also counts as True.
    With no "session" entry the version is 1 (Pi itself only migrates files with a header).
    """
    return not _version(parsed) >= CURRENT_SESSION_VERSION


def _js_truthy(value: Any) -> bool:
    if isinstance(value, (dict, list)):
        return True  # objects are truthy even when empty
    return bool(value) and value == value  # NaN is falsy


def _position(parsed: list[Any], index: int | float) -> int | None:
    """The list position ``entries[index]`` reads for a JS number (-0 is 0); 2.5, -1 or 1e21
    read no element at all (None)."""
    if isinstance(index, float):
        if not index.is_integer():  # also NaN and the infinities
            return None
        index = int(index)
    return index if 0 <= index < len(parsed) else None


def _convert_first_kept(compaction: dict[str, Any], parsed: list[Any], hidden_ids: dict[int, str]) -> None:
    """Turn a numeric ``firstKeptEntryIndex`` into ``firstKeptEntryId`` (Pi's v1 compactions)."""
    index = compaction.get("firstKeptEntryIndex")
    if isinstance(index, bool) or not isinstance(index, (int, float)):
        return  # typeof !== "number" (or absent): left alone
    position = _position(parsed, index)
    target = None if position is None else parsed[position]
    if _js_truthy(target) and not _is_session(target):
        if isinstance(target, dict) and "id" in target:
            compaction["firstKeptEntryId"] = target["id"]
        elif position in hidden_ids:
            compaction["firstKeptEntryId"] = hidden_ids[position]
        else:  # the target's id is undefined, which JSON.stringify leaves out
            compaction.pop("firstKeptEntryId", None)
    del compaction["firstKeptEntryIndex"]


def _js_typeof(value: str | bool | int | float) -> str:
    if isinstance(value, str):
        return "string"
    return "boolean" if isinstance(value, bool) else "number"


def _v1_to_v2(parsed: list[Any], new_id: Callable[[], str]) -> None:
    """Number every entry and chain it to the previous one; header version 2."""
    previous_id: str | None = None
    hidden_ids: dict[int, str] = {}  # ids of array entries (invisible array properties)
    for position, entry in enumerate(parsed):
        if _is_session(entry):
            entry["version"] = 2
            continue
        if isinstance(entry, list):
            entry_id = hidden_ids[position] = new_id()
        elif isinstance(entry, dict):
            entry["id"] = entry_id = new_id()
            entry["parentId"] = previous_id
        else:
            raise MigrationError(f"Cannot create property 'id' on {_js_typeof(entry)} '{js_string(entry)}'")
        previous_id = entry_id
        if isinstance(entry, dict) and entry.get("type") == "compaction":
            _convert_first_kept(entry, parsed, hidden_ids)


def _v2_to_v3(parsed: list[Any]) -> None:
    """Rename the message role "hookMessage" to "custom"; header version 3."""
    for entry in parsed:
        kind = _type_of(entry)
        if kind == "session":
            entry["version"] = 3
        elif kind == "message":
            message = entry.get("message")
            if isinstance(message, dict) and message.get("role") == "hookMessage":
                message["role"] = "custom"


def migrate_entries(parsed: list[Any], new_id: Callable[[], str]) -> bool:
    """Migrate ``parsed`` in place exactly as Pi does; True when Pi would rewrite the file.

    ``new_id`` stands for Pi's ``randomUUID().slice(0, 8)``: the v1 -> v2 step calls it once per
    non-"session" entry, in file order, without checking for collisions (neither does Pi).
    Raises ``MigrationError`` where Pi's migration throws; ``parsed`` is then partly migrated.
    """
    version = _version(parsed)
    if version >= CURRENT_SESSION_VERSION:
        return False
    if version < 2:
        _v1_to_v2(parsed, new_id)
    if version < 3:
        _v2_to_v3(parsed)
    return True
