"""Pi's reading rules applied one physical line at a time: which lines are the header, entries,
values Pi would keep, or lines it would skip — plus the v1→v3 migration Pi performs on open.

Nothing is dropped: a skipped line is still a row (``kind="skipped"``) so that export can
reproduce the file, and every oddity is reported as a :class:`LineWarning` naming the line.
:class:`LineReader` holds only per-file state (no line it has returned), so a file of any size
streams through it in constant memory; the one file kind that needs a look ahead, a v1 file
whose compactions name later lines by position, gets it from :func:`plan_v1_migration`, a
separate read-only pass over the same file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from store.format import JsonLineError, js_parse, js_string, js_stringify
from store.format import models as m
from store.format.jsjson import parse_deep
from store.format.jsvalue import UNDEFINED, js_trim, truthy
from store.format.lines import RawLine, decode_line
from store.format.migrate import CURRENT_SESSION_VERSION, session_version
from store.tree_columns import IdIndex

HEADER, ENTRY, VALUE, EXTRA_HEADER, SKIPPED = "header", "entry", "value", "extra_header", "skipped"
PI_FILE_NAME = re.compile(r"_([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})\.jsonl$")
BOM = "\ufeff"


KNOWN_FIELDS = {kind: frozenset(model.model_fields) for kind, model in m.ENTRY_MODELS.items()}
KNOWN_ROLES = frozenset([*m.MESSAGE_MODELS, "hookMessage"])  # v2's role, renamed by v3


@dataclass(frozen=True, slots=True)
class LineWarning:
    """Something Pi would silently skip or mangle, found at a 1-based line number."""

    line: int
    reason: str

    def render(self, source: str) -> str:
        return f"{source}:{self.line}: {self.reason}"


@dataclass(slots=True)
class LineRow:
    """One physical line as it will be stored."""

    seq: int
    kind: str
    value: Any  # parsed JSON (UNDEFINED for skipped lines)
    line: str  # text Pi interprets (v3 form after migration), without the line terminator
    raw: bytes | None  # the original bytes, only when ``line`` does not encode back to them
    eol: str


# ---------------------------------------------------------------------------------------------
# one line


def parse(data: bytes, text: str, valid_utf8: bool) -> Any:
    """``JSON.parse`` of a line (``text``: ``data`` decoded); raises ``JsonLineError``. orjson reads
    valid UTF-8 bytes directly (the same value, without encoding the text again); the slow path
    knows what orjson refuses and JavaScript accepts."""
    if valid_utf8:
        with contextlib.suppress(orjson.JSONDecodeError):
            return orjson.loads(data)
    return js_parse(text)


def parse_kept(data: bytes) -> Any:
    """The value Pi's loader keeps for a line, or UNDEFINED (blank, not JSON, falsy)."""
    text, valid = decode_line(data)
    try:
        value = parse(data, text, valid)
    except JsonLineError:
        return UNDEFINED
    return value if truthy(value) else UNDEFINED


