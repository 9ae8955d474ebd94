"""Pi's reading rules applied line by line: which physical lines are the header, entries, values
Pi would keep, or lines it would skip — plus the v1→v3 migration Pi performs on open.

Nothing is dropped here: a skipped line is still a row (``kind="skipped"``) so that export can
reproduce the file; every oddity is reported as a :class:`LineWarning` naming the line.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from store.format import JsonLineError, decode_line, js_parse, js_stringify, migrate_entries
from store.format.jsvalue import UNDEFINED, js_trim, truthy
from store.format.lines import RawLine
from store.format.migrate import MigrationError

HEADER, ENTRY, VALUE, EXTRA_HEADER, SKIPPED = "header", "entry", "value", "extra_header", "skipped"
PI_FILE_NAME = re.compile(r"_([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})\.jsonl$")


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


@dataclass(slots=True)
class LoadedFile:
    """A session file read the way Pi reads it (see module docstring)."""

    rows: list[LineRow]
    header: dict | None
    pi_valid: bool
    invalid_reason: str | None = None
    migrated_from: str | None = None
    warnings: list[LineWarning] = field(default_factory=list)


def load_lines(lines: Iterable[RawLine]) -> LoadedFile:
    """Classify every physical line; migrate to v3 when Pi would; never drop a line."""
    rows: list[LineRow] = []
    warnings: list[LineWarning] = []
    header: dict | None = None
    first_parsed: Any = UNDEFINED
    total_bytes = 0
    for raw_line in lines:
        total_bytes += len(raw_line.data) + len(raw_line.eol)
        text, valid_utf8 = decode_line(raw_line.data)
        has_nul = "\x00" in text
        stored = text.replace("\x00", "\ufffd") if has_nul else text  # PostgreSQL text cannot hold NUL
        raw = raw_line.data if has_nul or not valid_utf8 else None
        eol = raw_line.eol.decode("ascii")
        number = raw_line.number
        if not valid_utf8:
            warnings.append(LineWarning(number, "invalid UTF-8 (read with U+FFFD replacement, bytes kept)"))
        if eol == "\r\n":
            warnings.append(LineWarning(number, "CRLF line ending"))
        elif eol == "":
            warnings.append(LineWarning(number, "no newline at end of file"))
        kind, value = SKIPPED, UNDEFINED
        if not js_trim(text):
            warnings.append(LineWarning(number, "blank line (Pi skips it)"))
        else:
            try:
                value = js_parse(text)
            except JsonLineError as exc:
                warnings.append(LineWarning(number, f"not JSON, Pi skips it: {exc}"))
            else:
                if not truthy(value):
                    warnings.append(LineWarning(number, f"JSON {js_stringify(value)} is falsy, Pi skips it"))
                    value = UNDEFINED
                elif first_parsed is UNDEFINED:
                    first_parsed = value
                    if _is_header(value):
                        kind, header = HEADER, value
                elif isinstance(value, dict):
                    kind = EXTRA_HEADER if value.get("type") == "session" else ENTRY
                    if kind == EXTRA_HEADER:
                        warnings.append(LineWarning(number, "a second session header (Pi ignores it)"))
                else:
                    kind = VALUE
                    warnings.append(LineWarning(number, "JSON value that is not an object"))
        rows.append(LineRow(len(rows), kind, value, stored, raw, eol))

    loaded = LoadedFile(rows, header, pi_valid=True, warnings=warnings)
    if header is None:
        if total_bytes > 0:
            loaded.pi_valid = False
            loaded.invalid_reason = "no session header before the first entry (Pi rejects the file)"
            for row in rows:  # Pi reads nothing of such a file: keep every line, interpret none
                row.kind, row.value = SKIPPED, UNDEFINED
        return loaded
    _migrate(loaded)
    return loaded


def _is_header(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") == "session" and isinstance(value.get("id"), str)


def _migrate(loaded: LoadedFile) -> None:
    kept = [row for row in loaded.rows if row.kind != SKIPPED]
    version = loaded.header.get("version", UNDEFINED) if loaded.header else UNDEFINED
    values = [row.value for row in kept]
    ids = _migration_ids(loaded.header["id"] if loaded.header else "")
    try:
        migrated = migrate_entries(values, ids)
    except MigrationError as exc:
        loaded.pi_valid = False
        loaded.invalid_reason = f"Pi's migration fails on this file: {exc}"
        return
    if not migrated:
        return
    loaded.migrated_from = "1" if version is UNDEFINED or version is None else js_stringify(version)
    for row in kept:
        text = js_stringify(row.value)
        if text != row.line or row.raw is not None:
            row.raw = row.raw if row.raw is not None else row.line.encode("utf-8")
            row.line = text


def _migration_ids(seed: str):
    """Deterministic 8-hex ids for migrated v1 entries (Pi draws random ones; re-import must be stable)."""
    used: set[str] = set()
    counter = 0

    def new_id() -> str:
        nonlocal counter
        while True:
            counter += 1
            candidate = hashlib.sha256(f"{seed}:{counter}".encode()).hexdigest()[:8]
            if candidate not in used:
                used.add(candidate)
                return candidate

    return new_id


def session_id_for(loaded: LoadedFile, file_name: str, sha256: str) -> str:
    """The header id; else a header id found despite a BOM; else Pi's file-name id; else one
    derived from the content, so importing the same file twice names the same session."""
    if loaded.header is not None:
        return loaded.header["id"]
    for row in loaded.rows:
        text = row.line.lstrip("\ufeff")
        if '"session"' in text:
            try:
                value = js_parse(text)
            except JsonLineError:
                continue
            if _is_header(value):
                return value["id"]
    if match := PI_FILE_NAME.search(file_name):
        return match.group(1).lower()
    return str(uuid.UUID(bytes=hashlib.sha256(f"{file_name}\0{sha256}".encode()).digest()[:16], version=4))
