"""Seeded fast subset of the import fuzzing campaign (``tools/fuzz_import.py``; the full run is in
BENCHMARKS.md, "Campaigns"), and the harness's own teeth: its checks notice a changed store."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from store.session_store import SessionStore
from tests.campaigns import fuzz_import
from tests.conftest import scratch_pg_database

SEED = 11


def _run(count: int, engine: str) -> fuzz_import.Campaign:
    # PostgreSQL: the campaign makes its own scratch databases; skip (loudly) when the server is away
    if engine == "postgresql":
        with scratch_pg_database("pi_fuzz_probe"):
            pass
    return fuzz_import.run_campaign(count=count, seed=SEED, engines=[engine], cycle=20, cli_every=15,
                                    timeout=60.0)


@pytest.mark.parametrize(("engine", "count"), [("sqlite", 60), ("postgresql", 20)])
def test_fuzzed_imports_lose_nothing(engine: str, count: int) -> None:
    campaign = _run(count, engine)
    assert len(campaign.results) == count
    assert {r.outcome for r in campaign.results} >= {"accepted", "refused"}  # both paths were exercised
    failures = [f"case {r.case.index} {r.case.source} {r.case.mutations}: {r.error}" for r in campaign.failures]
    assert not failures, campaign.summary() + "\n" + "\n".join(failures)


def test_surrogate_header_id(tmp_path: Path) -> None:
    path = tmp_path / "surrogate.jsonl"
    path.write_bytes(b'{"type":"session","version":3,"id":"\\ud800","timestamp":"2026-01-01T00:00:00.000Z",'
                     b'"cwd":"/tmp"}\n{"type":"message","id":"a1","parentId":null,"timestamp":'
                     b'"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"hi"}}\n')
    with SessionStore.connect(f"sqlite:///{tmp_path / 's.db'}") as store:
        report = store.import_path(path)[0]
        assert report.imported
        assert b"".join(store.iter_export(report.session_id)) == path.read_bytes()


def test_cases_are_reproducible_by_number() -> None:
    sources = fuzz_import.load_sources()
    others = fuzz_import.cycle_others(SEED, 0, sources)
    first = fuzz_import.make_case(SEED, 7, sources, others, 15)
    again = fuzz_import.make_case(SEED, 7, sources, others, 15)
    assert (first.data, first.mutations, first.source) == (again.data, again.mutations, again.source)
    assert fuzz_import.make_case(SEED, 8, sources, others, 15).data != first.data


def test_every_mutator_changes_a_session() -> None:
    data = (fuzz_import.FIXTURES / "small-seed1-0.jsonl").read_bytes()
    for mutator, _ in fuzz_import.MUTATORS:
        assert any(mutator(data, random.Random(k)) != data for k in range(5)), mutator.__name__


def test_the_checker_notices_a_changed_session(tmp_path: Path) -> None:
    """A refused file must leave other sessions alone: the check fails when one changed."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    other = tmp_path / "other.jsonl"
    other.write_bytes((fuzz_import.FIXTURES / "small-seed1-0.jsonl").read_bytes())
    junk = tmp_path / "junk.jsonl"
    data = other.read_bytes()
    junk.write_bytes(data[:-3] + b"?" + data[-2:])  # the same session, edited: a conflict, nothing changes
    checker = fuzz_import.Checker()
    checker.open(url, [str(other)])
    assert checker.run(junk, via_cli=False, timeout=60) == ("refused", "conflict")
    with SessionStore.connect(url) as store:  # another writer changes the stored session
        store.open("018da346-a275-7883-9492-51c39b129f0f").append_message({"role": "user", "content": "x"})
    with pytest.raises(AssertionError, match="changed"):
        checker.run(junk, via_cli=False, timeout=60)
