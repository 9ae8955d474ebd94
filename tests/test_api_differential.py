"""Writes proven against Pi: operation scripts (tests/apidiff) applied to our SessionManager give
Pi's return values, errors, session snapshots and files byte for byte. Committed goldens run
without Node (tools/api_fixtures.py made them); a small fresh sample runs on the live Pi."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from store.db.engine import ensure_schema, make_engine
from store.format import js_parse
from tests.apidiff.generate import generate, generator_engine
from tests.apidiff.pi import run_on_pi
from tests.apidiff.script import Outcome, StoreFactory, first_difference, parse_script, run_script_on, sync_stores
from tests.async_as_sync import async_stores
from tests.oracle_support import ORACLE_SKIP_REASON, oracle_available

pytestmark = pytest.mark.both_apis  # the scripts run on SessionStore, then on AsyncSessionStore

FIXTURES = Path(__file__).parent / "fixtures" / "api_scripts"
REGRESSIONS = sorted((FIXTURES / "regressions").glob("*.script.json"))
LIVE_SEEDS = range(900_001, 900_009)
ASYNC_SHARE = 8  # the async API runs every 8th random golden and live seed (CI time; both APIs share the write path)
PUBLIC_OPS = {
    "create", "inMemory", "open", "continueRecent", "forkFrom", "appendMessage", "appendThinkingLevelChange",
    "appendModelChange", "appendUsage", "appendCompaction", "compact", "appendCustomEntry", "appendSessionInfo",
    "appendCustomMessageEntry", "appendLabelChange", "appendContextEdit", "branch", "resetLeaf",
    "branchWithSummary", "createBranchedSession", "getSessionName", "getLabel", "uuids", "clock",
}


def _random_cases() -> list[tuple[dict, Outcome]]:
    lines = gzip.decompress((FIXTURES / "random.jsonl.gz").read_bytes()).decode("ascii").split("\n")
    return [(case["script"], Outcome.from_json(case["pi"])) for case in map(js_parse, filter(None, lines))]


@pytest.fixture
def stores(db_url: str, api: str) -> Iterator[StoreFactory]:
    """The stores the scripts run on: ``SessionStore``, or ``AsyncSessionStore`` (tests/async_as_sync.py)."""
    engine = make_engine(db_url)
    ensure_schema(engine)
    try:
        if api == "sync":
            yield sync_stores(engine)
        else:
            with async_stores(db_url) as factory:
                yield factory
    finally:
        engine.dispose()


def _share(api: str, items: list) -> list:
    """All of ``items`` on the sync API, every ``ASYNC_SHARE``-th on the async one."""
    return items if api == "sync" else items[::ASYNC_SHARE]


def test_committed_random_scripts_give_pis_outcome(stores: StoreFactory, api: str) -> None:
    cases = _random_cases()
    assert len(cases) >= 150
    cases = _share(api, cases)
    differences = [f"{script['name']}: {diff}" for script, pi in cases
                   if (diff := first_difference(pi, run_script_on(stores, script), script))]
    assert not differences, f"{len(differences)}/{len(cases)} differ:\n" + "\n".join(differences[:5])


def test_the_committed_scripts_reach_every_public_write_and_navigation_call() -> None:
    used = {step["op"] for script, _ in _random_cases() for step in script["ops"]}
    assert used >= PUBLIC_OPS - {"uuids"}, PUBLIC_OPS - used
    outcomes = [pi for _, pi in _random_cases()]
    errors = {record.get("error") for pi in outcomes for record in pi.results} - {None}
    assert errors >= {"EntryNotFound", "NotOnActiveBranch", "NotEditable", "InvalidReplacement",
                      "InvalidSessionId", "SessionNotFound"}, errors


@pytest.mark.parametrize("path", REGRESSIONS, ids=lambda p: p.name.removesuffix(".script.json"))
def test_regression_scripts_give_pis_outcome(stores: StoreFactory, path: Path) -> None:
    name = path.name.removesuffix(".script.json")
    expected = json.loads((path.parent / f"{name}.pi.json").read_text("utf-8"))
    files = {f.stem: f.read_bytes() for f in (path.parent / f"{name}.files").glob("*.jsonl")}
    script = parse_script(path.read_text("utf-8"))
    pi = Outcome([js_parse(json.dumps(r)) for r in expected["results"]], expected["states"], files)
    assert first_difference(pi, run_script_on(stores, script), script) is None


@pytest.mark.oracle
@pytest.mark.skipif(not oracle_available(), reason=ORACLE_SKIP_REASON)
def test_fresh_random_scripts_on_the_live_pi(stores: StoreFactory, api: str) -> None:
    gen = generator_engine()
    scripts = [generate(seed, 20, 120, gen) for seed in _share(api, list(LIVE_SEEDS))]
    differences = [f"{script['name']}: {diff}" for script, pi in zip(scripts, run_on_pi(scripts), strict=True)
                   if (diff := first_difference(pi, run_script_on(stores, script), script))]
    assert not differences, "\n".join(differences)
