"""``pi-store stats`` against the real Pi's ``AgentSession.getSessionStats`` (the numbers ``/session``
prints), file by file over the imported history (``stats_oracle.mjs`` next to this file; skipped,
with the reason, when ../shared/oracle is not installed).

Where Pi's sums are numbers, ours equal them: counts and tokens exactly, the cost rounded to
1e-10 as every surface reports it (``store.money``). Pi does not always give numbers: its loop
adds whatever a usage record holds, so a message without ``usage`` or ``cost`` throws a TypeError
and a count written as a string turns the total into a string. There the store deliberately
differs (such values count as 0, see ``store.analysis.extract``); the test only checks that it
answers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from store.money import reported_cost
from tests.analysis.conftest import History
from tests.oracle_support import CORPUS_DIR, ORACLE_SKIP_REASON, oracle_available, run_oracle_json

pytestmark = [pytest.mark.oracle, pytest.mark.skipif(not oracle_available(), reason=ORACLE_SKIP_REASON)]

SCRIPT = Path(__file__).with_name("stats_oracle.mjs")
_PI: dict[str, dict] = {}


def pi_stats(files: list[Path]) -> dict[str, dict]:
    """Pi's stats of each file (one oracle run for the whole history, shared by both engines)."""
    missing = [str(path) for path in files if str(path) not in _PI]
    if missing:
        _PI.update(run_oracle_json(SCRIPT, *missing))
    return {str(path): _PI[str(path)] for path in files}


def _numeric(stats: dict) -> bool:
    """Pi's sums are numbers the store reports alike (it counts a cost that is not finite, or
    1e300 or more in magnitude, as 0: a deliberate deviation where Pi's own sum is nonsense)."""
    values = [*stats["tokens"].values(), stats["cost"]]
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) < 1e300 for v in values)


def test_stats_equal_pis_session_stats(history: History) -> None:
    expected = pi_stats(list(history.files.values()))
    compared, deviations = 0, []
    for session_id, path in history.files.items():
        pi = expected[str(path)]
        ours = history.store.stats(session_id)
        if "throws" in pi or not _numeric(pi):
            deviations.append(path)
            continue
        got = {"userMessages": ours.user_messages, "assistantMessages": ours.assistant_messages,
               "toolCalls": ours.tool_calls, "toolResults": ours.tool_results, "totalMessages": ours.total_messages,
               "tokens": {"input": ours.tokens.input, "output": ours.tokens.output,
                          "cacheRead": ours.tokens.cache_read, "cacheWrite": ours.tokens.cache_write,
                          "total": ours.tokens.total}, "cost": ours.cost}
        assert got == {**pi, "cost": reported_cost(pi["cost"])}, path.name  # the rule of store.money
        compared += 1
    assert compared >= 40, f"only {compared} files gave Pi numeric stats"
    # only hand-made corpus files carry usage Pi cannot add up (74 compared, 5 of those, at writing)
    assert all(path.parent == CORPUS_DIR for path in deviations), [p.name for p in deviations]
