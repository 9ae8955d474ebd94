"""Writes proven against Pi: operation scripts (tests/apidiff) applied to our SessionManager give
Pi's return values, errors, session snapshots and files byte for byte. Committed goldens run
without Node (tools/api_fixtures.py made them); a small fresh sample runs on the live Pi."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from sqlalchemy import Engine

from store.db.engine import ensure_schema, make_engine
from store.format import js_parse
from tests.apidiff.generate import generate, generator_engine
from tests.apidiff.pi import run_on_pi
from tests.apidiff.script import Outcome, first_difference, parse_script, run_script
from tests.oracle_support import ORACLE_SKIP_REASON, oracle_available

FIXTURES = Path(__file__).parent / "fixtures" / "api_scripts"
REGRESSIONS = sorted((FIXTURES / "regressions").glob("*.script.json"))
LIVE_SEEDS = range(900_001, 900_009)
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
def engine(db_url: str) -> Engine:
    engine = make_engine(db_url)
    ensure_schema(engine)
    yield engine
    engine.dispose()


def test_committed_random_scripts_give_pis_outcome(engine: Engine) -> None:
    cases = _random_cases()
    assert len(cases) >= 150
    differences = [f"{script['name']}: {diff}" for script, pi in cases
                   if (diff := first_difference(pi, run_script(engine, script), script))]
    assert not differences, f"{len(differences)}/{len(cases)} differ:\n" + "\n".join(differences[:5])


def test_the_committed_scripts_reach_every_public_write_and_navigation_call() -> None:
    used = {step["op"] for script, _ in _random_cases() for step in script["ops"]}
    assert used >= PUBLIC_OPS - {"uuids"}, PUBLIC_OPS - used
    outcomes = [pi for _, pi in _random_cases()]
    errors = {record.get("error") for pi in outcomes for record in pi.results} - {None}
    assert errors >= {"EntryNotFound", "NotOnActiveBranch", "NotEditable", "InvalidReplacement",
                      "InvalidSessionId", "SessionNotFound"}, errors


@pytest.mark.parametrize("path", REGRESSIONS, ids=lambda p: p.name.removesuffix(".script.json"))
def test_regression_scripts_give_pis_outcome(engine: Engine, path: Path) -> None:
    name = path.name.removesuffix(".script.json")
    expected = json.loads((path.parent / f"{name}.pi.json").read_text("utf-8"))
    files = {f.stem: f.read_bytes() for f in (path.parent / f"{name}.files").glob("*.jsonl")}
    script = parse_script(path.read_text("utf-8"))
    pi = Outcome([js_parse(json.dumps(r)) for r in expected["results"]], expected["states"], files)
    assert first_difference(pi, run_script(engine, script), script) is None


@pytest.mark.oracle
@pytest.mark.skipif(not oracle_available(), reason=ORACLE_SKIP_REASON)
def test_fresh_random_scripts_on_the_live_pi(engine: Engine) -> None:
    gen = generator_engine()
    scripts = [generate(seed, 20, 120, gen) for seed in LIVE_SEEDS]
    differences = [f"{script['name']}: {diff}" for script, pi in zip(scripts, run_on_pi(scripts), strict=True)
                   if (diff := first_difference(pi, run_script(engine, script), script))]
    assert not differences, "\n".join(differences)
