"""The committed Pi-oracle fixtures (tests/fixtures/oracle) are sane and current.

No store code is involved: these tests check the fixtures against themselves, the corpus in
../shared and (when installed) the live oracle, and unit-test the comparison helpers.
Regenerate the fixtures with `python tools/oracle_fixtures.py` (MANIFEST.json "regenerate").
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.oracle_support import (
    CORPUS_DIR,
    FIXTURES,
    MANIFEST,
    ORACLE_SKIP_REASON,
    ORACLE_SRC,
    PI_VERSION,
    FixtureCase,
    js_diff,
    js_equal,
    load_fixture_cases,
    load_manifest,
    oracle_available,
    read_gz_json,
    reduce_for_corpus,
    run_describe,
    run_describe_raw,
    run_gen,
    sha256_bytes,
    sha256_file,
    text_sha256,
    wants_all_leaves,
)

CASES: list[FixtureCase] = load_fixture_cases() if MANIFEST.is_file() else []
SESSION_CASES = [c for c in CASES if c.jsonl is not None]
CORPUS_CASES = [c for c in CASES if c.kind == "corpus"]
needs_oracle = pytest.mark.skipif(not oracle_available(), reason=ORACLE_SKIP_REASON or "oracle available")

HEX64 = re.compile(r"[0-9a-f]{64}")
REDUCED_KEYS = {
    "describeFormat", "piVersion", "file", "inputSha256", "inputBytes", "openError", "rawParse", "leafId",
    "branchIds", "contextEntryIds", "latestCompactionId", "estimateProjectedContextTokens",
    "estimateContextTokens", "messageTokenEstimates", "shouldCompact", "sessionName", "tree", "listInfo",
    "prepareCompaction", "fileAfterOpen", "header", "entries", "allLeaves",
}


def ids(cases: list[FixtureCase]) -> list[str]:
    return [f"{c.kind}/{c.name}" for c in cases]


def strings_in(value: Any, path: str = "$") -> list[tuple[str, str]]:
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in strings_in(item, f"{path}.{key}")]
    if isinstance(value, list):
        return [found for item in value for found in strings_in(item, f"{path}[]")]
    return [(path, value)] if isinstance(value, str) else []


def text_like(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """Strings in a reduced document that could be session text: longer than an id (a UUID has 36
    characters) and not a sha256 hex; the file name and openError's message are allowed."""
    return [(path, text[:60]) for path, text in strings_in(doc)
            if len(text) > 40 and not HEX64.fullmatch(text) and path not in ("$.file", "$.openError.message")]


# ---------------------------------------------------------------------------------------------
# The fixture set


def test_fixtures_exist() -> None:
    assert MANIFEST.is_file(), f"no {MANIFEST}: run `python tools/oracle_fixtures.py`"
    kinds = {c.kind for c in CASES}
    assert {"gen-small", "gen-medium", "legacy"} <= kinds, kinds


def test_manifest_lists_exactly_the_files() -> None:
    manifest = load_manifest()
    listed = {FIXTURES / f[key] for f in manifest["fixtures"] for key in ("session", "describe")
              if f.get(key)}
    present = {p for folder in ("sessions", "describe", "corpus", "crafted") for p in (FIXTURES / folder).glob("*")}
    assert sorted(map(str, present - listed)) == [], "files not in MANIFEST.json"
    assert sorted(map(str, listed - present)) == [], "MANIFEST.json files missing"
    counts: dict[str, int] = {}
    for f in manifest["fixtures"]:
        counts[f["kind"]] = counts.get(f["kind"], 0) + 1
        assert f["piVersion"] == PI_VERSION
        assert (f["gen"] is not None) == (f["kind"] not in ("corpus", "crafted"))
    assert counts == manifest["counts"]
    names = [(c.kind == "corpus", c.name) for c in CASES]
    assert len(names) == len(set(names)), "duplicate fixture names"


