"""Pi's v1 -> v2 -> v3 migration, checked against what real Pi (describe.mjs) rewrote."""

import hashlib
import json
import math
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from store.format.jsjson import JsonLineError, js_parse, js_stringify
from store.format.lines import decode_line
from store.format.migrate import MigrationError, migrate_entries, needs_migration, session_version
from tests.oracle_support import SHARED

SAMPLES = SHARED / "oracle" / "samples"
CORPUS = SHARED / "corpus" / "pi-sessions"

# What String.prototype.trim() strips (WhiteSpace incl. U+FEFF and Zs, LineTerminator).
JS_TRIM = "\t\n\v\f\r \xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
JS_TRIM += "\u2028\u2029\u202f\u205f\u3000\ufeff"


def _js_falsy(value: Any) -> bool:
    if isinstance(value, (dict, list)):
        return False
    return not value


def load_like_pi(data: bytes) -> list[Any]:
    """Parsed values as Pi's loadEntriesFromFile keeps them (header check included)."""
    text, _ = decode_line(data)
    parsed = []
    for line in text.split("\n"):
        if not line.strip(JS_TRIM):
            continue
        try:
            value = js_parse(line)
        except JsonLineError:
            continue
        if not _js_falsy(value):
            parsed.append(value)
    assert parsed and parsed[0].get("type") == "session" and isinstance(parsed[0].get("id"), str)
    return parsed


def describe_ids() -> Callable[[], str]:
    """describe.mjs pins randomUUID(): the k-th call starts with k as 8 hex digits."""
    counter: Iterator[int] = iter(range(1, 1 << 32))
    return lambda: f"{next(counter):08x}"


def rewritten(parsed: list[Any]) -> str:
    return "".join(js_stringify(value) + "\n" for value in parsed)


# --- the oracle samples --------------------------------------------------------------------------


def _migrated_samples() -> list[tuple[str, dict[str, Any]]]:
    """Samples whose describe output shows a rewrite and whose file needs a migration."""
    found = []
    for path in sorted((SAMPLES / "describe").glob("*.json")):
        doc = json.loads(path.read_text("utf-8"))
        source = SAMPLES / "legacy" / f"{path.stem}.jsonl"
        changed = (doc.get("fileAfterOpen") or {}).get("changed")
        data = source.read_bytes() if source.exists() else b""
        if changed and data and needs_migration(load_like_pi(data)):
            found.append((path.stem, doc))
    return found


def test_expected_samples_are_present() -> None:
    if not (SAMPLES / "describe").exists():
        pytest.skip(f"oracle samples not found under {SAMPLES}")
    names = {name for name, _ in _migrated_samples()}
    expected = {"legacy-v1", "legacy-v1-compaction-edges", "legacy-v2-hookmessage", "edge-version-strings"}
    assert expected <= names


@pytest.mark.parametrize("doc", [pytest.param(doc, id=name) for name, doc in _migrated_samples()])
def test_migration_reproduces_pi_rewrite(doc: dict[str, Any]) -> None:
    name = doc["file"]
    parsed = load_like_pi((SAMPLES / "legacy" / name).read_bytes())
    assert migrate_entries(parsed, describe_ids()) is True
    assert rewritten(parsed) == doc["fileAfterOpen"]["content"]
    assert parsed[0] == doc["header"]
    entries = [e for e in parsed[1:] if not (isinstance(e, dict) and e.get("type") == "session")]
    assert entries == doc["entries"]


# sha256 of fileAfterOpen.content from describe.mjs (Pi 1.6.0) for the corpus files that Pi
# migrates; the describe documents themselves are too large to keep.
CORPUS_REWRITE_SHA256 = [
    (
        "v1-fixture-earendil-prompt-cache-replay.jsonl",
        "5d439b64165fe82b95eadc50167f888679bd9c55f81484e2cdc715ba78e8fac5",
    ),
    (
        "v1-real-badlogic-before-compaction-branchedFrom.jsonl",
        "cf8ebc3f6046b5165f7909c21ef93d5205c9b85ee8a170368063225e624eddd6",
    ),
    (
        "v1-real-badlogic-compact-images-malformed-line.jsonl",
        "133251728fc89065302c862d0874748fc8f00c46cbe79cb4fd49b7cf032915b9",
    ),
    (
        "v1-real-badlogic-large-session.jsonl",
        "d2012468fd5b23db4563358d398fa9ef3c11143eb427ef4bd9d8823baff47c45",
    ),
    (
        "v1-real-badlogic-session-thinking-malformed-line.jsonl",
        "c3e2978878104b6f91e09ff02593e5874e4464e83b7ed7b3ad8654fd498518de",
    ),
    (
        "v1-synthetic-pi-session-recall-compaction-firstKeptEntryIndex.jsonl",
        "a4de811351e63f1276ea22bfcb5e44fe9dfc3ea27cc9021038345b534ae12e4e",
    ),
    (
        "v2-synthetic-pi-session-recall-migrated-layout.jsonl",
        "fcb450df2eda81cd4ddcd2367097d6d1cbf6fee72d32f772ea46803fe65abdf2",
    ),
    (
        "vstr-synthetic-version-string-missing-parentId.jsonl",
        "34d29f42adad97efa5d01adf508afcd614a5dbd4c235993c15dc83bd9a1f7b9e",
    ),
]


