"""Seeded fast subset of the full-text search differential (``tools/search_differential.py``): one
corpus of sessions on SQLite and on PostgreSQL, seeded queries on both, the answers compared with
each other and, for ASCII queries, with an oracle independent of both engines; and the judge's own
teeth: a difference of no documented kind is a failure."""

from __future__ import annotations

import pytest

from tests.campaigns import search_differential as sd
from tests.conftest import scratch_pg_database

SEED = 11
QUERIES = 200
SESSIONS = 30
NO_LONG_TEXT = 0  # long texts cost the most per query (the campaign has them: tsvector positions)

# Differences the full campaign found and diagnosed (``sd.DIAGNOSES``), reported and not fixed yet:
# while one shows up here the test is an expected failure (xfail, with the queries); any other
# failure fails it.
OPEN = {
    "tsvector-positions": "PostgreSQL checks phrases on to_tsvector positions: none past 16,383, 256 per word",
    "phrase-other-numbers": "PostgreSQL's phrase check drops ², ½, ①, Ⅻ (pi_search_vector and to_tsquery)",
    "parser-exponents": "PostgreSQL's phrase check reads 1e293x as 1e293 and x (the text-search parser)",
    "letter-numbers": "PostgreSQL ends a word at a letter number (Ⅻ, 〇); SQLite and the query's words do not",
    "unicode61-tables": "SQLite's unicode61 folds case with Unicode 6.1 tables (İ, Cherokee, Mtavruli, ς)",
    "lower-then-split": "PostgreSQL lower-cases before splitting: İ becomes i + U+0307, which ends the word",
}


def _run(engines: list[str]) -> sd.Campaign:
    return sd.run_campaign(queries=QUERIES, seed=SEED, sessions=SESSIONS, engines=engines, long_every=NO_LONG_TEXT,
                           log=lambda line: None)


def _listed(outcomes: list[sd.Outcome]) -> str:
    return "\n".join(f"query {o.index} ({o.kind}, {o.diagnosis}): {o.query[:200]!r}: {o.detail[:600]}"
                     for o in outcomes)


def test_sqlite_answers_ascii_queries_as_the_oracle() -> None:
    campaign = _run(["sqlite"])
    assert len(campaign.outcomes) == QUERIES
    assert not campaign.failures, campaign.summary() + "\n" + _listed(campaign.failures)
    assert sum(o.answers["sqlite"].refused is not None for o in campaign.outcomes) >= 5  # BadQuery exercised
    assert sum(bool(o.answers["sqlite"].hits) for o in campaign.outcomes) >= QUERIES // 2


def test_sqlite_and_postgresql_agree() -> None:
    with scratch_pg_database("pi_search_probe"):  # the campaign makes its own; skip (loudly) without a server
        pass
    campaign = _run(["sqlite", "postgresql"])
    assert len(campaign.outcomes) == QUERIES
    kinds = {o.kind for o in campaign.outcomes if o.status == "differing"}
    assert {"combining-or-private-use", "long-word-refused"} <= kinds <= set(sd.KNOWN_KINDS)
    unknown = [o for o in campaign.failures
               if not o.diagnosis or not set(o.diagnosis.split("+")) <= set(OPEN)]
    assert not unknown, campaign.summary() + "\n" + _listed(unknown)
    assert sum(o.status == "identical" for o in campaign.outcomes) >= QUERIES * 3 // 4
    if campaign.failures:
        pytest.xfail(f"{campaign.summary()}; open: {sorted({o.diagnosis for o in campaign.failures})}\n"
                     + _listed(campaign.failures))


def _doc(index: int, text: str) -> sd.Doc:
    return sd.Doc(index, 0, "user", [text], text.split())


DOCS = [_doc(0, "le cafe\u0301 noir"), _doc(1, "plain words here"), _doc(2, "x" * 2100 + " tail"),
        _doc(3, "alpha\ue000beta")]


@pytest.mark.parametrize(("query", "sqlite", "postgresql", "status", "kind"), [
    ("plain", [1], [1], "identical", None),
    ("cafe", [], [0], "differing", "combining-or-private-use"),  # docs/sql.md: SQLite keeps the accent in its word
    ("alpha", [], [3], "differing", "combining-or-private-use"),  # ... and a private-use character
    ("x" * 2100, [2], "refused", "differing", "long-word-refused"),
    ("x*", [2], [], "differing", "long-word-unindexed"),
    ("plain", [1], [], "failure", "unclassified"),  # no documented kind: PostgreSQL lost a hit
    ("noir", [0], [0, 1], "failure", "unclassified"),
    ("words", [], [], "failure", "oracle"),  # both agree, both wrong: the oracle has the hit
    ("plain", [1], "error", "failure", "exception"),
    ("words", [1], "refused", "failure", "refused-on-one"),
    ("-plain", "refused", "refused", "identical", None),
])
def test_the_judge(query: str, sqlite, postgresql, status: str, kind: str | None) -> None:
    def answer(given) -> sd.Answer:
        if given == "refused":
            return sd.Answer(refused="BadQuery")
        if given == "error":
            return sd.Answer(error="Traceback ...\nOperationalError: boom")
        return sd.Answer(hits=given)

    outcome = sd.judge(0, query, {"sqlite": answer(sqlite), "postgresql": answer(postgresql)}, sd.Models(DOCS), {})
    assert (outcome.status, outcome.kind) == (status, kind), outcome.detail


def test_a_limited_answer_must_start_the_full_one() -> None:
    answers = {"sqlite": sd.Answer(hits=[3, 1]), "postgresql": sd.Answer(hits=[3, 1])}
    limited = {"postgresql": (1, sd.Answer(hits=[1]))}
    outcome = sd.judge(0, "plain OR alpha", answers, sd.Models(DOCS), limited)
    assert (outcome.status, outcome.kind) == ("failure", "limit")


def test_queries_and_corpus_are_reproducible_by_seed() -> None:
    docs = sd.make_corpus(SEED, 5)
    assert [d.text for d in docs] == [d.text for d in sd.make_corpus(SEED, 5)]
    assert sd.make_query(SEED, 7, docs) == sd.make_query(SEED, 7, docs)
    assert [sd.make_query(SEED, i, docs) for i in range(20)] != [sd.make_query(SEED + 1, i, docs) for i in range(20)]