def test_no_corpus_file_is_committed() -> None:
    corpus_names = {c.name for c in CORPUS_CASES}
    committed = {p.stem for p in (FIXTURES / "sessions").glob("*.jsonl")}
    assert corpus_names & committed == set()
    if CORPUS_DIR.is_dir():
        corpus_hashes = {sha256_file(p) for p in CORPUS_DIR.glob("*.jsonl")}
        assert {c.source_sha256 for c in SESSION_CASES} & corpus_hashes == set()


def test_manifest_matches_the_shared_oracle_scripts() -> None:
    """Fixtures made by other gen.mjs/describe.mjs revisions than ../shared/oracle's are stale."""
    if not ORACLE_SRC.is_dir():
        pytest.skip(f"{ORACLE_SRC} is absent")
    oracle = load_manifest()["oracle"]
    current = {
        "genMjsSha256": sha256_file(ORACLE_SRC / "gen.mjs"),
        "libMjsSha256": sha256_file(ORACLE_SRC / "lib.mjs"),
        "describeMjsSha256": sha256_file(ORACLE_SRC / "describe.mjs"),
    }
    stale = {key: value for key, value in current.items() if oracle[key] != value}
    assert not stale, f"../shared/oracle changed since the fixtures were made ({sorted(stale)}): " \
                      f"run `{load_manifest()['regenerate']}`"


@pytest.mark.parametrize("case", SESSION_CASES, ids=ids(SESSION_CASES))
def test_session_fixture_matches_its_describe(case: FixtureCase) -> None:
    assert case.jsonl is not None
    data = case.jsonl.read_bytes()
    doc = case.describe
    assert sha256_bytes(data) == doc["inputSha256"] == case.source_sha256
    assert doc["inputBytes"] == len(data)
    assert doc["file"] == case.jsonl.name
    assert doc["piVersion"] == PI_VERSION
    assert case.all_leaves == wants_all_leaves(data)
    assert ("allLeaves" in doc) == (case.all_leaves and doc["openError"] is None)  # no fields after openError
    assert not case.reduced


@pytest.mark.parametrize("case", CORPUS_CASES, ids=ids(CORPUS_CASES))
def test_corpus_fixture_matches_the_corpus_file(case: FixtureCase) -> None:
    if case.skip_reason:
        pytest.skip(case.skip_reason)
    data = case.source_bytes()
    doc = case.describe
    assert sha256_bytes(data) == doc["inputSha256"] == case.source_sha256
    assert doc["inputBytes"] == len(data)
    assert doc["file"] == case.source_path.name
    assert case.all_leaves == wants_all_leaves(data)
    assert ("allLeaves" in doc) == (case.all_leaves and doc["openError"] is None)


@pytest.mark.parametrize("case", CORPUS_CASES, ids=ids(CORPUS_CASES))
def test_corpus_fixture_holds_no_corpus_text(case: FixtureCase) -> None:
    doc = case.describe
    assert case.reduced
    assert set(doc) <= REDUCED_KEYS
    assert text_like(doc) == []
    for entry in doc.get("entries", []):
        assert set(entry) <= {"id", "parentId", "type", "jsonType", "$error"}


@pytest.mark.parametrize("case", SESSION_CASES, ids=ids(SESSION_CASES))
def test_reduce_for_corpus_handles_every_describe_shape(case: FixtureCase) -> None:
    reduced = reduce_for_corpus(case.describe)
    assert set(reduced) <= REDUCED_KEYS
    json.dumps(reduced, ensure_ascii=True)
    assert text_like(reduced) == []
    assert len(reduced.get("entries", [])) == len(case.describe.get("entries", []))
    assert js_equal(reduce_for_corpus(json.loads(json.dumps(case.describe))), reduced)


# ---------------------------------------------------------------------------------------------
# reduce_for_corpus