@pytest.mark.parametrize(("name", "sha256"), CORPUS_REWRITE_SHA256)
def test_migration_of_corpus_files_matches_pi(name: str, sha256: str) -> None:
    path = CORPUS / name
    if not path.exists():
        pytest.skip(f"corpus file not found: {path}")
    parsed = load_like_pi(path.read_bytes())
    assert migrate_entries(parsed, describe_ids()) is True
    assert hashlib.sha256(rewritten(parsed).encode("utf-8")).hexdigest() == sha256


# --- crafted edge cases, expectations taken from describe.mjs runs on the same input --------------


def header(**extra: Any) -> dict[str, Any]:
    return {"type": "session", "id": "S", "timestamp": "2025-01-01T00:00:00.000Z", "cwd": "/x", **extra}


def message(n: int, **extra: Any) -> dict[str, Any]:
    return {
        "type": "message",
        "timestamp": f"2025-01-01T00:00:0{n}.000Z",
        "message": {"role": "user", "content": f"m{n}", "timestamp": 1},
        **extra,
    }


def compaction(summary: str, **fields: Any) -> dict[str, Any]:
    return {"type": "compaction", "timestamp": "2025-01-01T00:00:05.000Z", "summary": summary, **fields}


def hook_message(role: str = "hookMessage") -> dict[str, Any]:
    return {
        "type": "message",
        "id": "b",
        "parentId": None,
        "timestamp": "2025-01-01T00:00:02.000Z",
        "message": {"role": role, "content": "h", "timestamp": 2},
    }


def assert_same_lines(parsed: list[Any], expected: list[Any]) -> None:
    """Equal values *and* key order, i.e. the same bytes once written."""
    assert [js_stringify(v) for v in parsed] == [js_stringify(v) for v in expected]


def link(n: int, parent: int | None) -> dict[str, Any]:
    return {"id": f"{n:08x}", "parentId": None if parent is None else f"{parent:08x}"}


def test_array_entries_take_an_invisible_id() -> None:
    parsed = [
        header(),
        message(1),
        [1, 2],
        message(2),
        compaction("s", firstKeptEntryIndex=2, tokensBefore=1),
        compaction("later", firstKeptEntryIndex=7, tokensBefore=1),
        message(3),
        [3],
    ]
    assert migrate_entries(parsed, describe_ids()) is True
    assert_same_lines(
        parsed,
        [
            header(version=3),
            {**message(1), **link(1, None)},
            [1, 2],  # got id 00000002 as an array property JSON.stringify never writes
            {**message(2), **link(3, 2)},
            {**compaction("s", tokensBefore=1), **link(4, 3), "firstKeptEntryId": "00000002"},
            {**compaction("later", tokensBefore=1), **link(5, 4)},  # [3] had no id yet
            {**message(3), **link(6, 5)},
            [3],
        ],
    )


def test_first_kept_entry_index_edge_cases() -> None:
    parsed = [
        header(),
        message(1),
        message(2),
        compaction("a", firstKeptEntryIndex=2.5, tokensBefore=1),  # entries[2.5]: undefined
        compaction("b", firstKeptEntryIndex=-1, tokensBefore=1),
        compaction("c", firstKeptEntryIndex=-0.0, firstKeptEntryId="keep-me", tokensBefore=1),  # header
        compaction("d", firstKeptEntryIndex=1.0, tokensBefore=1),
        compaction("e", firstKeptEntryId="dropped", firstKeptEntryIndex=9, tokensBefore=1),
        compaction("f", firstKeptEntryIndex=10, tokensBefore=1),
        compaction("g", firstKeptEntryIndex=True, tokensBefore=1),  # not a number: left alone
        compaction("h", firstKeptEntryIndex=None, tokensBefore=1),
        message(4),
        {"type": "custom", "customType": "x", "id": "orig-id", "timestamp": "t"},
        {"type": "session", "id": "S2", "timestamp": "t", "cwd": "/y"},
        message(5),
    ]
    assert migrate_entries(parsed, describe_ids()) is True
    assert_same_lines(
        parsed,
        [
            header(version=3),
            {**message(1), **link(1, None)},
            {**message(2), **link(2, 1)},
            {**compaction("a", tokensBefore=1), **link(3, 2)},
            {**compaction("b", tokensBefore=1), **link(4, 3)},
            {**compaction("c", firstKeptEntryId="keep-me", tokensBefore=1), **link(5, 4)},
            {**compaction("d", tokensBefore=1), **link(6, 5), "firstKeptEntryId": "00000001"},
            # the targets (g, h) have no id yet: firstKeptEntryId becomes undefined and vanishes
            {**compaction("e", tokensBefore=1), **link(7, 6)},
            {**compaction("f", tokensBefore=1), **link(8, 7)},
            {**compaction("g", firstKeptEntryIndex=True, tokensBefore=1), **link(9, 8)},
            {**compaction("h", firstKeptEntryIndex=None, tokensBefore=1), **link(10, 9)},
            {**message(4), **link(11, 10)},
            {"type": "custom", "customType": "x", "id": "0000000c", "timestamp": "t", "parentId": "0000000b"},
            {"type": "session", "id": "S2", "timestamp": "t", "cwd": "/y", "version": 3},  # no id, no link
            {**message(5), **link(13, 12)},
        ],
    )