def is_header(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") == "session" and isinstance(value.get("id"), str)


def _not_json_reason(text: str, error: JsonLineError) -> str:
    if not js_trim(text):
        return "blank line (Pi skips it)" if text else "empty line (Pi skips it)"
    if text.startswith(BOM):
        return "starts with a UTF-8 byte order mark, which JSON.parse refuses (Pi skips the line)"
    decoder = json.JSONDecoder()
    stripped = text.strip()
    try:
        _, end = decoder.raw_decode(stripped)
        decoder.raw_decode(stripped[end:].lstrip())
    except (ValueError, RecursionError):
        return f"not JSON, Pi skips it: {error.reason}"
    return f"two JSON values glued together on one line (Pi skips it): the first one ends at column {end}"


def _duplicate_keys(text: str) -> list[str]:
    """Keys that occur twice in one JSON object of ``text`` (JSON.parse keeps the last value)."""
    found: list[str] = []

    def check(pairs: list[tuple[str, Any]]) -> dict:
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                found.append(key)
            seen.add(key)
        return {}

    try:
        json.loads(text, object_pairs_hook=check)
    except ValueError:
        return []
    except RecursionError:  # nested deeper than Python's stack
        found.clear()
        with contextlib.suppress(JsonLineError):
            parse_deep(text, found)
    return found


def _writes_back(value: Any, data: bytes) -> bool:
    """Whether orjson writes ``value`` back as ``data`` (then no key can have been dropped)."""
    try:
        return orjson.dumps(value) == data
    except (TypeError, orjson.JSONEncodeError):  # lone surrogates, integers beyond 64 bits
        return False


def _known_role(value: dict) -> bool:
    message = value.get("message")
    if message.__class__ is not dict:
        return True  # no message object: nothing to say about its role
    role = message.get("role", UNDEFINED)
    return role.__class__ is str and role in KNOWN_ROLES


def _shape_warnings(value: dict, what: str) -> list[str]:
    """Unknown entry types, fields and message roles (all kept, and Pi keeps them too)."""
    kind = value.get("type")
    known = KNOWN_FIELDS.get(kind) if isinstance(kind, str) else None
    if known is None:
        return [f"unknown entry type {js_stringify(kind) if kind is not UNDEFINED else 'undefined'} "
                "(kept; Pi keeps it in the tree but nothing reads it)"]
    reasons = []
    if not known.issuperset(value):
        unknown = [key for key in value if key not in known]
        reasons.append(f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                       f"in {what} (kept)")
    if kind == "message" and not _known_role(value):
        role = value["message"].get("role", UNDEFINED)
        shown = js_stringify(role) if role is not UNDEFINED else "undefined"
        reasons.append(f"unknown message role {shown} (kept; Pi passes the message on as it is)")
    return reasons


# ---------------------------------------------------------------------------------------------
# migration


_SESSION, _OBJECT, _ARRAY, _PRIMITIVE = 0, 1, 2, 3


@dataclass(slots=True)
class MigrationPlan:
    """What Pi's v1→v2 step needs to know ahead of a line: its value positions (the header is
    position 0) by shape, and which positions earlier or later compactions name."""

    count: int = 0
    shapes: bytearray = field(default_factory=bytearray)
    named: set[int] = field(default_factory=set)  # positions a compaction at or after them names
    later_ids: dict[int, Any] = field(default_factory=dict)  # original "id" of objects named from before them
    error: str | None = None  # Pi's migration throws: the file cannot be opened


def _index_position(index: Any) -> int | None:
    """``firstKeptEntryIndex`` as an array position (None: not a number, or no integer ≥ 0)."""
    if isinstance(index, bool) or not isinstance(index, (int, float)):
        return None
    if isinstance(index, float):
        if not index.is_integer():  # also NaN and the infinities
            return None
        index = int(index)
    return index if index >= 0 else None


def plan_v1_migration(lines: Iterable[RawLine]) -> MigrationPlan:
    """Scan a whole v1 file (every line, header included) for :class:`MigrationPlan`."""
    plan = MigrationPlan()
    wanted: set[int] = set()
    for raw in lines:
        value = parse_kept(raw.data)
        if value is UNDEFINED:
            continue
        position = plan.count
        plan.count += 1
        if isinstance(value, dict):
            if value.get("type") == "session":
                plan.shapes.append(_SESSION)
                continue
            plan.shapes.append(_OBJECT)
            if position in wanted and "id" in value:
                plan.later_ids[position] = value["id"]
            if value.get("type") == "compaction":
                target = _index_position(value.get("firstKeptEntryIndex"))
                if target is not None:
                    (wanted if target > position else plan.named).add(target)
        elif isinstance(value, list):
            plan.shapes.append(_ARRAY)
        else:
            plan.shapes.append(_PRIMITIVE)
            if plan.error is None:
                kind = "string" if isinstance(value, str) else "boolean" if isinstance(value, bool) else "number"
                plan.error = f"Cannot create property 'id' on {kind} '{js_string(value)}'"
    return plan


def migration_ids(seed: str) -> Callable[[], str]:
    """Deterministic 8-hex ids for migrated v1 entries (Pi draws random ones; re-import must be stable).
    ``seed`` (the header id) may hold lone surrogates: JSON allows them."""
    used = IdIndex()
    counter = 0

    def new_id() -> str:
        nonlocal counter
        while True:
            counter += 1
            candidate = hashlib.sha256(f"{seed}:{counter}".encode("utf-8", "surrogatepass")).hexdigest()[:8]
            if used.put(candidate, 0) < 0:
                return candidate

    return new_id


class _Migration:
    """Pi's migration (``store.format.migrate``) applied to one kept value at a time, in file order."""

    def __init__(self, header: dict, plan: MigrationPlan | None) -> None:
        self.version = session_version(header)
        self.plan = plan
        self.new_id = migration_ids(header["id"])
        self.previous_id: str | None = None
        self.assigned: dict[int, str] = {}  # ids given at positions that a compaction names

    def apply(self, value: Any, position: int) -> None:
        if self.version < 2:
            self._v1_to_v2(value, position)
        if self.version < CURRENT_SESSION_VERSION:
            if not isinstance(value, dict):
                return
            if value.get("type") == "session":
                value["version"] = 3
            elif value.get("type") == "message":
                message = value.get("message")
                if isinstance(message, dict) and message.get("role") == "hookMessage":
                    message["role"] = "custom"

    def _v1_to_v2(self, value: Any, position: int) -> None:
        if isinstance(value, dict) and value.get("type") == "session":
            value["version"] = 2
            return
        entry_id = self.new_id()
        if isinstance(value, dict):
            value["id"] = entry_id
            value["parentId"] = self.previous_id
        self.previous_id = entry_id
        assert self.plan is not None
        if position in self.plan.named:
            self.assigned[position] = entry_id
        if isinstance(value, dict) and value.get("type") == "compaction":
            self._first_kept(value, position)

    def _first_kept(self, compaction: dict, position: int) -> None:
        index = compaction.get("firstKeptEntryIndex")
        if isinstance(index, bool) or not isinstance(index, (int, float)):
            return  # not a number: left alone
        plan = self.plan
        assert plan is not None
        target = _index_position(index)
        if target is not None and target < plan.count and plan.shapes[target] != _SESSION:
            if target <= position:  # already migrated: it has its new id (an array its hidden one)
                compaction["firstKeptEntryId"] = self.assigned[target]
            elif plan.shapes[target] == _OBJECT and target in plan.later_ids:
                compaction["firstKeptEntryId"] = plan.later_ids[target]
            else:  # a later object without an id, or an array: the id is undefined
                compaction.pop("firstKeptEntryId", None)
        del compaction["firstKeptEntryIndex"]


# ---------------------------------------------------------------------------------------------
# the reader


_BEFORE, _BODY, _NOT_SESSION = 0, 1, 2


class LineReader:
    """Classifies a file's physical lines in order (see the module docstring).

    ``warn`` receives each oddity as it is found (it may raise to stop the read). A v1 file
    needs ``plan`` (:func:`plan_v1_migration`); :func:`head_of` tells beforehand. To continue a
    stored session (lines appended to its file), start at ``first_seq`` with ``in_body=True``.
    """

    def __init__(self, warn: Callable[[LineWarning], None], *, plan: MigrationPlan | None = None,
                 first_seq: int = 0, in_body: bool = False) -> None:
        self.warn = warn
        self.plan = plan
        self.seq = first_seq
        self.header: dict | None = None
        self.pi_valid = True
        self.invalid_reason: str | None = None
        self.migrated_from: str | None = None
        self.crlf_lines = 0
        self._first_crlf = 0
        self._state = _BODY if in_body else _BEFORE
        self._migration: _Migration | None = None
        self._position = 1  # of the next kept value after the header (position 0), while migrating

    def read(self, raw_line: RawLine) -> LineRow:
        """The row of the next physical line. (This runs once per line of every import: the
        common case — a valid UTF-8 line holding an entry object — takes the shortest path.)"""
        data = raw_line.data
        seq = self.seq
        self.seq = seq + 1
        number = seq + 1
        raw = None
        try:  # decode_line, inlined on this path
            text, valid = data.decode("utf-8"), True
        except UnicodeDecodeError:
            text, valid = data.decode("utf-8", "replace"), False
            raw = data
            self.warn(LineWarning(number, "invalid UTF-8 (read with U+FFFD replacement, bytes kept)"))
        stored = text
        if "\x00" in text:  # never in JSON Pi parses (a raw control character): a skipped line
            raw = data
            stored = text.replace("\x00", "\ufffd")  # PostgreSQL text cannot hold NUL
        eol = raw_line.eol
        if eol == b"\n":
            eol_text = "\n"
        elif eol:
            eol_text = "\r\n"
            if not self.crlf_lines:
                self._first_crlf = number
            self.crlf_lines += 1
        else:
            eol_text = ""
            self.warn(LineWarning(number, "no newline at the end of the file (Pi appends one when it opens it)"))
        try:
            value = parse(data, text, valid)
        except JsonLineError as exc:
            self.warn(LineWarning(number, _not_json_reason(text, exc)))
            return LineRow(seq, SKIPPED, UNDEFINED, stored, raw, eol_text)
        if value.__class__ is dict:
            if not _writes_back(value, data):
                self._duplicate_keys(text, number)
            body_entry = self._state == _BODY and value.get("type") != "session"
            kind = ENTRY if body_entry else self._kind(value, number)
        elif not truthy(value):
            self.warn(LineWarning(number, f"JSON {js_stringify(value)} is falsy, Pi skips it"))
            return LineRow(seq, SKIPPED, UNDEFINED, stored, raw, eol_text)
        else:
            if value.__class__ is list and not _writes_back(value, data):
                self._duplicate_keys(text, number)
            kind = self._kind(value, number)
        if kind == SKIPPED:
            return LineRow(seq, kind, UNDEFINED, stored, raw, eol_text)
        if self._migration is not None:
            if kind != HEADER:  # the header was migrated when it was found
                self._migration.apply(value, self._position)
                self._position += 1
            migrated = js_stringify(value)
            if migrated != text or raw is not None:
                raw = raw if raw is not None else text.encode("utf-8")
                text = migrated
        if kind in (ENTRY, HEADER):
            entry_type = value.get("type")
            known = KNOWN_FIELDS.get(entry_type) if entry_type.__class__ is str else None
            if known is None or not known.issuperset(value) or (entry_type == "message" and not _known_role(value)):
                what = "the session header" if kind == HEADER else f"a {entry_type} entry"
                for reason in _shape_warnings(value, what):
                    self.warn(LineWarning(number, reason))
        return LineRow(seq, kind, value, text, raw, eol_text)

    def _duplicate_keys(self, text: str, number: int) -> None:
        for key in _duplicate_keys(text):
            self.warn(LineWarning(number, f"duplicate key {key!r} in a JSON object (the last value wins)"))

    def _kind(self, value: Any, number: int) -> str:
        if self._state == _BODY:
            if not isinstance(value, dict):
                self.warn(LineWarning(number, "a JSON value that is not an object (Pi keeps it as an entry)"))
                return VALUE
            if value.get("type") == "session":
                self.warn(LineWarning(number, "a second session header (Pi ignores it)"))
                return EXTRA_HEADER
            return ENTRY
        if self._state == _NOT_SESSION:
            return SKIPPED
        if not is_header(value):
            self._state = _NOT_SESSION
            self._reject("the first JSON line is not a session header: Pi rejects the file")
            self.warn(LineWarning(number, self.invalid_reason or ""))
            return SKIPPED
        self._state = _BODY
        self.header = value
        self._start_migration(value, number)
        return HEADER

    def _reject(self, reason: str) -> None:
        self.pi_valid = False
        self.invalid_reason = reason

    def _start_migration(self, header: dict, number: int) -> None:
        version = session_version(header)
        if version >= CURRENT_SESSION_VERSION:
            return
        if version < 2:
            if self.plan is None:
                raise ValueError("a v1 file needs its migration plan (plan_v1_migration)")
            if self.plan.error is not None:
                self._reject(f"Pi's migration fails on this file: {self.plan.error}")
                self.warn(LineWarning(number, self.invalid_reason or ""))
                return
        stored = header.get("version", UNDEFINED)
        self.migrated_from = "1" if stored is UNDEFINED or stored is None else js_stringify(stored)
        self._migration = _Migration(header, self.plan)
        self._migration.apply(header, 0)

    def finish(self, total_bytes: int) -> None:
        """Call after the last line: file-level verdicts and the CRLF summary."""
        if self.crlf_lines:
            self.warn(LineWarning(self._first_crlf, f"CRLF line ending{'s' if self.crlf_lines > 1 else ''} "
                                  f"({self.crlf_lines} line{'s' if self.crlf_lines > 1 else ''} from here; "
                                  "Pi reads the \\r as whitespace and keeps it)"))
        if self._state == _BEFORE and total_bytes > 0:
            self._reject("no JSON line at all, so no session header: Pi rejects the file")
            self.warn(LineWarning(1, self.invalid_reason or ""))


# ---------------------------------------------------------------------------------------------
# a file's identity


@dataclass(frozen=True, slots=True)
class FileHead:
    """What the first JSON line of a file says: its header (if it is one) and whether a v1
    migration plan is needed before reading it; ``line`` is that line's number (0: no line Pi
    keeps) and ``value`` what it holds."""

    header: dict | None
    needs_plan: bool
    line: int = 0
    value: Any = UNDEFINED

    def not_session_reason(self, size: int, starts_with_bom: bool) -> str:
        """Why Pi does not open a file of ``size`` bytes with this head (``header`` is None)."""
        if size == 0:
            return "an empty file"
        bom = " (the file starts with a UTF-8 byte order mark, and JSON.parse refuses that line)" \
            if starts_with_bom else ""
        if not self.line:
            return f"no line of it is JSON{bom}"
        value = self.value
        if isinstance(value, dict) and value.get("type") == "session":
            shown = js_stringify(value["id"]) if "id" in value else "no id"
            what = f'a "session" line whose id is not a string ({shown})'
        elif isinstance(value, dict):
            kind = value.get("type", UNDEFINED)
            what = f"an object of type {js_stringify(kind)}" if kind is not UNDEFINED else "an object without a type"
        else:
            what = f"the JSON value {js_stringify(value)[:40]}"
        return f'its first JSON line (line {self.line}) is {what}, not a session header{bom}'


def head_of(lines: Iterable[RawLine]) -> FileHead:
    """Read lines up to the first one Pi keeps: Pi opens the file only when that one is a
    header (``{"type": "session", "id": <string>}``, any version)."""
    for raw in lines:
        value = parse_kept(raw.data)
        if value is UNDEFINED:
            continue
        if not is_header(value):
            return FileHead(None, False, raw.number, value)
        return FileHead(value, session_version(value) < 2, raw.number, value)
    return FileHead(None, False)


def fallback_session_id(lines: Iterable[RawLine], file_name: str, sha256: Callable[[], str]) -> str:
    """The id of a file Pi does not open: a header id found despite a BOM or garbage before it;
    else the id in Pi's file name; else one derived from name and content (``sha256()``), so
    importing the same file twice names the same session."""
    for raw in lines:
        if b'"session"' not in raw.data:
            continue
        text, _ = decode_line(raw.data)
        try:
            value = js_parse(text.lstrip(BOM))
        except JsonLineError:
            continue
        if is_header(value):
            return value["id"]
    if match := PI_FILE_NAME.search(file_name):
        return match.group(1).lower()
    seed = f"{file_name}\0{sha256()}".encode("utf-8", "surrogatepass")  # an undecodable name has surrogates
    return str(uuid.UUID(bytes=hashlib.sha256(seed).digest()[:16], version=4))