def test_reduce_for_corpus_rules() -> None:
    summary = {"firstKeptEntryId": "b", "isSplitTurn": False, "tokensBefore": 10, "previousSummary": "old",
               "messagesToSummarize": {"count": 1, "roles": ["user"]},
               "turnPrefixMessages": {"count": 0, "roles": []},
               "fileOps": {"read": ["a.py", "b.py"], "edited": [], "written": ["c"]},
               "readFiles": ["a.py"], "modifiedFiles": [], "settings": {"keepRecentTokens": 0}}
    doc = {
        "describeFormat": 1, "file": "x.jsonl", "inputBytes": 3, "openError": None,
        "header": {"type": "session", "id": "s", "cwd": "/home/secret", "version": 3},
        "entries": [{"type": "message", "id": "a", "parentId": None, "message": {"content": "secret"}},
                    42, "a string line"],
        "tree": [{"id": "a", "treeParentId": None, "depth": 0, "type": "message", "label": "lbl",
                  "labelTimestamp": "t", "children": []}],
        "sessionName": "name", "listInfo": {"id": "s", "cwd": "/c", "name": None, "parentSessionPath": None,
                                            "created": "c", "modified": "m", "messageCount": 1,
                                            "firstMessage": "hi", "allMessagesText": "hi"},
        "prepareCompaction": {"0": summary, "50": None,
                              "500": {"$error": {"name": "TypeError", "message": "m"}}},
        "fileAfterOpen": {"changed": True, "content": "text\n"},
        "branchIds": {"$error": {"name": "OracleGuard", "message": "cycle at a"}},
        "sessionContext": {"messages": ["secret"]}, "projection": {}, "futureField": "secret",
        "allLeaves": [{"leafId": "a", "pathIds": ["a"], "contextEntryIds": ["a"], "projection": [],
                       "thinkingLevel": "off", "model": None, "estimateProjectedContextTokens": {"tokens": 1},
                       "prepareCompaction500": None}],
    }
    h = text_sha256
    assert reduce_for_corpus(doc) == {
        "describeFormat": 1, "file": "x.jsonl", "inputBytes": 3, "openError": None,
        "branchIds": {"$error": {"name": "OracleGuard", "message": h("cycle at a")}},
        "sessionName": h("name"),
        "tree": [{"id": "a", "treeParentId": None, "depth": 0, "type": "message", "labelTimestamp": "t",
                  "children": [], "label": h("lbl")}],
        "listInfo": {"id": "s", "created": "c", "modified": "m", "messageCount": 1, "cwd": h("/c"),
                     "name": None, "parentSessionPath": None, "firstMessage": h("hi"),
                     "allMessagesText": h("hi")},
        "prepareCompaction": {
            "0": {"firstKeptEntryId": "b", "isSplitTurn": False, "tokensBefore": 10,
                  "messagesToSummarize": {"count": 1, "roles": ["user"]},
                  "turnPrefixMessages": {"count": 0, "roles": []}, "settings": {"keepRecentTokens": 0},
                  "previousSummary": h("old"),
                  "fileOps": {"read": h("a.py\nb.py"), "edited": h(""), "written": h("c")},
                  "readFiles": h("a.py"), "modifiedFiles": h("")},
            "50": None,
            "500": {"$error": {"name": "TypeError", "message": h("m")}},
        },
        "fileAfterOpen": {"changed": True, "content": h("text\n")},
        "header": {"id": "s", "type": "session"},
        "entries": [{"id": "a", "parentId": None, "type": "message"}, {"jsonType": "number"},
                    {"jsonType": "string"}],
        "allLeaves": [{"leafId": "a", "pathIds": ["a"], "contextEntryIds": ["a"],
                       "estimateProjectedContextTokens": {"tokens": 1}, "prepareCompaction500": None}],
    }


def test_text_sha256_handles_lone_surrogates() -> None:
    assert text_sha256("\ud800") == sha256_bytes(b"\xed\xa0\x80")
    assert text_sha256("é") == sha256_bytes("é".encode())


# ---------------------------------------------------------------------------------------------
# js_equal / js_diff


def test_js_equal_ignores_key_order() -> None:
    assert js_equal({"a": 1, "b": [1, 2]}, {"b": [1, 2], "a": 1})
    assert js_diff({"a": 1, "b": 2}, {"b": 2, "a": 1}) is None


def test_js_equal_arrays_in_order_and_length() -> None:
    assert not js_equal([1, 2], [2, 1])
    assert js_diff([1, 2], [1, 2, 3]) == "$.length: 2 != 3"