@pytest.mark.parametrize(
    ("value", "kind"), [(42, "number '42'"), ("str", "string 'str'"), (True, "boolean 'true'")]
)
def test_primitive_entry_in_v1_file_throws_like_pi(value: Any, kind: str) -> None:
    # Pi: TypeError "Cannot create property 'id' on number '42'" and open() fails.
    with pytest.raises(MigrationError, match=f"^Cannot create property 'id' on {kind}$"):
        migrate_entries([header(), message(1), value, message(2)], describe_ids())


def test_primitive_entry_in_v2_file_is_fine() -> None:
    parsed = [header(version=2), 42, "str", hook_message()]
    assert migrate_entries(parsed, describe_ids()) is True
    assert_same_lines(parsed, [header(version=3), 42, "str", hook_message("custom")])


def test_null_entry_throws() -> None:
    with pytest.raises(MigrationError, match="null"):
        migrate_entries([header(), None], describe_ids())


@pytest.mark.parametrize(
    ("version", "migrated_from_v1"),
    [(None, True), ("", True), ([2], False), ("0x2", False), (2.5, False), ("2", False)],
)
def test_loose_versions(version: Any, migrated_from_v1: bool) -> None:
    parsed = [header(version=version), hook_message()]
    assert migrate_entries(parsed, describe_ids()) is True
    entry = {**hook_message("custom"), **link(1, None)} if migrated_from_v1 else hook_message("custom")
    assert_same_lines(parsed, [header(version=3), entry])


def test_non_numeric_version_rewrites_without_changes() -> None:
    parsed = [header(version="abc"), hook_message()]
    assert migrate_entries(parsed, describe_ids()) is True  # Pi rewrites the file ...
    assert_same_lines(parsed, [header(version="abc"), hook_message()])  # ... unchanged


@pytest.mark.parametrize("version", [3, 3.0, "3", 4, "Infinity", "0b11", [3]])
def test_current_or_future_versions_are_left_alone(version: Any) -> None:
    parsed = [header(version=version), hook_message()]
    assert migrate_entries(parsed, lambda: pytest.fail("no ids for a current file")) is False
    assert parsed == [header(version=version), hook_message()]


def test_v2_file_needs_no_ids() -> None:
    parsed = [header(version=2), hook_message()]
    assert migrate_entries(parsed, lambda: pytest.fail("no ids in v2 -> v3")) is True


# --- version semantics ----------------------------------------------------------------------------

# `Number(v)` from Node 22 for the value a header may carry (null and absent are `?? 1`).
VERSION_GOLDEN = [
    ("2", 2.0),
    (" 2 ", 2.0),
    ("", 0.0),
    ("0x2", 2.0),
    ("2e0", 2.0),
    ("abc", math.nan),
    ("Infinity", math.inf),
    ("-Infinity", -math.inf),
    ("1_0", math.nan),
    ("0b11", 3.0),
    ("0b12", math.nan),
    ("+0x1", math.nan),
    (".5", 0.5),
    ("5.", 5.0),
    ("\xa02\ufeff", 2.0),
    ("\x1c2", math.nan),
    ([2], 2.0),
    ([[2]], 2.0),
    ([1, 2], math.nan),
    ([], 0.0),
    ([None], 0.0),
    ({}, math.nan),
    (True, 1.0),
    (False, 0.0),
    (None, 1.0),
    (3, 3.0),
    (2.5, 2.5),
]


@pytest.mark.parametrize(("version", "expected"), VERSION_GOLDEN, ids=repr)
def test_session_version(version: Any, expected: float) -> None:
    got = session_version({"type": "session", "version": version})
    assert got == expected or (math.isnan(got) and math.isnan(expected))


def test_session_version_absent_is_one() -> None:
    assert session_version({"type": "session"}) == 1.0


def test_needs_migration() -> None:
    assert needs_migration([header()]) is True
    assert needs_migration([header(version=2)]) is True
    assert needs_migration([header(version="abc")]) is True  # NaN: Pi still rewrites
    assert needs_migration([header(version=3)]) is False
    assert needs_migration([header(version="4")]) is False
    assert needs_migration([message(1)]) is True  # no header: version 1
    assert needs_migration([42, header(version=3)]) is False  # the first "session" entry counts


@pytest.mark.parametrize("index", [10**30, 1e300, 2**32, 4.5, -1])
def test_far_or_fractional_index_reads_nothing(index: float) -> None:
    parsed = [header(), message(1), compaction("x", firstKeptEntryIndex=index, firstKeptEntryId="old")]
    migrate_entries(parsed, describe_ids())
    assert "firstKeptEntryIndex" not in parsed[2]
    assert parsed[2]["firstKeptEntryId"] == "old"  # untouched: entries[index] is undefined
