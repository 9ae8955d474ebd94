"""Differential tests of the context services against committed outputs of the real Pi 1.6.0.

For every committed describe.mjs document (tests/fixtures/oracle) we rebuild, from the entries
alone, every context field Pi computed — context entry ids, projection, session context, token
estimates, the compaction trigger and the compaction preparation for five keep-recent budgets,
and per leaf (``--all-leaves``) the same for that leaf's path — and compare them field by field
with ``js_diff``. Fields the oracle reports as ``{"$error": ...}`` (OracleGuard: Pi would never
terminate) are not judged; where Pi throws (a TypeError on an odd value) our code must raise
the same kind of error. Agreement counts per field are printed at the end of the run.

Corpus cases (licensed files, only a reduced document is committed) read their input from
../shared/corpus/pi-sessions, load it with Pi's rules (including v1/v2 migration with describe's
ids) and compare ``reduce_for_corpus`` of our document.
"""

from __future__ import annotations

import pytest

from tests.oracle_support import (
    FixtureCase,
    is_oracle_error,
    js_diff,
    load_fixture_cases,
    reduce_for_corpus,
)
from tests.services.oracle_compare import (
    LEAF_FIELDS,
    MAIN_FIELDS,
    Agreement,
    NotASession,
    corpus_doc,
    index_by_id,
    leaf_doc,
    load_pi_entries,
    main_leaf_doc,
    path_from_ids,
)

AGREEMENT = Agreement()
CORPUS_LEAF_FIELDS = ("pathIds", "contextEntryIds", "estimateProjectedContextTokens", "prepareCompaction500")

CASES = load_fixture_cases()
FULL_CASES = [case for case in CASES if not case.reduced]
CORPUS_CASES = [case for case in CASES if case.reduced]


def _judge(field: str, oracle: object, ours: object, where: str) -> str | None:
    if is_oracle_error(oracle):
        name = oracle["$error"].get("name") if isinstance(oracle["$error"], dict) else None
        if name == "OracleGuard":  # Pi would never terminate: nothing to judge
            AGREEMENT.skip(field)
            return None
        # Pi threw (a TypeError on an odd value): we must fail the same way, not invent a value.
        ours_name = ours["$error"].get("name") if is_oracle_error(ours) else None
        diff = None if ours_name == name else f"{field}: Pi throws {name}, we give {str(ours)[:80]}"
        AGREEMENT.record(field, diff, where)
        return diff
    diff = js_diff(oracle, ours, field, skip_oracle_errors=True)
    AGREEMENT.record(field, diff, where)
    return diff


def _judge_prepare(field: str, oracle: object, ours: object, where: str) -> list[str]:
    """prepareCompaction is judged per keep-recent budget (one count per budget)."""
    if not isinstance(oracle, dict) or is_oracle_error(oracle):
        diff = _judge(field, oracle, ours, where)
        return [diff] if diff else []
    problems = []
    for budget, expected in oracle.items():
        got = ours.get(budget) if isinstance(ours, dict) else None
        diff = _judge(f"{field}[{budget}]", expected, got, where)
        if diff:
            problems.append(diff)
    return problems


@pytest.mark.parametrize("case", FULL_CASES, ids=lambda case: case.name)
def test_context_fields_match_pi(case: FixtureCase) -> None:
    doc = case.describe
    if doc.get("openError"):
        pytest.skip(f"Pi cannot open this file ({doc['openError']['name']}): no context to compare")
    entries = doc["entries"]
    by_id = index_by_id(entries)
    problems: list[str] = []
    if is_oracle_error(doc["branchIds"]):
        for field in MAIN_FIELDS:
            if field == "prepareCompaction":
                for budget in doc[field]:
                    AGREEMENT.skip(f"{field}[{budget}]")
            else:
                AGREEMENT.skip(field)
    else:
        branch = path_from_ids(doc["branchIds"], by_id)
        ours = main_leaf_doc(entries, branch)
        for field in MAIN_FIELDS:
            if field == "prepareCompaction":
                problems += _judge_prepare(field, doc[field], ours[field], case.name)
            elif diff := _judge(field, doc[field], ours[field], case.name):
                problems.append(diff)
    for leaf in doc.get("allLeaves") or []:
        where = f"{case.name}@{leaf['leafId']}"
        if is_oracle_error(leaf["pathIds"]):
            for field in LEAF_FIELDS:
                AGREEMENT.skip(f"allLeaves.{field}")
            continue
        ours = leaf_doc(entries, leaf["leafId"], path_from_ids(leaf["pathIds"], by_id))
        for field in LEAF_FIELDS:
            if field not in leaf and field not in ours:
                AGREEMENT.record(f"allLeaves.{field}", None, where)  # both undefined
                continue
            if diff := _judge(f"allLeaves.{field}", leaf.get(field), ours.get(field), where):
                problems.append(f"{where}: {diff}")
    assert not problems, "\n".join(problems[:10])


@pytest.mark.parametrize("case", CORPUS_CASES, ids=lambda case: case.name)
def test_corpus_context_fields_match_pi(case: FixtureCase) -> None:
    if case.skip_reason:
        pytest.skip(case.skip_reason)
    expected = case.describe
    if expected.get("openError"):
        pytest.skip(f"Pi cannot open this file ({expected['openError']['name']})")
    try:
        entries = load_pi_entries(case.source_bytes())
    except NotASession as error:
        pytest.fail(f"Pi opened this file but our loader refuses it: {error}")
    ours = reduce_for_corpus(corpus_doc(entries, case.all_leaves))
    # The loader itself must agree (entry shapes and branch), or nothing else is meaningful.
    assert js_diff(expected["entries"], ours["entries"], "entries") is None
    problems: list[str] = []
    for field in ("branchIds", *[f for f in MAIN_FIELDS if f not in ("projection", "sessionContext")]):
        if field == "prepareCompaction":
            problems += _judge_prepare(f"corpus.{field}", expected[field], ours[field], case.name)
        elif diff := _judge(f"corpus.{field}", expected[field], ours[field], case.name):
            problems.append(diff)
    if case.all_leaves:
        expected_leaves = [leaf["leafId"] for leaf in expected["allLeaves"]]
        assert expected_leaves == [leaf["leafId"] for leaf in ours["allLeaves"]]
        for theirs, mine in zip(expected["allLeaves"], ours["allLeaves"], strict=True):
            where = f"{case.name}@{theirs['leafId']}"
            for field in CORPUS_LEAF_FIELDS:
                if diff := _judge(f"corpus.allLeaves.{field}", theirs[field], mine[field], where):
                    problems.append(f"{where}: {diff}")
    assert not problems, "\n".join(problems[:10])


def agreement_report() -> str:
    return AGREEMENT.table()