def test_js_equal_numbers_as_doubles() -> None:
    assert js_equal(1, 1.0)
    assert js_equal(12345678901234567890, 1.2345678901234567e19)
    assert js_equal(12345678901234567890, 12345678901234567000)
    assert js_equal(json.loads("1e21"), json.loads("1E+21"))
    assert js_equal(0, -0.0)
    assert not js_equal(0.1 + 0.2, 0.3)
    assert not js_equal(2**53, 2**53 + 2)
    assert js_equal(10**400, 10**400) and not js_equal(10**400, 10**400 + 1)


def test_js_equal_booleans_are_not_numbers() -> None:
    assert not js_equal(True, 1)
    assert not js_equal(0, False)
    assert js_diff([True], [1]) == "$[0]: true != 1"
    assert js_equal(True, True)


def test_js_equal_missing_is_not_null() -> None:
    assert not js_equal({"a": None}, {})
    assert js_diff({"a": None}, {}) == "$.a: null != <missing>"
    assert js_diff({}, {"b": None}) == "$.b: <missing> != null"
    assert not js_equal(None, {})
    assert not js_equal("1", 1)


def test_js_diff_nested_paths() -> None:
    a = {"tree": [{"id": "x", "children": ["y"]}], "weird key": {"1": True}}
    assert js_diff(a, json.loads(json.dumps(a))) is None
    b = {"tree": [{"id": "x", "children": ["z"]}], "weird key": {"1": True}}
    assert js_diff(a, b) == '$.tree[0].children[0]: "y" != "z"'
    c = {"tree": [{"id": "x", "children": ["y"]}], "weird key": {"1": False}}
    assert js_diff(a, c) == '$["weird key"].1: true != false'
    assert js_diff({"a": {"b": [1]}}, {"a": {"b": {}}}) == "$.a.b: [1] != {}"


def test_js_diff_truncates_values() -> None:
    found = js_diff("x" * 1000, "y")
    assert found is not None and len(found) < 200 and found.endswith('!= "y"')


def test_js_diff_can_skip_oracle_errors() -> None:
    oracle = {"branchIds": {"$error": {"name": "OracleGuard", "message": "cycle"}}, "leafId": "a"}
    ours = {"branchIds": ["a"], "leafId": "a"}
    assert not js_equal(oracle, ours)
    assert js_diff(oracle, ours, skip_oracle_errors=True) is None
    other = {"branchIds": [], "leafId": "b"}
    assert js_diff(oracle, other, skip_oracle_errors=True) == '$.leafId: "a" != "b"'


# ---------------------------------------------------------------------------------------------
# The live oracle: the committed fixtures are what Pi computes today


@pytest.mark.oracle
@needs_oracle
def test_live_oracle_reproduces_a_small_seed(tmp_path: Path) -> None:
    case = next(c for c in CASES if c.kind == "gen-small")
    match = re.fullmatch(r"small-seed(\d+)-0", case.name)
    assert match and case.jsonl is not None
    generated = run_gen(int(match[1]), "small", tmp_path)
    assert generated.read_bytes() == case.jsonl.read_bytes(), \
        f"gen.mjs output changed: run `{load_manifest()['regenerate']}`"
    raw = run_describe_raw(case.jsonl, case.all_leaves)
    found = js_diff(case.describe, json.loads(raw))
    assert found is None, f"describe.mjs output changed ({found}): run `{load_manifest()['regenerate']}`"
    assert read_gz_json(case.describe_path) == json.loads(raw)


@pytest.mark.oracle
@needs_oracle
def test_live_oracle_reproduces_a_reduced_corpus_fixture() -> None:
    present = [c for c in CORPUS_CASES if c.skip_reason is None]
    if not present:
        pytest.skip(f"no corpus files in {CORPUS_DIR}")
    case = min(present, key=lambda c: c.source_path.stat().st_size)
    live = reduce_for_corpus(run_describe(case.source_path, case.all_leaves))
    found = js_diff(case.describe, live)
    assert found is None, f"{case.name}: {found}"
